//go:build linux

package exs_test

import (
	"errors"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/exsgo/exs/exs"
)

func TestPollBadInput(t *testing.T) {
	st := newStack(t)
	p := connectAddr(t, st, exs.SockStream, testAddr(t))
	fresh, _ := st.Socket(exs.SockStream)
	closed, _ := st.Socket(exs.SockStream)
	closed.Close(p.q, "close")
	waitType(t, p.q, exs.EventClose, "close")
	tests := []struct {
		name   string
		s      *exs.Socket
		q      *exs.Queue
		events exs.PollEvents
		want   error
	}{
		{"no events", p.client, p.q, 0, exs.ErrInvalid},
		{"unknown event", p.client, p.q, 1 << 5, exs.ErrInvalid},
		{"nil queue", p.client, nil, exs.PollIn, exs.ErrInvalid},
		{"unconnected", fresh, p.q, exs.PollIn, exs.ErrNotConnected},
		{"closed", closed, p.q, exs.PollIn, exs.ErrClosed},
	}
	for _, tt := range tests {
		if err := tt.s.Poll(tt.q, tt.events, "poll"); !errors.Is(err, tt.want) {
			t.Errorf("%s: Poll = %v, want %v", tt.name, err, tt.want)
		}
	}
	noEvent(t, p.q)
	// Control slots are limited: the ninth poll would block.
	var err error
	for i := range 9 {
		if err = p.client.Poll(p.q, exs.PollIn, i); err != nil {
			break
		}
	}
	if !errors.Is(err, exs.ErrWouldBlock) {
		t.Errorf("ninth outstanding poll: %v, want ErrWouldBlock", err)
	}
}

func TestPoll(t *testing.T) {
	for _, pv := range providers {
		for _, mode := range []exs.Mode{exs.ModeDynamic, exs.ModeIndirectOnly} {
			t.Run(pv.name+"/"+mode.String(), func(t *testing.T) {
				st := newStack(t)
				p := connectAddr(t, st, exs.SockStream, pv.addr(t), exs.WithMode(mode))
				// Room for sends: POLLOUT holds at once.
				p.client.Poll(p.q, exs.PollOut|exs.PollIn, "out")
				ev := waitType(t, p.q, exs.EventPoll, "out")
				if ev.Err != nil || ev.Revents() != exs.PollOut {
					t.Fatalf("poll out: revents %v, err %v", ev.Revents(), ev.Err)
				}
				// Nothing to receive: POLLIN waits, until bytes arrive.
				p.server.Poll(p.q, exs.PollIn, "in")
				noEvent(t, p.q)
				p.client.Send(p.q, []byte("abc"), nil, 0, "send")
				got := map[any]exs.Event{}
				for range 2 {
					ev := wait(t, p.q)
					got[ev.User] = ev
				}
				if ev := got["in"]; ev.Type != exs.EventPoll || ev.Err != nil || ev.Revents() != exs.PollIn {
					t.Fatalf("poll in: %v revents %v, err %v", ev.Type, ev.Revents(), ev.Err)
				}
				buf := make([]byte, 8)
				p.server.Recv(p.q, buf, nil, 0, "recv")
				if ev := waitType(t, p.q, exs.EventRecv, "recv"); string(buf[:ev.N]) != "abc" {
					t.Fatalf("recv %q", buf[:ev.N])
				}
				// The end of the stream makes POLLIN hold.
				p.server.Poll(p.q, exs.PollIn, "eof")
				noEvent(t, p.q)
				p.client.Shutdown(p.q, "shutdown")
				got = map[any]exs.Event{}
				for range 2 {
					ev := wait(t, p.q)
					got[ev.User] = ev
				}
				if ev := got["eof"]; ev.Revents() != exs.PollIn {
					t.Fatalf("poll at the end of the stream: revents %v, err %v", ev.Revents(), ev.Err)
				}
			})
		}
	}
}

// TestPollOut waits for room for a send: the socket allows one send
// outstanding, and a direct-only send waits for the peer's recv.
func TestPollOut(t *testing.T) {
	for _, pv := range providers {
		t.Run(pv.name, func(t *testing.T) {
			st := newStack(t)
			p := connectAddr(t, st, exs.SockStream, pv.addr(t), exs.WithMode(exs.ModeDirectOnly), exs.WithOutstanding(1, 4))
			p.client.Send(p.q, []byte("abc"), nil, 0, "send")
			if err := p.client.Send(p.q, []byte("d"), nil, 0, "send2"); !errors.Is(err, exs.ErrWouldBlock) {
				t.Fatalf("second send: %v, want ErrWouldBlock", err)
			}
			p.client.Poll(p.q, exs.PollOut, "out")
			noEvent(t, p.q)
			p.server.Recv(p.q, make([]byte, 8), nil, 0, "recv")
			got := map[any]exs.Event{}
			for range 3 {
				ev := wait(t, p.q)
				got[ev.User] = ev
			}
			if ev := got["out"]; ev.Type != exs.EventPoll || ev.Revents() != exs.PollOut || ev.Err != nil {
				t.Fatalf("poll out: %v revents %v, err %v", ev.Type, ev.Revents(), ev.Err)
			}
			if err := p.client.Send(p.q, []byte("d"), nil, 0, "send2"); err != nil {
				t.Fatalf("send after POLLOUT: %v", err)
			}
		})
	}
}

// TestPollListen polls a listening socket for a connection request.
func TestPollListen(t *testing.T) {
	for _, pv := range providers {
		t.Run(pv.name, func(t *testing.T) {
			st := newStack(t)
			q := newQueue(t, st, 16)
			addr := pv.addr(t)
			ln, _ := st.Socket(exs.SockStream)
			if err := ln.Bind(addr); err != nil {
				t.Fatal(err)
			}
			ln.Listen(0)
			ln.Poll(q, exs.PollIn|exs.PollOut, "in")
			noEvent(t, q)
			c, _ := st.Socket(exs.SockStream)
			c.Connect(q, addr, "connect")
			ev := waitType(t, q, exs.EventPoll, "in")
			if ev.Revents() != exs.PollIn || ev.Err != nil {
				t.Fatalf("poll: revents %v, err %v", ev.Revents(), ev.Err)
			}
			ln.Accept(q, "accept")
			got := map[any]exs.Event{}
			for range 2 {
				ev := wait(t, q)
				got[ev.User] = ev
			}
			if got["accept"].Err != nil || got["connect"].Err != nil {
				t.Fatalf("accept %v, connect %v", got["accept"].Err, got["connect"].Err)
			}
			// A poll canceled alone, then one canceled with the socket's
			// operations.
			ln.Poll(q, exs.PollIn, "p1")
			ln.Poll(q, exs.PollIn, "p2")
			ln.Accept(q, "a2")
			ln.CancelOp(q, "p1", "c1")
			if d := cmp.Diff([]brief{
				{Type: exs.EventPoll, User: "p1", Err: syscall.ECANCELED},
				{Type: exs.EventCancel, User: "c1", N: 1},
			}, []brief{briefOf(wait(t, q)), briefOf(wait(t, q))}); d != "" {
				t.Fatalf("CancelOp of a poll (-want +got):\n%s", d)
			}
			ln.Cancel(q, "c2")
			got = map[any]exs.Event{}
			for range 3 {
				ev := wait(t, q)
				got[ev.User] = ev
			}
			if !errors.Is(got["p2"].Err, exs.ErrCanceled) || !errors.Is(got["a2"].Err, exs.ErrCanceled) || got["c2"].N != 2 {
				t.Fatalf("cancel: poll %v, accept %v, cancel N %d", got["p2"].Err, got["a2"].Err, got["c2"].N)
			}
		})
	}
}

// TestPollCancel cancels polls of a connection: alone (the connection
// goes on), then by Close. In ModeDirectOnly bytes go straight into the
// recv, so POLLIN does not hold.
func TestPollCancel(t *testing.T) {
	for _, pv := range providers {
		t.Run(pv.name, func(t *testing.T) {
			st := newStack(t)
			p := connectAddr(t, st, exs.SockSeqPacket, pv.addr(t), exs.WithMode(exs.ModeDirectOnly))
			p.server.Poll(p.q, exs.PollIn, "p1")
			p.server.Poll(p.q, exs.PollIn, "p2")
			if err := p.server.CancelOp(p.q, "p1", "c1"); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff([]brief{
				{Type: exs.EventPoll, User: "p1", Err: syscall.ECANCELED},
				{Type: exs.EventCancel, User: "c1", N: 1},
			}, []brief{briefOf(wait(t, p.q)), briefOf(wait(t, p.q))}); d != "" {
				t.Fatalf("CancelOp of a poll (-want +got):\n%s", d)
			}
			// The connection is intact.
			buf := make([]byte, 8)
			p.client.Send(p.q, []byte("msg"), nil, 0, "send")
			p.server.Recv(p.q, buf, nil, 0, "recv")
			got := map[any]exs.Event{}
			for range 2 {
				ev := wait(t, p.q)
				got[ev.User] = ev
			}
			if ev := got["recv"]; ev.Err != nil || string(buf[:ev.N]) != "msg" {
				t.Fatalf("recv after CancelOp of a poll: %q, %v", buf[:ev.N], ev.Err)
			}
			p.server.Poll(p.q, exs.PollIn, "p3")
			noEvent(t, p.q)
			p.server.Close(p.q, "close")
			if d := cmp.Diff([]brief{
				{Type: exs.EventPoll, User: "p2", Err: syscall.ECANCELED},
				{Type: exs.EventPoll, User: "p3", Err: syscall.ECANCELED},
				{Type: exs.EventClose, User: "close"},
			}, []brief{briefOf(wait(t, p.q)), briefOf(wait(t, p.q)), briefOf(wait(t, p.q))}); d != "" {
				t.Fatalf("Close with a poll outstanding (-want +got):\n%s", d)
			}
		})
	}
}
