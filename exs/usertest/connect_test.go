package usertest

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/exsgo/exs/exs"
)

// Connects as a user relies on them: nothing waits forever on a peer, a
// request the listener would refuse is refused at once whether or not an
// accept is posted, and a listener's backlog is bounded. Each test runs
// over the in-process, the same-host and the TCP provider.

// addrFuncs are the providers' address makers.
var addrFuncs = []struct {
	name string
	addr func(testing.TB) string
}{
	{"inproc", inprocAddr},
	{"shm", shmAddr},
	{"tcp", tcpAddr},
}

// dial posts a connect of a new socket of typ to addr and returns it.
func dial(t *testing.T, st *exs.Stack, q *exs.Queue, typ exs.SockType, addr string, user any, opts ...exs.SocketOption) *exs.Socket {
	t.Helper()
	s, err := st.Socket(typ, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Connect(q, addr, user); err != nil {
		t.Fatal(err)
	}
	return s
}

// wantErr checks that err matches every target.
func wantErr(t *testing.T, what string, err error, targets ...error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %v", what, targets)
	}
	for _, target := range targets {
		if !errors.Is(err, target) {
			t.Errorf("%s: %v does not match %v", what, err, target)
		}
	}
}

func TestConnectTimeLimit(t *testing.T) {
	for _, af := range addrFuncs {
		t.Run(af.name, func(t *testing.T) {
			st := newStack(t)
			q := newQueue(t, st, 16)
			addr := af.addr(t)
			listen(t, st, q, exs.SockStream, addr) // no accept is ever posted

			// The socket's limit.
			s := dial(t, st, q, exs.SockStream, addr, "limit", exs.WithConnectTimeout(50*time.Millisecond))
			ev := wait(t, q, exs.EventConnect, "limit")
			wantErr(t, "connect past its time limit", ev.Err, exs.ErrTimedOut, syscall.ETIMEDOUT, os.ErrDeadlineExceeded)
			var oe *exs.OpError
			if !errors.As(ev.Err, &oe) || !oe.Timeout() || oe.Op != "connect" {
				t.Errorf("the connect's error %v is not an *OpError of connect whose Timeout is true", ev.Err)
			}
			// A socket whose connect failed takes no more operations but
			// Close.
			if err := s.Send(q, []byte("x"), nil, 0, nil); err == nil {
				t.Errorf("send on a socket whose connect timed out: accepted")
			}

			// One connect's context: a deadline shorter than the limit, and
			// a cancel.
			s2, err := st.Socket(exs.SockStream)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			if err := s2.ConnectContext(ctx, q, addr, "deadline"); err != nil {
				t.Fatal(err)
			}
			ev = wait(t, q, exs.EventConnect, "deadline")
			wantErr(t, "connect past its context's deadline", ev.Err, exs.ErrTimedOut, syscall.ETIMEDOUT)

			s3, err := st.Socket(exs.SockStream)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel = context.WithCancel(context.Background())
			if err := s3.ConnectContext(ctx, q, addr, "cancel"); err != nil {
				t.Fatal(err)
			}
			cancel()
			ev = wait(t, q, exs.EventConnect, "cancel")
			wantErr(t, "connect whose context was canceled", ev.Err, exs.ErrCanceled, syscall.ECANCELED)

			// Bad values are refused.
			for _, d := range []time.Duration{0, -time.Second} {
				if _, err := st.Socket(exs.SockStream, exs.WithConnectTimeout(d)); !errors.Is(err, exs.ErrInvalid) {
					t.Errorf("WithConnectTimeout(%v): %v, want ErrInvalid", d, err)
				}
			}
			if err := s3.ConnectContext(nil, q, addr, nil); !errors.Is(err, exs.ErrInvalid) { //nolint:staticcheck // a nil context is the bad input tested
				t.Errorf("ConnectContext with a nil context: %v, want ErrInvalid", err)
			}
		})
	}
}

func TestConnectRefusedAtOnce(t *testing.T) {
	for _, af := range addrFuncs {
		t.Run(af.name, func(t *testing.T) {
			st := newStack(t)
			q := newQueue(t, st, 16)
			addr := af.addr(t)
			ln := listen(t, st, q, exs.SockStream, addr)
			// The connects wait up to a minute: a refusal that comes only
			// with the time limit fails the test (after testTimeout).
			long := exs.WithConnectTimeout(time.Minute)

			// No accept posted: another mode, another type.
			dial(t, st, q, exs.SockStream, addr, "mode", long, exs.WithMode(exs.ModeIndirectOnly))
			wantErr(t, "connect in another mode, no accept posted", wait(t, q, exs.EventConnect, "mode").Err,
				exs.ErrMismatch, syscall.ECONNREFUSED)
			dial(t, st, q, exs.SockSeqPacket, addr, "type", long)
			wantErr(t, "connect of another type, no accept posted", wait(t, q, exs.EventConnect, "type").Err,
				exs.ErrMismatch, syscall.ECONNREFUSED)

			// After the only accept was taken.
			if err := ln.Accept(q, "accept"); err != nil {
				t.Fatal(err)
			}
			dial(t, st, q, exs.SockStream, addr, "good", long)
			got := map[any]exs.Event{}
			for range 2 {
				ev, err := next(q)
				if err != nil {
					t.Fatal(err)
				}
				got[ev.User] = ev
			}
			if got["good"].Err != nil || got["accept"].Err != nil || got["accept"].Accepted == nil {
				t.Fatalf("matching connect: %v, accept: %v", got["good"].Err, got["accept"].Err)
			}
			dial(t, st, q, exs.SockStream, addr, "late", long, exs.WithMode(exs.ModeDirectOnly))
			wantErr(t, "connect in another mode after the accept was taken", wait(t, q, exs.EventConnect, "late").Err,
				exs.ErrMismatch, syscall.ECONNREFUSED)
		})
	}
}

func TestListenBacklog(t *testing.T) {
	for _, af := range addrFuncs {
		t.Run(af.name, func(t *testing.T) {
			st := newStack(t)
			q := newQueue(t, st, 16)
			addr := af.addr(t)
			ln, err := st.Socket(exs.SockStream)
			if err != nil {
				t.Fatal(err)
			}
			if err := ln.Bind(addr); err != nil {
				t.Fatal(err)
			}
			for _, b := range []int{-1, exs.MaxBacklog + 1} {
				if err := ln.Listen(b); !errors.Is(err, exs.ErrInvalid) {
					t.Errorf("Listen(%d): %v, want ErrInvalid", b, err)
				}
			}
			if err := ln.Listen(2); err != nil {
				t.Fatal(err)
			}
			long := exs.WithConnectTimeout(time.Minute)
			// Three requests for a backlog of two, no accept posted: one is
			// refused at once, whichever came last.
			for _, u := range []string{"c1", "c2", "c3"} {
				dial(t, st, q, exs.SockStream, addr, u, long)
			}
			ev, err := next(q)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Type != exs.EventConnect {
				t.Fatalf("event %v (%v), want a connect's", ev.Type, ev.User)
			}
			wantErr(t, "connect beyond the backlog", ev.Err, syscall.ECONNREFUSED)
			if errors.Is(ev.Err, exs.ErrMismatch) {
				t.Errorf("a connect refused for the backlog says the parameters differ: %v", ev.Err)
			}
			refused := ev.User
			// Two accepts take the two that wait.
			for _, u := range []string{"a1", "a2"} {
				if err := ln.Accept(q, u); err != nil {
					t.Fatal(err)
				}
			}
			got := map[any]exs.Event{}
			for range 4 {
				ev, err := next(q)
				if err != nil {
					t.Fatal(err)
				}
				got[ev.User] = ev
			}
			for _, u := range []string{"c1", "c2", "c3", "a1", "a2"} {
				if u == refused {
					continue
				}
				if ev, ok := got[u]; !ok || ev.Err != nil {
					t.Errorf("%s: %+v", u, ev)
				}
			}
		})
	}
}

func TestAcceptSkipsAConnectThatGaveUp(t *testing.T) {
	for _, af := range addrFuncs {
		t.Run(af.name, func(t *testing.T) {
			st := newStack(t)
			q := newQueue(t, st, 16)
			addr := af.addr(t)
			ln := listen(t, st, q, exs.SockStream, addr)
			dial(t, st, q, exs.SockStream, addr, "gaveup", exs.WithConnectTimeout(20*time.Millisecond))
			wantErr(t, "connect", wait(t, q, exs.EventConnect, "gaveup").Err, exs.ErrTimedOut)
			c := dial(t, st, q, exs.SockStream, addr, "waits", exs.WithConnectTimeout(time.Minute))
			if err := ln.Accept(q, "accept"); err != nil {
				t.Fatal(err)
			}
			got := map[any]exs.Event{}
			for range 2 {
				ev, err := next(q)
				if err != nil {
					t.Fatal(err)
				}
				got[ev.User] = ev
			}
			if got["waits"].Err != nil || got["accept"].Err != nil || got["accept"].Accepted == nil {
				t.Fatalf("connect %v, accept %v", got["waits"].Err, got["accept"].Err)
			}
			// The accepted socket is the waiting connect's: a byte goes
			// through.
			if err := c.Send(q, []byte{42}, nil, 0, "send"); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 1)
			if err := got["accept"].Accepted.Recv(q, buf, nil, 0, "recv"); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				ev, err := next(q)
				if err != nil || ev.Err != nil {
					t.Fatalf("%v: %v %v", ev.User, err, ev.Err)
				}
			}
			if buf[0] != 42 {
				t.Errorf("received %d, want 42", buf[0])
			}
		})
	}
}

// TestListenPortZero: a socket that listens on a TCP address with port 0
// gets a port from the system and reports it in its address, and a stack
// with no options connects to it.
func TestListenPortZero(t *testing.T) {
	st := newStack(t)
	q := newQueue(t, st, 16)
	ln := listen(t, st, q, exs.SockStream, "tcp:127.0.0.1:0")
	addr := ln.Addr()
	host, port, err := net.SplitHostPort(strings.TrimPrefix(addr, "tcp:"))
	if err != nil || host != "127.0.0.1" || port == "0" || !strings.HasPrefix(addr, "tcp:") {
		t.Fatalf("listening socket's Addr %q: want tcp:127.0.0.1:PORT with the port the system gave", addr)
	}
	if err := ln.Accept(q, "accept"); err != nil {
		t.Fatal(err)
	}
	st2 := newStack(t)
	q2 := newQueue(t, st2, 16)
	c := dial(t, st2, q2, exs.SockStream, addr, "connect")
	if ev := wait(t, q2, exs.EventConnect, "connect"); ev.Err != nil {
		t.Fatal(ev.Err)
	}
	acc := wait(t, q, exs.EventAccept, "accept")
	if acc.Err != nil {
		t.Fatal(acc.Err)
	}
	if c.RemoteAddr() != addr || acc.Accepted.Addr() != addr {
		t.Errorf("client's RemoteAddr %q, accepted socket's Addr %q: want %q", c.RemoteAddr(), acc.Accepted.Addr(), addr)
	}
	if err := c.Send(q2, []byte("over tcp"), nil, 0, "send"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if err := acc.Accepted.Recv(q, buf, nil, exs.MsgWaitAll, "recv"); err != nil {
		t.Fatal(err)
	}
	if err := c.Shutdown(q2, "shut"); err != nil {
		t.Fatal(err)
	}
	ev := wait(t, q, exs.EventRecv, "recv")
	if ev.Err != nil || string(buf[:ev.N]) != "over tcp" {
		t.Errorf("recv: %q, %v", buf[:ev.N], ev.Err)
	}
}
