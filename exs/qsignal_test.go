//go:build linux

package exs_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/exsgo/exs/exs"
)

// providers are the address makers of the in-process and same-host
// providers: each returns an address no other test uses.
var providers = []struct {
	name string
	addr func(t testing.TB) string
}{
	{"inproc", testAddr},
	{"shm", func(t testing.TB) string {
		// Unix socket paths are short: not under t.TempDir.
		dir, err := os.MkdirTemp("", "exs")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		return "shm:" + filepath.Join(dir, "s")
	}},
}

// connectAddr makes a connected pair of stack st on addr; the connect and
// accept events go to a queue of their own.
func connectAddr(t testing.TB, st *exs.Stack, typ exs.SockType, addr string, opts ...exs.SocketOption) *pair {
	t.Helper()
	p := &pair{st: st, q: newQueue(t, st, 64)}
	ln, err := st.Socket(typ, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := ln.Bind(addr); err != nil {
		t.Fatal(err)
	}
	if err := ln.Listen(0); err != nil {
		t.Fatal(err)
	}
	if err := ln.Accept(p.q, "accept"); err != nil {
		t.Fatal(err)
	}
	cl, err := st.Socket(typ, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Connect(p.q, addr, "connect"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		ev := wait(t, p.q)
		switch {
		case ev.Type == exs.EventConnect && ev.Err == nil:
		case ev.Type == exs.EventAccept && ev.Err == nil && ev.Accepted != nil:
			p.server = ev.Accepted
		default:
			t.Fatalf("connecting: event %v (user %v): %v", ev.Type, ev.User, ev.Err)
		}
	}
	p.ln, p.client = ln, cl
	return p
}

// readable reports whether fd polls readable within d.
func readable(t testing.TB, fd int, d time.Duration) bool {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(d/time.Millisecond))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		return n == 1 && fds[0].Revents&unix.POLLIN != 0
	}
}

// signaled reports whether ch holds a value within d.
func signaled(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	default:
	}
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

func TestQueueSignal(t *testing.T) {
	for _, pv := range providers {
		t.Run(pv.name, func(t *testing.T) {
			st := newStack(t)
			p := connectAddr(t, st, exs.SockSeqPacket, pv.addr(t))
			q := newQueue(t, st, 8)
			if got := q.Cap(); got != 8 {
				t.Errorf("Cap = %d, want 8", got)
			}
			ch := q.Signal()
			fd, err := q.SignalFD()
			if err != nil {
				t.Fatal(err)
			}
			if fd2, err := q.SignalFD(); fd2 != fd || err != nil {
				t.Errorf("second SignalFD = %d, %v; want %d, nil", fd2, err, fd)
			}
			if readable(t, fd, 0) || signaled(ch, 0) {
				t.Fatal("signal raised on an empty queue")
			}

			// Two recvs, two messages: two events.
			for i := range 2 {
				if err := p.server.Recv(q, make([]byte, 16), nil, 0, i); err != nil {
					t.Fatal(err)
				}
			}
			if got := q.Outstanding(); got != 2 {
				t.Errorf("Outstanding = %d, want 2", got)
			}
			for range 2 {
				if err := p.client.Send(p.q, []byte("hi"), nil, 0, "send"); err != nil {
					t.Fatal(err)
				}
				waitType(t, p.q, exs.EventSend, "send")
			}
			if !readable(t, fd, testTimeout) {
				t.Fatal("fd not readable with events queued")
			}
			if !signaled(ch, testTimeout) {
				t.Fatal("channel empty with events queued")
			}
			waitUntil(t, "two events queued", func() bool { return q.Len() == 2 })
			if got := q.Outstanding(); got != 0 {
				t.Errorf("Outstanding = %d with every event queued, want 0", got)
			}

			// A dequeue that leaves an event keeps the signal raised and
			// puts the channel's value back.
			var evs [1]exs.Event
			if n := q.TryDequeue(evs[:]); n != 1 || evs[0].User != 0 {
				t.Fatalf("TryDequeue = %d (%v)", n, evs[0].User)
			}
			if r, c := readable(t, fd, 0), signaled(ch, 0); !r || !c {
				t.Fatalf("signal lowered with an event still queued: fd readable %v, channel %v", r, c)
			}
			// The dequeue that empties the queue lowers it.
			if n, err := q.Dequeue(evs[:], 1, 0); n != 1 || err != nil || evs[0].User != 1 {
				t.Fatalf("Dequeue = %d, %v (%v)", n, err, evs[0].User)
			}
			if readable(t, fd, 0) || signaled(ch, 0) || q.Len() != 0 {
				t.Fatal("signal raised on an emptied queue")
			}
			// A dequeue that finds nothing keeps it lowered.
			if n := q.TryDequeue(evs[:]); n != 0 {
				t.Fatalf("TryDequeue on empty queue = %d", n)
			}
			if readable(t, fd, 0) || signaled(ch, 0) {
				t.Fatal("signal raised by an empty dequeue")
			}

			// Qdelete releases the descriptor and leaves the channel
			// signaled, so that a waiter looks and sees ErrClosed.
			if err := st.Qdelete(q); err != nil {
				t.Fatal(err)
			}
			if got := exs.SignalFDOf(q); got != -1 {
				t.Errorf("descriptor after Qdelete = %d, want -1 (released)", got)
			}
			if _, err := q.SignalFD(); !errors.Is(err, exs.ErrClosed) {
				t.Errorf("SignalFD after Qdelete: %v, want ErrClosed", err)
			}
			if !signaled(ch, 0) {
				t.Error("channel not signaled after Qdelete")
			}
			// The goroutine that posted the last event may not have
			// returned from posting yet: the queue closes once it has
			// (TestQdeleteAfterLastEvent), so the dequeue waits for it.
			if _, err := q.Dequeue(evs[:], 1, testTimeout); !errors.Is(err, exs.ErrClosed) {
				t.Errorf("Dequeue after Qdelete: %v, want ErrClosed", err)
			}
		})
	}
}

// TestQueueSignalLate asks for the signal when events are already queued:
// it starts raised.
func TestQueueSignalLate(t *testing.T) {
	st := newStack(t)
	q := newQueue(t, st, 4)
	s, err := st.Socket(exs.SockStream)
	if err != nil {
		t.Fatal(err)
	}
	// A cancel of an unconnected socket completes at once.
	if err := s.Cancel(q, "cancel"); err != nil {
		t.Fatal(err)
	}
	fd, err := q.SignalFD()
	if err != nil {
		t.Fatal(err)
	}
	if !readable(t, fd, 0) || !signaled(q.Signal(), 0) {
		t.Fatal("signal lowered with an event queued before it was asked for")
	}
	waitType(t, q, exs.EventCancel, "cancel")
	if readable(t, fd, 0) {
		t.Fatal("fd readable after the queue was emptied")
	}
	// Stack.Close releases the descriptor too.
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if got := exs.SignalFDOf(q); got != -1 {
		t.Errorf("descriptor after Stack.Close = %d, want -1", got)
	}
}

// TestQueueSignalLoop drives a connection from a poll loop on the signal
// descriptor, as an epoll program would, while events arrive from the
// progress goroutines: a lost wake-up shows as a poll that times out with
// events still to come.
func TestQueueSignalLoop(t *testing.T) {
	for _, pv := range providers {
		t.Run(pv.name, func(t *testing.T) {
			seed := rand.Uint64()
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 0))
			st := newStack(t)
			p := connectAddr(t, st, exs.SockStream, pv.addr(t))
			q := newQueue(t, st, 64)
			fd, err := q.SignalFD()
			if err != nil {
				t.Fatal(err)
			}
			const total = 1 << 16
			src := make([]byte, total)
			for i := range src {
				src[i] = byte(rng.Uint32())
			}
			dst := make([]byte, 0, total)
			// Sends of random sizes and recvs of 4 KiB, all on q.
			sent, sends, recvs := 0, 0, 0
			post := func() {
				for sends < 8 && sent < total {
					n := min(1+rng.IntN(8192), total-sent)
					if err := p.client.Send(q, src[sent:sent+n], nil, 0, "send"); err != nil {
						t.Fatal(err)
					}
					sent += n
					sends++
				}
				for recvs < 8 {
					buf := make([]byte, 4096)
					if err := p.server.Recv(q, buf, nil, 0, buf); err != nil {
						t.Fatal(err)
					}
					recvs++
				}
			}
			post()
			var evs [16]exs.Event
			for len(dst) < total {
				if !readable(t, fd, testTimeout) {
					t.Fatalf("no wake-up: %d of %d bytes received, %d events queued", len(dst), total, q.Len())
				}
				for {
					n := q.TryDequeue(evs[:])
					for _, ev := range evs[:n] {
						if ev.Err != nil {
							t.Fatalf("%v: %v", ev.Type, ev.Err)
						}
						switch ev.Type {
						case exs.EventSend:
							sends--
						case exs.EventRecv:
							recvs--
							dst = append(dst, ev.User.([]byte)[:ev.N]...)
						}
					}
					if n == 0 {
						break
					}
				}
				post()
			}
			if !bytes.Equal(dst, src) {
				t.Fatal("bytes received differ from bytes sent")
			}
		})
	}
}
