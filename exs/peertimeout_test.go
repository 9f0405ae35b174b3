package exs_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/exsgo/exs/exs"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/faults"
	"github.com/exsgo/exs/verbs/inproc"
	"github.com/exsgo/exs/verbs/tcp"
)

// TestPeerTimedOut ends a connection as a provider does when the peer
// stopped answering (verbs/tcp's peer timeout: the queue pair's cause
// matches ETIMEDOUT): the socket's operations fail with ErrPeerTimedOut,
// which matches ETIMEDOUT but not a deadline of the caller's own
// (ErrTimedOut, os.ErrDeadlineExceeded), and the peer counts as gone, not
// as aborted by this end: what it sent before is still received, then the
// recv fails.
func TestPeerTimedOut(t *testing.T) {
	fp := faults.New(inproc.New())
	st := newStack(t, exs.WithProvider("inproc", fp))
	p := connectAddr(t, st, exs.SockStream, testAddr(t))
	// A message each way: the client's end has carried one, and what the
	// server sent is at the client.
	buf := make([]byte, 16)
	if err := p.server.Recv(p.q, buf, nil, 0, "server recv"); err != nil {
		t.Fatal(err)
	}
	if err := p.client.Send(p.q, []byte("x"), nil, 0, "client send"); err != nil {
		t.Fatal(err)
	}
	if err := p.server.Send(p.q, []byte("abc"), nil, 0, "server send"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if ev := wait(t, p.q); ev.Err != nil {
			t.Fatalf("%v %v: %v", ev.Type, ev.User, ev.Err)
		}
	}
	var client *faults.Conn
	for _, c := range fp.Conns() {
		if c.Side() == faults.Dialer {
			client = c
		}
	}
	if client == nil {
		t.Fatal("no dialed connection end")
	}
	client.Drop(fmt.Errorf("%w: no answer from the peer: %w", verbs.ErrTerminated, syscall.ETIMEDOUT))
	got := make([]byte, 16)
	if err := p.client.Recv(p.q, got, nil, 0, "first"); err != nil {
		t.Fatal(err)
	}
	if ev := wait(t, p.q); ev.Err != nil || string(got[:ev.N]) != "abc" {
		t.Fatalf("first recv after the timeout: %q, %v; want what the peer sent before", got[:ev.N], ev.Err)
	}
	if err := p.client.Recv(p.q, got, nil, 0, "second"); err != nil {
		t.Fatal(err)
	}
	ev := wait(t, p.q)
	for _, target := range []error{exs.ErrPeerTimedOut, syscall.ETIMEDOUT} {
		if !errors.Is(ev.Err, target) {
			t.Errorf("second recv: %v, want an error matching %v", ev.Err, target)
		}
	}
	for _, target := range []error{exs.ErrTimedOut, os.ErrDeadlineExceeded} {
		if errors.Is(ev.Err, target) {
			t.Errorf("second recv: %v matches %v, a deadline of the caller's own", ev.Err, target)
		}
	}
	if oe := (*exs.OpError)(nil); !errors.As(ev.Err, &oe) || !oe.Timeout() {
		t.Errorf("second recv: %v is not an OpError whose Timeout reports true", ev.Err)
	}
	if errors.Is(ev.Err, exs.ErrConnReset) || errors.Is(ev.Err, exs.ErrConnAborted) {
		t.Errorf("second recv: %v also matches a reset or an abort", ev.Err)
	}
}

// TestSlowReceiverKeepsConnection: over tcp with a peer timeout of 1 s, a
// receiver that posts no recv for 2.5 s while 32 MiB wait to be sent
// keeps its connection, in every mode: exs's flow control holds the
// sender (nothing is sent beyond the stream buffer and the advertised
// recvs), so the provider never holds a SEND for want of a RECV and the
// TCP window never stays shut (which the peer timeout would take for a
// dead peer).
func TestSlowReceiverKeepsConnection(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the tcp provider is built on Linux only")
	}
	p := tcp.New(tcp.WithPeerTimeout(time.Second))
	t.Cleanup(func() { p.Close() })
	st := newStack(t, exs.WithProvider("tcp", p))
	const n = 32 << 20
	modes := []exs.Mode{exs.ModeDynamic, exs.ModeIndirectOnly, exs.ModeDirectOnly}
	pairs := make([]*pair, len(modes))
	for i, mode := range modes {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := "tcp:" + ln.Addr().String()
		ln.Close()
		pairs[i] = connectAddr(t, st, exs.SockStream, addr, exs.WithMode(mode))
		for range 4 {
			if err := pairs[i].client.Send(pairs[i].q, make([]byte, n/4), nil, 0, "send"); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(2500 * time.Millisecond)
	for i, mode := range modes {
		pr := pairs[i]
		if err := pr.server.Recv(pr.q, make([]byte, n), nil, exs.MsgWaitAll, "recv"); err != nil {
			t.Fatal(err)
		}
		for range 5 {
			if ev := wait(t, pr.q); ev.Err != nil {
				t.Errorf("%v: %v %v: %v", mode, ev.Type, ev.User, ev.Err)
			}
		}
	}
}
