//go:build linux

package exs_test

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/exsgo/exs/exs"
)

func TestOpTimeoutBadInput(t *testing.T) {
	st := newStack(t)
	for _, tt := range []struct{ send, recv time.Duration }{{-1, 0}, {0, -time.Second}} {
		if _, err := st.Socket(exs.SockStream, exs.WithOpTimeout(tt.send, tt.recv)); !errors.Is(err, exs.ErrInvalid) {
			t.Errorf("WithOpTimeout(%v, %v): %v, want ErrInvalid", tt.send, tt.recv, err)
		}
	}
	// A timeout of 0 is none: a recv that waits posts nothing.
	p := connectAddr(t, st, exs.SockStream, testAddr(t), exs.WithOpTimeout(0, 0))
	p.server.Recv(p.q, make([]byte, 4), nil, 0, "recv")
	noEvent(t, p.q)
	if got := p.q.Outstanding(); got != 1 {
		t.Errorf("Outstanding with no timeout = %d, want 1", got)
	}
	// With a timeout, an operation needs room for two events.
	q := newQueue(t, st, 2)
	pt := connectAddr(t, st, exs.SockStream, testAddr(t), exs.WithOpTimeout(time.Hour, time.Hour))
	if err := pt.server.Recv(q, make([]byte, 4), nil, 0, "r1"); err != nil {
		t.Fatal(err)
	}
	if got := q.Outstanding(); got != 2 {
		t.Errorf("Outstanding with a timeout = %d, want 2 (the recv and its timeout)", got)
	}
	if err := pt.server.Recv(q, make([]byte, 4), nil, 0, "r2"); !errors.Is(err, exs.ErrWouldBlock) {
		t.Errorf("recv into a full queue: %v, want ErrWouldBlock", err)
	}
	// Completing without timing out gives the room back.
	pt.client.Send(pt.q, []byte("ab"), nil, 0, "send")
	waitType(t, pt.q, exs.EventSend, "send")
	waitType(t, q, exs.EventRecv, "r1")
	if got := q.Outstanding(); got != 0 {
		t.Errorf("Outstanding after the recv = %d, want 0", got)
	}
	noEvent(t, q)
	if err := st.Qdelete(q); err != nil {
		t.Errorf("Qdelete after the recv: %v", err)
	}
}

func TestOpTimeout(t *testing.T) {
	const d = 30 * time.Millisecond
	for _, pv := range providers {
		for _, wm := range []exs.WaitMode{exs.WaitAdaptive, exs.WaitBusyPoll} {
			t.Run(pv.name+"/"+wm.String(), func(t *testing.T) {
				st := newStack(t)
				p := connectAddr(t, st, exs.SockStream, pv.addr(t),
					exs.WithMode(exs.ModeDirectOnly), exs.WithOpTimeout(d, d), exs.WithWaitMode(wm))
				// A recv with nothing to receive times out once, then
				// still completes.
				start := time.Now()
				buf := make([]byte, 8)
				p.server.Recv(p.q, buf, nil, 0, "recv")
				waitType(t, p.q, exs.EventRecvTimeout, "recv")
				if el := time.Since(start); el < d {
					t.Errorf("recv timeout after %v, want >= %v", el, d)
				}
				noEvent(t, p.q) // once only
				time.Sleep(2 * d)
				noEvent(t, p.q)
				p.client.Send(p.q, []byte("late"), nil, 0, "send")
				// The send may itself time out on a loaded machine.
				got := map[any]exs.Event{}
				for got["recv"].Type == 0 || got["send"].Type != exs.EventSend {
					ev := wait(t, p.q)
					if ev.Type == exs.EventSendTimeout && ev.User == "send" && got["send"].Type == 0 {
						got["send"] = exs.Event{Type: ev.Type}
						continue
					}
					got[ev.User] = ev
				}
				if ev := got["recv"]; ev.Type != exs.EventRecv || ev.Err != nil || string(buf[:ev.N]) != "late" {
					t.Fatalf("recv after its timeout: %v %q %v", ev.Type, buf[:ev.N], ev.Err)
				}
				// A direct-only send with no recv at the peer times out;
				// canceling it then ends the connection.
				p.client.Send(p.q, []byte("x"), nil, 0, "send2")
				waitType(t, p.q, exs.EventSendTimeout, "send2")
				if err := p.client.CancelOp(p.q, "send2", "cancel"); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff([]brief{
					{Type: exs.EventSend, User: "send2", Err: syscall.ECANCELED},
					{Type: exs.EventCancel, User: "cancel", N: 1},
				}, []brief{briefOf(wait(t, p.q)), briefOf(wait(t, p.q))}); diff != "" {
					t.Fatalf("cancel after a send timeout (-want +got):\n%s", diff)
				}
				if got := p.q.Outstanding(); got != 0 {
					t.Errorf("Outstanding at the end = %d, want 0", got)
				}
			})
		}
	}
}

// TestOpTimeoutEnd: in TimeoutEnd mode an operation that times out ends
// with ETIMEDOUT and the bytes it moved, without a timeout event, and the
// connection with it.
func TestOpTimeoutEnd(t *testing.T) {
	const d = 30 * time.Millisecond
	if _, err := newStack(t).Socket(exs.SockStream, exs.WithTimeoutMode(exs.TimeoutEnd+1)); !errors.Is(err, exs.ErrInvalid) {
		t.Errorf("an unknown timeout mode: %v, want ErrInvalid", err)
	}
	for _, pv := range providers {
		t.Run(pv.name, func(t *testing.T) {
			t.Run("recv with part of its bytes", func(t *testing.T) {
				st := newStack(t)
				// Long enough for the bytes to come first on a loaded
				// machine.
				const d = 500 * time.Millisecond
				p := connectAddr(t, st, exs.SockStream, pv.addr(t), exs.WithMode(exs.ModeIndirectOnly),
					exs.WithOpTimeout(0, d), exs.WithTimeoutMode(exs.TimeoutEnd))
				qs := newQueue(t, st, 1) // room for the recv's event alone
				buf := make([]byte, 16)
				start := time.Now()
				if err := p.server.Recv(qs, buf, nil, exs.MsgWaitAll, "recv"); err != nil {
					t.Fatal(err)
				}
				p.client.Send(p.q, []byte("hello"), nil, 0, "send")
				waitType(t, p.q, exs.EventSend, "send")
				ev := waitType(t, qs, exs.EventRecv, "recv")
				if el := time.Since(start); el < d {
					t.Errorf("recv ended after %v, want >= %v", el, d)
				}
				if !errors.Is(ev.Err, exs.ErrTimedOut) || !errors.Is(ev.Err, syscall.ETIMEDOUT) || ev.N != 5 || string(buf[:5]) != "hello" {
					t.Fatalf("recv: N %d %q, %v; want 5 hello, ETIMEDOUT", ev.N, buf[:ev.N], ev.Err)
				}
				noEvent(t, qs)
				// The connection has ended: later operations fail with
				// ETIMEDOUT, the peer sees it reset.
				if err := p.server.Send(qs, []byte("x"), nil, 0, "late"); err != nil {
					t.Fatal(err)
				}
				if ev := waitType(t, qs, exs.EventSend, "late"); !errors.Is(ev.Err, exs.ErrTimedOut) {
					t.Errorf("send after the timeout: %v, want ETIMEDOUT", ev.Err)
				}
				p.client.Recv(p.q, make([]byte, 4), nil, 0, "peer recv")
				if ev := waitType(t, p.q, exs.EventRecv, "peer recv"); !errors.Is(ev.Err, exs.ErrConnReset) {
					t.Errorf("peer recv: %v, want ECONNRESET", ev.Err)
				}
			})
			t.Run("send larger than the peer's recv", func(t *testing.T) {
				// On a loaded machine the send may time out before the
				// peer's recv has reached it (its advertisement late by
				// more than the timeout): then nothing moved, both ends
				// must say so, and the case runs again with a longer
				// timeout.
				for to := d; !sendPastRecv(t, pv.addr(t), to); to *= 4 {
					if to >= 2*time.Second {
						t.Fatalf("the send timed out before the peer's recv reached it with every timeout up to %v", to)
					}
					t.Logf("the send timed out after %v before the peer's recv reached it; again with %v", to, 4*to)
				}
			})
			t.Run("timeout 0 is none", func(t *testing.T) {
				st := newStack(t)
				p := connectAddr(t, st, exs.SockStream, pv.addr(t), exs.WithOpTimeout(0, 0), exs.WithTimeoutMode(exs.TimeoutEnd))
				p.server.Recv(p.q, make([]byte, 4), nil, 0, "recv")
				time.Sleep(2 * d)
				noEvent(t, p.q)
				p.client.Send(p.q, []byte("ok"), nil, 0, "send")
				for range 2 {
					if ev := wait(t, p.q); ev.Err != nil {
						t.Fatalf("%v: %v", ev.User, ev.Err)
					}
				}
			})
		})
	}
}

// sendPastRecv sends 5000 bytes, direct only, to a peer recv of 1000, with
// a send timeout of d under TimeoutEnd: the send must end with ETIMEDOUT
// and the 1000 bytes the peer took, the connection with it, and the peer
// must see it reset with nothing more. It returns false, having checked
// that nothing moved, if the send timed out before the peer's recv
// reached it.
func sendPastRecv(t *testing.T, addr string, d time.Duration) bool {
	st := newStack(t)
	p := connectAddr(t, st, exs.SockStream, addr, exs.WithMode(exs.ModeDirectOnly),
		exs.WithOpTimeout(d, 0), exs.WithTimeoutMode(exs.TimeoutEnd))
	buf := make([]byte, 1000)
	p.server.Recv(p.q, buf, nil, 0, "recv")
	qc := newQueue(t, st, 2)
	start := time.Now()
	if err := p.client.Send(qc, make([]byte, 5000), nil, 0, "send"); err != nil {
		t.Fatal(err)
	}
	if err := p.client.Recv(qc, make([]byte, 8), nil, 0, "client recv"); err != nil {
		t.Fatal(err)
	}
	peer := waitType(t, p.q, exs.EventRecv, "recv")
	got := []brief{briefOf(wait(t, qc)), briefOf(wait(t, qc))}
	if el := time.Since(start); el < d {
		t.Errorf("send ended after %v, before its timeout of %v", el, d)
	}
	late := peer.N == 0 && errors.Is(peer.Err, exs.ErrConnReset)
	if !late && (peer.Err != nil || peer.N != 1000) {
		t.Fatalf("peer recv: N %d, %v", peer.N, peer.Err)
	}
	want := []brief{
		{Type: exs.EventSend, User: "send", N: peer.N, Err: syscall.EIO},
		{Type: exs.EventRecv, User: "client recv", Err: syscall.EIO},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("events with the peer's recv of N %d, %v (-want +got):\n%s", peer.N, peer.Err, diff)
	}
	if late {
		return false
	}
	rest, err := drainPeer(t, p.server, p.q)
	if len(rest) != 0 || !errors.Is(err, exs.ErrConnReset) {
		t.Fatalf("peer after the timeout: %d bytes, %v", len(rest), err)
	}
	return true
}
