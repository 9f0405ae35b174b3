package exs_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/exsgo/exs/exs"
)

func TestMain(m *testing.M) {
	peerProcessMain() // returns unless this binary runs as a test's peer process
	goleak.VerifyTestMain(m)
}

// testTimeout bounds every wait of a test.
const testTimeout = 20 * time.Second

var addrSeq atomic.Int64

// testAddr returns an in-process address no other test uses.
func testAddr(t testing.TB) string {
	t.Helper()
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	return fmt.Sprintf("inproc:%s-%d", name, addrSeq.Add(1))
}

// newStack returns a stack closed at the end of the test.
func newStack(t testing.TB, opts ...exs.StackOption) *exs.Stack {
	t.Helper()
	st, err := exs.NewStack(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil && !errors.Is(err, exs.ErrClosed) {
			t.Errorf("stack close: %v", err)
		}
	})
	return st
}

func newQueue(t testing.TB, st *exs.Stack, depth int) *exs.Queue {
	t.Helper()
	q, err := st.Qcreate(depth)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// wait dequeues exactly one event, failing the test after testTimeout.
func wait(t testing.TB, q *exs.Queue) exs.Event {
	t.Helper()
	var evs [1]exs.Event
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	n, err := q.DequeueContext(ctx, evs[:], 1)
	if err != nil || n != 1 {
		t.Fatalf("dequeue: %d events, %v", n, err)
	}
	return evs[0]
}

// waitType dequeues one event and checks its type and user value.
func waitType(t testing.TB, q *exs.Queue, typ exs.EventType, user any) exs.Event {
	t.Helper()
	ev := wait(t, q)
	if ev.Type != typ || ev.User != user {
		t.Fatalf("event %v (user %v, n %d, err %v), want %v (user %v)", ev.Type, ev.User, ev.N, ev.Err, typ, user)
	}
	return ev
}

// noEvent checks that q stays empty for a short while.
func noEvent(t testing.TB, q *exs.Queue) {
	t.Helper()
	var evs [1]exs.Event
	n, _ := q.Dequeue(evs[:], 1, 20*time.Millisecond)
	if n != 0 {
		t.Fatalf("unexpected event %v (user %v, n %d, err %v)", evs[0].Type, evs[0].User, evs[0].N, evs[0].Err)
	}
}

// pair is a connected pair of sockets of one stack.
type pair struct {
	st     *exs.Stack
	q      *exs.Queue
	ln     *exs.Socket // listening
	client *exs.Socket
	server *exs.Socket // accepted
}

// connect makes a connected pair with the given socket options, on a new
// stack with stack options sopts.
func connect(t testing.TB, typ exs.SockType, opts ...exs.SocketOption) *pair {
	t.Helper()
	st := newStack(t)
	return connectOn(t, st, st, typ, opts...)
}

// connectOn makes a listener on stack a and a client on stack b.
func connectOn(t testing.TB, a, b *exs.Stack, typ exs.SockType, opts ...exs.SocketOption) *pair {
	t.Helper()
	p := &pair{st: a, q: newQueue(t, a, 64)}
	qb := p.q
	if b != a {
		qb = newQueue(t, b, 64)
	}
	addr := testAddr(t)
	ln, err := a.Socket(typ, opts...)
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
	cl, err := b.Socket(typ, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Connect(qb, addr, "connect"); err != nil {
		t.Fatal(err)
	}
	qs := []*exs.Queue{p.q, p.q}
	if qb != p.q {
		qs[1] = qb
	}
	var acc exs.Event
	for _, q := range qs {
		ev := wait(t, q)
		switch {
		case ev.Type == exs.EventConnect && ev.Err == nil:
		case ev.Type == exs.EventAccept && ev.Err == nil && ev.Accepted != nil:
			acc = ev
		default:
			t.Fatalf("connecting: event %v (user %v): %v", ev.Type, ev.User, ev.Err)
		}
	}
	p.ln, p.client, p.server = ln, cl, acc.Accepted
	return p
}

func TestSmokeEcho(t *testing.T) {
	for _, mode := range []exs.Mode{exs.ModeDynamic, exs.ModeDirectOnly, exs.ModeIndirectOnly} {
		t.Run(mode.String(), func(t *testing.T) {
			p := connect(t, exs.SockStream, exs.WithMode(mode))
			rbuf := make([]byte, 64)
			if err := p.server.Recv(p.q, rbuf, nil, 0, "srecv"); err != nil {
				t.Fatal(err)
			}
			if err := p.client.Send(p.q, []byte("hello"), nil, 0, "csend"); err != nil {
				t.Fatal(err)
			}
			got := map[string]exs.Event{}
			for len(got) < 2 {
				ev := wait(t, p.q)
				got[ev.User.(string)] = ev
			}
			if ev := got["csend"]; ev.Err != nil || ev.N != 5 {
				t.Fatalf("send: %d %v", ev.N, ev.Err)
			}
			if ev := got["srecv"]; ev.Err != nil || string(rbuf[:ev.N]) != "hello" {
				t.Fatalf("recv: %q %v", rbuf[:ev.N], ev.Err)
			}
			t.Logf("client %+v", p.client.Stats())
			t.Logf("server %+v", p.server.Stats())
		})
	}
}

// waitBlocked waits until a Dequeue is blocked on q, past its spinning, so
// that what the test does next must wake it.
func waitBlocked(t testing.TB, q *exs.Queue) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for exs.QueueBlocked(q) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no Dequeue blocked on the queue")
		}
		runtime.Gosched()
	}
}

// waitUntil waits until cond holds, failing the test after testTimeout.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, testTimeout)
		}
		runtime.Gosched()
	}
}
