//go:build linux

package exs_test

import (
	"errors"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/exsgo/exs/exs"
)

// brief is what a test checks of an event.
type brief struct {
	Type exs.EventType
	User any
	N    int
	Err  syscall.Errno // 0: no error
}

func briefOf(ev exs.Event) brief {
	b := brief{Type: ev.Type, User: ev.User, N: ev.N}
	if ev.Err != nil {
		for _, e := range []syscall.Errno{syscall.ECANCELED, syscall.ENOENT, syscall.ECONNRESET, syscall.EPIPE} {
			if errors.Is(ev.Err, e) {
				b.Err = e
				break
			}
		}
		if b.Err == 0 {
			b.Err = syscall.EIO
		}
	}
	return b
}

func TestCancelOpBadInput(t *testing.T) {
	st := newStack(t)
	p := connectAddr(t, st, exs.SockStream, testAddr(t))
	other := newStack(t)
	tests := []struct {
		name   string
		q      *exs.Queue
		target any
		want   error
	}{
		{"nil queue", nil, "x", exs.ErrInvalid},
		{"queue of another stack", newQueue(t, other, 4), "x", exs.ErrInvalid},
		{"nil target", p.q, nil, exs.ErrInvalid},
		{"uncomparable target", p.q, []byte("x"), exs.ErrInvalid},
		{"never posted", p.q, "nothing", exs.ErrNotFound},
		// The connect and the accept completed (events dequeued).
		{"connect already complete", p.q, "connect", exs.ErrNotFound},
		{"accept already complete", p.q, "accept", exs.ErrNotFound},
	}
	for _, tt := range tests {
		err := p.client.CancelOp(tt.q, tt.target, "cancel")
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: CancelOp = %v, want %v", tt.name, err, tt.want)
		}
	}
	if !errors.Is(exs.ErrNotFound, syscall.ENOENT) {
		t.Error("ErrNotFound does not match ENOENT")
	}
	// A send completed and its event dequeued: nothing to cancel, and the
	// connection goes on.
	p.server.Recv(p.q, make([]byte, 8), nil, 0, "recv")
	p.client.Send(p.q, []byte("abc"), nil, 0, "send")
	var got []brief
	for range 2 {
		got = append(got, briefOf(wait(t, p.q)))
	}
	if err := p.client.CancelOp(p.q, "send", "cancel"); !errors.Is(err, exs.ErrNotFound) {
		t.Errorf("CancelOp of a completed send = %v, want ErrNotFound", err)
	}
	noEvent(t, p.q)
	if err := p.client.Send(p.q, []byte("d"), nil, 0, "send2"); err != nil {
		t.Fatal(err)
	}
	waitType(t, p.q, exs.EventSend, "send2")
	// A closed socket.
	p.client.Close(p.q, "close")
	waitType(t, p.q, exs.EventClose, "close")
	if err := p.client.CancelOp(p.q, "x", "cancel"); !errors.Is(err, exs.ErrClosed) {
		t.Errorf("CancelOp on a closed socket = %v, want ErrClosed", err)
	}
	// An unconnected socket has nothing outstanding.
	s, _ := st.Socket(exs.SockStream)
	if err := s.CancelOp(p.q, "x", "cancel"); !errors.Is(err, exs.ErrNotFound) {
		t.Errorf("CancelOp on a new socket = %v, want ErrNotFound", err)
	}
}

// TestCancelOpAccept cancels one of two accepts: the other stays posted and
// takes the next connection.
func TestCancelOpAccept(t *testing.T) {
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
			ln.Accept(q, "a1")
			ln.Accept(q, "a2")
			if err := ln.CancelOp(q, "a1", "cancel"); err != nil {
				t.Fatal(err)
			}
			got := []brief{briefOf(wait(t, q)), briefOf(wait(t, q))}
			want := []brief{
				{Type: exs.EventAccept, User: "a1", Err: syscall.ECANCELED},
				{Type: exs.EventCancel, User: "cancel", N: 1},
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Fatalf("events (-want +got):\n%s", d)
			}
			// Canceled already: a second cancel finds nothing.
			if err := ln.CancelOp(q, "a1", "cancel"); !errors.Is(err, exs.ErrNotFound) {
				t.Errorf("second CancelOp = %v, want ErrNotFound", err)
			}
			c, _ := st.Socket(exs.SockStream)
			c.Connect(q, addr, "connect")
			got = []brief{briefOf(wait(t, q)), briefOf(wait(t, q))}
			if got[0].Type == exs.EventConnect {
				got[0], got[1] = got[1], got[0]
			}
			want = []brief{
				{Type: exs.EventAccept, User: "a2"},
				{Type: exs.EventConnect, User: "connect"},
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Fatalf("events after the cancel (-want +got):\n%s", d)
			}
		})
	}
}

// TestCancelOpRecv cancels a stream recv that holds some bytes: it reports
// them, and the connection ends as with Cancel.
func TestCancelOpRecv(t *testing.T) {
	for _, pv := range providers {
		t.Run(pv.name, func(t *testing.T) {
			st := newStack(t)
			p := connectAddr(t, st, exs.SockStream, pv.addr(t), exs.WithMode(exs.ModeIndirectOnly))
			buf := make([]byte, 16)
			p.server.Recv(p.q, buf, nil, exs.MsgWaitAll, "r1")
			p.server.Recv(p.q, make([]byte, 16), nil, 0, "r2")
			p.client.Send(p.q, []byte("hello"), nil, 0, "send")
			waitType(t, p.q, exs.EventSend, "send")
			waitUntil(t, "5 bytes copied into the recv", func() bool { return p.server.Stats().BytesCopied == 5 })
			if err := p.server.CancelOp(p.q, "r1", "cancel"); err != nil {
				t.Fatal(err)
			}
			var got []brief
			for range 3 {
				got = append(got, briefOf(wait(t, p.q)))
			}
			want := []brief{
				{Type: exs.EventRecv, User: "r1", N: 5, Err: syscall.ECANCELED},
				{Type: exs.EventRecv, User: "r2", Err: syscall.ECANCELED},
				{Type: exs.EventCancel, User: "cancel", N: 2},
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Fatalf("events (-want +got):\n%s", d)
			}
			if string(buf[:5]) != "hello" {
				t.Errorf("recv buffer %q, want hello", buf[:5])
			}
			// The connection has ended: the peer's recv sees it reset.
			p.client.Recv(p.q, make([]byte, 4), nil, 0, "peer recv")
			ev := waitType(t, p.q, exs.EventRecv, "peer recv")
			if !errors.Is(ev.Err, exs.ErrConnReset) {
				t.Errorf("peer recv after the cancel: %v, want ECONNRESET", ev.Err)
			}
		})
	}
}

// TestCancelOpConnect cancels a connect that no accept takes.
func TestCancelOpConnect(t *testing.T) {
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
			c, _ := st.Socket(exs.SockStream)
			c.Connect(q, addr, "connect")
			c.Send(q, []byte("x"), nil, 0, "send")
			if err := c.CancelOp(q, "connect", "cancel"); err != nil {
				t.Fatal(err)
			}
			var got []brief
			for range 3 {
				got = append(got, briefOf(wait(t, q)))
			}
			want := []brief{
				{Type: exs.EventConnect, User: "connect", Err: syscall.ECANCELED},
				{Type: exs.EventSend, User: "send", Err: syscall.ECANCELED},
				{Type: exs.EventCancel, User: "cancel", N: 2},
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Fatalf("events (-want +got):\n%s", d)
			}
		})
	}
}

// TestCancelOpRace cancels a recv while the peer's send completes it: the
// cancel either finds nothing (at once, or in its event) and the recv
// completes, or it cancels the recv.
func TestCancelOpRace(t *testing.T) {
	for _, pv := range providers {
		t.Run(pv.name, func(t *testing.T) {
			outcomes := map[string]int{}
			for range 30 {
				st := newStack(t)
				p := connectAddr(t, st, exs.SockSeqPacket, pv.addr(t))
				p.server.Recv(p.q, make([]byte, 8), nil, 0, "recv")
				p.client.Send(p.q, []byte("abc"), nil, 0, "send")
				err := p.server.CancelOp(p.q, "recv", "cancel")
				evs := map[any]brief{}
				n := 2
				if err == nil {
					n = 3
				} else if !errors.Is(err, exs.ErrNotFound) {
					t.Fatalf("CancelOp = %v", err)
				}
				for range n {
					b := briefOf(wait(t, p.q))
					evs[b.User] = b
				}
				recv, cancel := evs["recv"], evs["cancel"]
				switch {
				case err != nil:
					outcomes["not found at once"]++
					if recv.Err != 0 || recv.N != 3 {
						t.Fatalf("recv %+v after a cancel that found nothing", recv)
					}
				case cancel.Err == syscall.ENOENT:
					outcomes["not found in the event"]++
					if recv.Err != 0 || recv.N != 3 || cancel.N != 0 {
						t.Fatalf("recv %+v, cancel %+v", recv, cancel)
					}
				default:
					outcomes["canceled"]++
					if recv.Err != syscall.ECANCELED || cancel.Err != 0 || cancel.N != 1 {
						t.Fatalf("recv %+v, cancel %+v", recv, cancel)
					}
				}
				st.Close()
			}
			t.Logf("outcomes: %v", outcomes)
		})
	}
}
