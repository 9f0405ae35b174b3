package verbs

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// newNopQP returns a queue pair of a device over nopProvider, with one CQ
// of cqDepth entries for both queues and a send queue of sendDepth (0: the
// default), all closed when the test ends.
func newNopQP(t *testing.T, cqDepth, sendDepth int) (*QP, *CQ) {
	t.Helper()
	d, err := Open(nopProvider{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(cqDepth, CQOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cq.Close() })
	qp, err := pd.CreateQP(QPConfig{SendCQ: cq, RecvCQ: cq, SendDepth: sendDepth})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qp.Close() })
	return qp, cq
}

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
	qp, _ := newNopQP(t, 4, 0)

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

// TestErrWhileResetting checks the guarantee of TestErrWhenInError on the
// way out of Error: Modify(Reset) clears the cause and leaves Error
// together, so that a goroutine never sees State read Error, before and
// after asking Err, with Err nil and no Reset returned in between (nor a
// Done channel still open). One goroutine cycles the queue pair through
// Error, Reset and Init while another reads State, Err and Done; it counts
// the Resets that returned, so that a new cycle's Error is not taken for
// the old one.
func TestErrWhileResetting(t *testing.T) {
	qp, _ := newNopQP(t, 4, 0)

	const cycles = 20000
	var resets atomic.Int64
	stop := make(chan struct{})
	cycled := make(chan error, 1)
	go func() {
		defer close(stop)
		for range cycles {
			for _, to := range []State{StateError, StateReset, StateInit} {
				if err := qp.Modify(to); err != nil {
					cycled <- fmt.Errorf("Modify(%v): %w", to, err)
					return
				}
				if to == StateReset {
					resets.Add(1)
				}
			}
		}
		cycled <- nil
	}()
	bad := 0
	for {
		select {
		case <-stop:
			if err := <-cycled; err != nil {
				t.Fatal(err)
			}
			if bad > 0 {
				t.Errorf("%d times State read Error before and after an Err of nil or an open Done, with no Reset between", bad)
			}
			return
		default:
		}
		n := resets.Load()
		s1 := qp.State()
		e := qp.Err()
		done := qp.Done()
		s2 := qp.State()
		if s1 != StateError || s2 != StateError || resets.Load() != n {
			continue
		}
		select {
		case <-done:
			if e != nil {
				continue
			}
		default:
		}
		bad++
	}
}

// TestPostSendWhileResetting checks that a send posted in the Error state
// completes flushed even when Modify(Reset) runs at the same time: the
// queue pair must not leave Error with it queued, where nothing runs it
// (it would go out on the next connection, and a Modify(Reset) from Init,
// whose drain waits for it, would never return). One goroutine posts sends
// and polls their completions while another cycles the queue pair through
// Error, Reset and Init; after each Reset the send queue must be empty.
func TestPostSendWhileResetting(t *testing.T) {
	qp, cq := newNopQP(t, 64, 16)

	stop := make(chan struct{})
	posted := make(chan int)
	go func() {
		n := 0
		wcs := make([]WC, 64)
		for {
			select {
			case <-stop:
				posted <- n
				return
			default:
			}
			if qp.PostSend(SendWR{WRID: uint64(n), Opcode: OpSend, Flags: Signaled}) == nil {
				n++
			}
			cq.Poll(wcs)
		}
	}()
	const cycles = 20000
	left := 0
	for range cycles {
		for _, to := range []State{StateError, StateReset, StateInit} {
			if err := qp.Modify(to); err != nil {
				close(stop)
				<-posted
				t.Fatalf("Modify(%v): %v", to, err)
			}
			if to == StateReset {
				qp.sq.mu.Lock()
				if qp.sq.head != qp.sq.tail {
					left++
				}
				qp.sq.mu.Unlock()
			}
		}
	}
	close(stop)
	n := <-posted
	if left > 0 {
		t.Errorf("%d of %d Resets left a send posted in Error queued (%d sends posted)", left, cycles, n)
	}
	if n == 0 {
		t.Errorf("no send was posted in Error")
	}
}
