package usertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/exsgo/exs/exs"
)

// The small promises of the API, as a user relies on them.

// connected returns a connected pair of sockets of typ over the provider
// of af, in one stack, and their queue.
func connected(t *testing.T, st *exs.Stack, q *exs.Queue, addr string, typ exs.SockType, opts ...exs.SocketOption) (client, server *exs.Socket) {
	t.Helper()
	ln := listen(t, st, q, typ, addr, opts...)
	if err := ln.Accept(q, "accept"); err != nil {
		t.Fatal(err)
	}
	client = dial(t, st, q, typ, addr, "connect", opts...)
	for range 2 {
		ev, err := next(q)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Err != nil {
			t.Fatalf("%v: %v", ev.Type, ev.Err)
		}
		if ev.Type == exs.EventAccept {
			server = ev.Accepted
		}
	}
	return client, server
}

func TestDequeueBadArguments(t *testing.T) {
	st := newStack(t)
	q := newQueue(t, st, 4)
	evs := make([]exs.Event, 8)
	tests := []struct {
		name    string
		call    func() (int, error)
		mention string // what the message must name
	}{
		{"min above the depth, no timeout", func() (int, error) { return q.Dequeue(evs, 5, -1) }, "min 5"},
		{"min above the depth, a timeout", func() (int, error) { return q.Dequeue(evs, 8, time.Hour) }, "depth 4"},
		{"min above the depth, context", func() (int, error) { return q.DequeueContext(context.Background(), evs, 6) }, "min 6"},
		{"negative min", func() (int, error) { return q.Dequeue(evs, -1, 0) }, "min -1"},
		{"min above len(events)", func() (int, error) { return q.Dequeue(evs[:2], 3, 0) }, "min 3"},
		{"nil context", func() (int, error) { return q.DequeueContext(nil, evs, 1) }, "nil context"}, //nolint:staticcheck // the bad input tested
	}
	for _, tt := range tests {
		done := make(chan struct{})
		var n int
		var err error
		go func() {
			defer close(done)
			n, err = tt.call()
		}()
		select {
		case <-done:
		case <-time.After(testTimeout):
			t.Fatalf("%s: Dequeue waited instead of refusing", tt.name)
		}
		if n != 0 || !errors.Is(err, exs.ErrInvalid) || !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%s: %d, %v; want 0 and ErrInvalid", tt.name, n, err)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, tt.mention) {
			t.Errorf("%s: %q does not name %q", tt.name, msg, tt.mention)
		}
		if strings.Count(msg, "invalid argument") != 1 || strings.Count(msg, "exs:") != 1 {
			t.Errorf("%s: %q repeats itself", tt.name, msg)
		}
	}
}

func TestStackClosed(t *testing.T) {
	st, err := exs.NewStack()
	if err != nil {
		t.Fatal(err)
	}
	mem, err := st.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	calls := map[string]error{}
	_, calls["Alloc"] = st.Alloc(4096)
	_, calls["Socket"] = st.Socket(exs.SockStream)
	_, calls["Qcreate"] = st.Qcreate(4)
	_, calls["Mregister"] = st.Mregister(mem, exs.AccessRead)
	calls["Close"] = st.Close()
	for name, err := range calls {
		if !errors.Is(err, exs.ErrClosed) || !errors.Is(err, net.ErrClosed) {
			t.Errorf("%s after Stack.Close: %v, want ErrClosed (and net.ErrClosed)", name, err)
		}
	}
	// Memory from Alloc can still be returned.
	if err := st.Free(mem); err != nil {
		t.Errorf("Free after Stack.Close: %v", err)
	}
}

// TestStackCloseCancels: Stack.Close completes every operation still posted
// with ECANCELED (and ErrClosed), never ECONNRESET, even on two sockets
// connected to each other, where one's close disconnects the other.
func TestStackCloseCancels(t *testing.T) {
	for _, af := range addrFuncs {
		t.Run(af.name, func(t *testing.T) {
			for range 20 {
				st, err := exs.NewStack()
				if err != nil {
					t.Fatal(err)
				}
				q, err := st.Qcreate(64)
				if err != nil {
					t.Fatal(err)
				}
				c, s := connected(t, st, q, af.addr(t), exs.SockStream)
				for i, sock := range []*exs.Socket{c, s, c, s} {
					if err := sock.Recv(q, make([]byte, 16), nil, 0, i); err != nil {
						t.Fatal(err)
					}
				}
				if err := st.Close(); err != nil {
					t.Fatal(err)
				}
				for range 4 {
					ev, err := next(q)
					if err != nil {
						t.Fatalf("dequeue after Stack.Close: %v", err)
					}
					if !errors.Is(ev.Err, exs.ErrCanceled) || !errors.Is(ev.Err, syscall.ECANCELED) || !errors.Is(ev.Err, exs.ErrClosed) {
						t.Fatalf("recv %v after Stack.Close: %v, want ECANCELED and ErrClosed", ev.User, ev.Err)
					}
				}
			}
		})
	}
}

// TestEmptyMessageAndEOF: an empty seqpacket message and the end of the
// stream both complete with N 0, told apart by Event.EOF.
func TestEmptyMessageAndEOF(t *testing.T) {
	for _, af := range addrFuncs {
		for _, mode := range allModes {
			t.Run(af.name+"/"+mode.String(), func(t *testing.T) {
				st := newStack(t)
				q := newQueue(t, st, 16)
				c, s := connected(t, st, q, af.addr(t), exs.SockSeqPacket, exs.WithMode(mode))
				buf := make([]byte, 8)
				for _, u := range []string{"r1", "r2", "r3"} {
					if err := s.Recv(q, buf, nil, 0, u); err != nil {
						t.Fatal(err)
					}
				}
				if err := c.Send(q, nil, nil, 0, "empty"); err != nil {
					t.Fatal(err)
				}
				if err := c.Send(q, []byte("x"), nil, 0, "x"); err != nil {
					t.Fatal(err)
				}
				if err := c.Shutdown(q, "shut"); err != nil {
					t.Fatal(err)
				}
				got := map[any]exs.Event{}
				for range 6 {
					ev, err := next(q)
					if err != nil {
						t.Fatal(err)
					}
					got[ev.User] = ev
				}
				for u, ev := range got {
					if ev.Err != nil {
						t.Errorf("%v: %v", u, ev.Err)
					}
				}
				if ev := got["r1"]; ev.N != 0 || ev.EOF {
					t.Errorf("the empty message: N %d, EOF %v; want 0, false", ev.N, ev.EOF)
				}
				if ev := got["r2"]; ev.N != 1 || ev.EOF {
					t.Errorf("the one-byte message: N %d, EOF %v", ev.N, ev.EOF)
				}
				if ev := got["r3"]; ev.N != 0 || !ev.EOF {
					t.Errorf("the end of the stream: N %d, EOF %v; want 0, true", ev.N, ev.EOF)
				}
			})
		}
	}
}

func TestAddresses(t *testing.T) {
	for _, af := range addrFuncs {
		t.Run(af.name, func(t *testing.T) {
			st := newStack(t)
			q := newQueue(t, st, 16)
			addr := af.addr(t)
			c, s := connected(t, st, q, addr, exs.SockStream)
			if c.RemoteAddr() != addr || s.LocalAddr() != addr {
				t.Errorf("client's RemoteAddr %q, server's LocalAddr %q: want the listening address %q", c.RemoteAddr(), s.LocalAddr(), addr)
			}
			if c.LocalAddr() == "" || s.RemoteAddr() != c.LocalAddr() {
				t.Errorf("client's LocalAddr %q, server's RemoteAddr %q: want the same name", c.LocalAddr(), s.RemoteAddr())
			}
			scheme := addr[:strings.IndexByte(addr, ':')+1]
			if !strings.HasPrefix(s.RemoteAddr(), scheme) {
				t.Errorf("server's RemoteAddr %q is not a %s address", s.RemoteAddr(), scheme)
			}
			cred, ok := s.PeerCred()
			switch af.name {
			case "shm":
				if !ok || cred.PID != os.Getpid() || cred.UID != os.Getuid() || cred.GID != os.Getgid() {
					t.Errorf("server's PeerCred over shm: %+v, %v; want this process's", cred, ok)
				}
				if c2, ok := c.PeerCred(); !ok || c2.PID != os.Getpid() {
					t.Errorf("client's PeerCred over shm: %+v, %v", c2, ok)
				}
			default:
				if ok {
					t.Errorf("PeerCred over %s: %+v, want none", af.name, cred)
				}
			}
			fresh, err := st.Socket(exs.SockStream)
			if err != nil {
				t.Fatal(err)
			}
			if fresh.LocalAddr() != "" || fresh.RemoteAddr() != "" {
				t.Errorf("an unconnected socket's addresses: %q, %q", fresh.LocalAddr(), fresh.RemoteAddr())
			}
		})
	}
}

// TestPeerAcrossProcesses: an accepted socket names the connecting
// process and knows its credentials.
func TestPeerAcrossProcesses(t *testing.T) {
	st := newStack(t)
	q := newQueue(t, st, 16)
	addr := shmAddr(t)
	ln := listen(t, st, q, exs.SockStream, addr)
	if err := ln.Accept(q, "accept"); err != nil {
		t.Fatal(err)
	}
	c, line := startChild(t, "dial", addr)
	if line != "connected" {
		t.Fatalf("child: %s", line)
	}
	ev := wait(t, q, exs.EventAccept, "accept")
	if ev.Err != nil {
		t.Fatal(ev.Err)
	}
	pidLine, err := c.line()
	if err != nil {
		t.Fatal(err)
	}
	cred, ok := ev.Accepted.PeerCred()
	if !ok || "pid "+strconv.Itoa(cred.PID) != pidLine || cred.UID != os.Getuid() {
		t.Errorf("PeerCred %+v, %v; the child says %q", cred, ok, pidLine)
	}
	if want := "shm:@" + strconv.Itoa(cred.PID); ev.Accepted.RemoteAddr() != want {
		t.Errorf("RemoteAddr %q, want %q", ev.Accepted.RemoteAddr(), want)
	}
}

// childDial connects to the address in arg, says "connected" and its pid,
// and waits for its stdin to close.
func childDial(arg string) error {
	var addr string
	if err := json.Unmarshal([]byte(arg), &addr); err != nil {
		return err
	}
	st, err := exs.NewStack()
	if err != nil {
		return err
	}
	defer st.Close()
	if _, _, err := childConnect(st, exs.SockStream, addr); err != nil {
		return err
	}
	fmt.Println("connected")
	fmt.Println("pid " + strconv.Itoa(os.Getpid()))
	waitStdinClosed()
	return nil
}

// TestErrorMessages: every error names exs once (its OpError), each lower
// layer at most once, and no sentinel twice: no "exs: ...: exs: ...".
func TestErrorMessages(t *testing.T) {
	st := newStack(t)
	q := newQueue(t, st, 64)
	var errs []error
	add := func(err error) {
		if err == nil {
			t.Helper()
			t.Errorf("expected an error")
			return
		}
		errs = append(errs, err)
	}
	// Calls that fail.
	_, err := st.Socket(0)
	add(err)
	_, err = st.Qcreate(0)
	add(err)
	_, err = q.Dequeue(make([]exs.Event, 1), 2, 0)
	add(err)
	_, err = st.Mregister(nil, exs.AccessRead)
	add(err)
	s, err := st.Socket(exs.SockStream)
	if err != nil {
		t.Fatal(err)
	}
	add(s.Send(q, []byte("x"), nil, 0, nil))
	add(s.Bind("nosuchscheme:x"))
	_, err = exs.NewStack(exs.WithStreamBuffer(-1))
	add(err)
	// Events that fail, over each provider.
	for _, af := range addrFuncs {
		addr := af.addr(t)
		for _, typ := range []exs.SockType{exs.SockStream, exs.SockSeqPacket} {
			u := af.name + typ.String()
			dial(t, st, q, typ, addr, u) // nobody listens
			add(wait(t, q, exs.EventConnect, u).Err)
		}
		listen(t, st, q, exs.SockStream, addr)
		dial(t, st, q, exs.SockStream, addr, "mismatch", exs.WithMode(exs.ModeDirectOnly))
		add(wait(t, q, exs.EventConnect, "mismatch").Err)
		dial(t, st, q, exs.SockStream, addr, "timeout", exs.WithConnectTimeout(time.Millisecond))
		add(wait(t, q, exs.EventConnect, "timeout").Err)
		addr2 := af.addr(t)
		c, srv := connected(t, st, q, addr2, exs.SockStream)
		if err := srv.Recv(q, make([]byte, 4), nil, 0, "reset"); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(q, "close"); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			ev, err := next(q)
			if err != nil {
				t.Fatal(err)
			}
			if ev.User == "reset" {
				add(ev.Err)
			}
		}
		if err := srv.Send(q, []byte("x"), nil, 0, "late"); err != nil {
			t.Fatal(err)
		}
		add(wait(t, q, exs.EventSend, "late").Err)
	}
	layers := []string{"exs:", "verbs:", "eventq:", "mreg:", "inproc:", "shm:", "tcp:", "dynproto:"}
	for _, err := range errs {
		msg := err.Error()
		if strings.Count(msg, "exs:") != 1 || !strings.HasPrefix(msg, "exs: ") {
			t.Errorf("%q: exs must name itself once, first", msg)
		}
		for _, l := range layers[1:] {
			// An address ("shm:/...", "inproc:x") is not a layer's name.
			if n := strings.Count(msg, l+" "); n > 1 {
				t.Errorf("%q names %s %d times", msg, l, n)
			}
		}
		parts := strings.Split(msg, ": ")
		for i := 1; i < len(parts); i++ {
			if parts[i] == parts[i-1] {
				t.Errorf("%q repeats %q", msg, parts[i])
			}
		}
		var oe *exs.OpError
		if !errors.As(err, &oe) {
			t.Errorf("%q is not an *OpError", msg)
		}
	}
}
