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
