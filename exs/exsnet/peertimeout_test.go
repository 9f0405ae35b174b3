package exsnet_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/exsgo/exs/exs"
	"github.com/exsgo/exs/exs/exsnet"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/faults"
	"github.com/exsgo/exs/verbs/inproc"
)

// TestPeerTimedOut: a connection whose provider found the peer silent (the
// tcp provider's peer timeout; here a connection dropped with that cause)
// reads what arrived, then fails as a Go TCP connection does after its
// user timeout: an error matching ETIMEDOUT that is a timeout, but not
// os.ErrDeadlineExceeded, which would tell the caller that a deadline of
// its own passed and that it may extend it and read on.
func TestPeerTimedOut(t *testing.T) {
	fp := faults.New(inproc.New())
	st, err := exs.NewStack(exs.WithProvider("inproc", fp))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c, s := connPair(t, inprocAddr(t), exsnet.WithStack(st))
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(s, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	// The bytes are at the client before its connection drops.
	got := make([]byte, 3)
	c.SetReadDeadline(time.Now().Add(testTimeout))
	if _, err := io.ReadFull(c, got[:1]); err != nil {
		t.Fatal(err)
	}
	dialed(t, fp).Drop(fmt.Errorf("%w: no answer from the peer: %w", verbs.ErrTerminated, syscall.ETIMEDOUT))
	if _, err := io.ReadFull(c, got[1:]); err != nil || string(got) != "abc" {
		t.Fatalf("read after the timeout: %q, %v; want what the peer sent before", got, err)
	}
	_, err = c.Read(got)
	if !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("Read: %v, want an error matching ETIMEDOUT", err)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Read: %v matches os.ErrDeadlineExceeded, a deadline of the caller's own", err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("Read: %v is not a net.Error whose Timeout reports true (as a TCP connection's after its user timeout)", err)
	}
}

// dialed returns the one connection end of fp that dialed.
func dialed(t *testing.T, fp *faults.Provider) *faults.Conn {
	t.Helper()
	var ends []*faults.Conn
	for _, c := range fp.Conns() {
		if c.Side() == faults.Dialer {
			ends = append(ends, c)
		}
	}
	if len(ends) != 1 {
		t.Fatalf("%d dialed connection ends, want 1", len(ends))
	}
	return ends[0]
}
