package verbs

import (
	"errors"
	"testing"
	"time"
)

// TestErrWhenInError checks that Err never finds no cause once State says
// Error: a goroutine that sees the state, or a work request flushed because
// of it (a RECV posted in Error completes flushed at once), and asks Err
// why must get the cause. exs took such a flushed completion for a
// transport failure (ECONNABORTED) where the peer had closed (ECONNRESET),
// and dropped what its stream buffer held. The test holds errMu, as a
// goroutine asking Err at that moment does, while another goroutine moves
// the queue pair to Error: until it lets go, the state must not read Error
// without its cause.
func TestErrWhenInError(t *testing.T) {
	d, err := Open(nopProvider{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(4, CQOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Close()
	qp, err := pd.CreateQP(QPConfig{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Close()

	qp.errMu.Lock()
	failed := make(chan struct{})
	go func() {
		defer close(failed)
		qp.fail(ErrDisconnected)
	}()
	time.Sleep(20 * time.Millisecond) // the move, had it not to wait for errMu
	st, cause := qp.State(), qp.cause
	qp.errMu.Unlock()
	<-failed
	if st == StateError && cause == nil {
		t.Errorf("State was Error while Err had no cause")
	}
	if st, err := qp.State(), qp.Err(); st != StateError || !errors.Is(err, ErrDisconnected) {
		t.Errorf("after the move: state %v, Err %v; want Error, ErrDisconnected", st, err)
	}
}
