package usertest

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/exsgo/exs/exs"
)

// TestESAPIExtras uses the ES-API calls beyond send and recv as a program
// would, over every provider: a queue's signal instead of a blocking
// Dequeue, a cancel of one accept by its user value while the listener
// goes on, a poll for readable bytes, and a recv timeout that leaves the
// recv posted.
func TestESAPIExtras(t *testing.T) {
	for _, af := range addrFuncs {
		t.Run(af.name, func(t *testing.T) {
			st := newStack(t)
			q := newQueue(t, st, 32)
			ln := listen(t, st, q, exs.SockStream, af.addr(t), exs.WithOpTimeout(0, 20*time.Millisecond))
			addr := ln.Addr()

			// Cancel one of two accepts by its user value: the other
			// stays posted and takes the connection.
			if err := ln.Accept(q, "first"); err != nil {
				t.Fatal(err)
			}
			if err := ln.Accept(q, "second"); err != nil {
				t.Fatal(err)
			}
			if err := ln.CancelOp(q, "first", "cancel-first"); err != nil {
				t.Fatal(err)
			}
			got := map[any]exs.Event{}
			for len(got) < 2 {
				ev, err := next(q)
				if err != nil {
					t.Fatal(err)
				}
				got[ev.User] = ev
			}
			if ev := got["first"]; ev.Type != exs.EventAccept || !errors.Is(ev.Err, syscall.ECANCELED) {
				t.Fatalf("canceled accept: %v %v", ev.Type, ev.Err)
			}
			if ev := got["cancel-first"]; ev.Type != exs.EventCancel || ev.Err != nil || ev.N != 1 {
				t.Fatalf("cancel: %v n %d %v", ev.Type, ev.N, ev.Err)
			}
			if err := ln.CancelOp(q, "never-posted", "x"); !errors.Is(err, exs.ErrNotFound) || !errors.Is(err, syscall.ENOENT) {
				t.Fatalf("cancel of an operation never posted: %v", err)
			}

			c := dial(t, st, q, exs.SockStream, addr, "connect")
			var srv *exs.Socket
			for srv == nil || got["connect"].Type == 0 {
				ev, err := next(q)
				if err != nil {
					t.Fatal(err)
				}
				if ev.Err != nil {
					t.Fatalf("%v (%v): %v", ev.Type, ev.User, ev.Err)
				}
				got[ev.User] = ev
				if ev.User == "second" {
					srv = ev.Accepted
				}
			}

			// The recv timeout: reported once, the recv stays posted.
			buf := make([]byte, 64)
			if err := srv.Recv(q, buf, nil, 0, "recv"); err != nil {
				t.Fatal(err)
			}
			wait(t, q, exs.EventRecvTimeout, "recv")

			// A poll for POLLIN on the client: nothing to read yet.
			if err := c.Poll(q, exs.PollIn, "poll"); err != nil {
				t.Fatal(err)
			}

			// The server's recv completes when the bytes come; the
			// queue's signal says events are there before any Dequeue.
			sig := q.Signal()
			if err := c.Send(q, []byte("hello"), nil, 0, "send"); err != nil {
				t.Fatal(err)
			}
			if err := srv.Send(q, []byte("back"), nil, 0, "reply"); err != nil {
				t.Fatal(err)
			}
			seen := map[any]exs.Event{}
			deadline := time.After(30 * time.Second)
			for len(seen) < 4 {
				select {
				case <-sig:
				case <-deadline:
					t.Fatalf("events seen: %v", seen)
				}
				var evs [8]exs.Event
				n, err := q.Dequeue(evs[:], 0, 0)
				if err != nil {
					t.Fatal(err)
				}
				for _, ev := range evs[:n] {
					if ev.Err != nil {
						t.Fatalf("%v (%v): %v", ev.Type, ev.User, ev.Err)
					}
					seen[ev.User] = ev
				}
			}
			if ev := seen["recv"]; ev.Type != exs.EventRecv || string(buf[:ev.N]) != "hello" {
				t.Fatalf("recv: %v %q", ev.Type, buf[:ev.N])
			}
			if ev := seen["poll"]; ev.Type != exs.EventPoll || ev.Revents()&exs.PollIn == 0 {
				t.Fatalf("poll: %v %v", ev.Type, ev.Revents())
			}
			for _, s := range []*exs.Socket{c, srv, ln} {
				if err := s.Close(q, "close"); err != nil {
					t.Fatal(err)
				}
				wait(t, q, exs.EventClose, "close")
			}
		})
	}
}
