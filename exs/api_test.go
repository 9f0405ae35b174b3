package exs_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/exsgo/exs/exs"
	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/inproc"
)

// echoRounds has the client send n messages of size bytes, each received
// by one WAITALL recv posted before it, and checks the bytes.
func echoRounds(t *testing.T, p *pair, n, size int) {
	t.Helper()
	sbuf, rbuf := make([]byte, size), make([]byte, size)
	for i := range n {
		for j := range sbuf {
			sbuf[j] = byte(i + j)
		}
		if err := p.server.Recv(p.q, rbuf, nil, exs.MsgWaitAll, "recv"); err != nil {
			t.Fatal(err)
		}
		if err := p.client.Send(p.q, sbuf, nil, 0, "send"); err != nil {
			t.Fatal(err)
		}
		var evs [2]exs.Event
		// Both events, in one call: Dequeue waits for min of them.
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		k, err := p.q.DequeueContext(ctx, evs[:], 2)
		cancel()
		if err != nil || k != 2 {
			t.Fatalf("round %d: %d events, %v", i, k, err)
		}
		for _, ev := range evs[:k] {
			if ev.Err != nil || ev.N != size {
				t.Fatalf("round %d: %v: %d bytes, %v", i, ev.Type, ev.N, ev.Err)
			}
		}
		if string(rbuf) != string(sbuf) {
			t.Fatalf("round %d: bytes differ", i)
		}
	}
}

func TestWaitModes(t *testing.T) {
	for _, m := range []exs.WaitMode{exs.WaitAdaptive, exs.WaitBusyPoll, exs.WaitNotify} {
		t.Run(m.String(), func(t *testing.T) {
			// The stack's wait mode is the default of its queues and
			// sockets.
			st := newStack(t, exs.WithWaitMode(m), exs.WithSpinTime(50*time.Microsecond))
			p := connectOn(t, st, st, exs.SockStream)
			echoRounds(t, p, 20, 1000)
			w := p.server.Stats().Wakeups + p.client.Stats().Wakeups
			switch m {
			case exs.WaitBusyPoll:
				if w != 0 {
					t.Errorf("busy-poll goroutines blocked %d times", w)
				}
			case exs.WaitNotify:
				if w == 0 {
					t.Error("notify goroutines never blocked")
				}
			}
			// A queue may wait otherwise than its stack.
			q, err := st.Qcreate(2, exs.WithWaitMode(exs.WaitNotify))
			if err != nil {
				t.Fatal(err)
			}
			if err := p.server.Recv(q, make([]byte, 4), nil, exs.MsgWaitAll, "r"); err != nil {
				t.Fatal(err)
			}
			if err := p.client.Send(p.q, []byte("abcd"), nil, 0, "s"); err != nil {
				t.Fatal(err)
			}
			waitType(t, p.q, exs.EventSend, "s")
			if ev := waitType(t, q, exs.EventRecv, "r"); ev.N != 4 || ev.Err != nil {
				t.Errorf("recv: %d %v", ev.N, ev.Err)
			}
		})
	}
}

func TestDequeueMinTimeoutContext(t *testing.T) {
	st := newStack(t)
	q := newQueue(t, st, 4)
	s, err := st.Socket(exs.SockStream)
	if err != nil {
		t.Fatal(err)
	}
	// A cancel of an unconnected socket completes at once: one event.
	cancelNow := func(user string) {
		t.Helper()
		if err := s.Cancel(q, user); err != nil {
			t.Fatal(err)
		}
	}
	var evs [4]exs.Event
	cancelNow("c1")
	// min 2 with one event queued: the timeout returns what is there.
	start := time.Now()
	n, err := q.Dequeue(evs[:], 2, 20*time.Millisecond)
	checkErr(t, "dequeue short of min", err, "dequeue", exs.ErrTimeout)
	if n != 1 || evs[0].User != "c1" || time.Since(start) < 20*time.Millisecond {
		t.Errorf("dequeue short of min: %d events after %v", n, time.Since(start))
	}
	// min 2 with two queued: at once.
	cancelNow("c2")
	cancelNow("c3")
	if n, err := q.Dequeue(evs[:], 2, 0); n != 2 || err != nil {
		t.Errorf("dequeue of 2 queued: %d, %v", n, err)
	}
	// min 0 never waits.
	if n, err := q.Dequeue(evs[:], 0, time.Hour); n != 0 || err != nil {
		t.Errorf("dequeue with min 0: %d, %v", n, err)
	}
	if n := q.TryDequeue(evs[:]); n != 0 {
		t.Errorf("TryDequeue of an empty queue: %d", n)
	}

	// The context variant: done before min events arrive.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n, err = q.DequeueContext(ctx, evs[:], 1)
	checkErr(t, "canceled context", err, "dequeue", context.Canceled)
	if n != 0 {
		t.Errorf("canceled context: %d events", n)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	cancelNow("c4")
	n, err = q.DequeueContext(ctx, evs[:], 2)
	checkErr(t, "context deadline", err, "dequeue", context.DeadlineExceeded)
	if n != 1 || evs[0].User != "c4" {
		t.Errorf("context deadline: %d events", n)
	}
	// min events queued: returned even with the context done.
	cancelNow("c5")
	if n, err := q.DequeueContext(ctx, evs[:], 1); n != 1 || err != nil {
		t.Errorf("dequeue with the context done and an event queued: %d, %v", n, err)
	}
	// A waiter wakes when an event comes.
	done := make(chan int, 1)
	go func() {
		n, _ := q.Dequeue(evs[:], 1, testTimeout)
		done <- n
	}()
	waitBlocked(t, q)
	cancelNow("c6")
	if n := <-done; n != 1 {
		t.Errorf("woken waiter took %d events", n)
	}
}

// altProvider is an in-process provider whose addresses are "alt:NAME":
// it passes them on as "inproc:NAME".
type altProvider struct{ p *inproc.Provider }

func (a altProvider) addr(addr string) string {
	return inproc.Scheme + strings.TrimPrefix(addr, "alt:")
}

func (a altProvider) Listen(addr string) (verbs.LinkListener, error) {
	return a.p.Listen(a.addr(addr))
}

func (a altProvider) Dial(ctx context.Context, addr string, ep *verbs.Endpoint, private []byte) (verbs.Link, []byte, error) {
	return a.p.Dial(ctx, a.addr(addr), ep, private)
}

func TestProviderScheme(t *testing.T) {
	// The "alt" provider has its own registry of listeners: a name
	// listening there is not listening in the default "inproc" provider.
	st := newStack(t, exs.WithProvider("alt", altProvider{inproc.New()}))
	q := newQueue(t, st, 8)
	name := strings.TrimPrefix(testAddr(t), inproc.Scheme)
	ln, _ := st.Socket(exs.SockStream)
	if err := ln.Bind("alt:" + name); err != nil {
		t.Fatal(err)
	}
	if err := ln.Listen(0); err != nil {
		t.Fatal(err)
	}
	if got := ln.Addr(); got != "alt:"+name {
		t.Errorf("Addr = %q", got)
	}
	if err := ln.Accept(q, "accept"); err != nil {
		t.Fatal(err)
	}
	// The same name without a scheme is an "inproc" address.
	c1, _ := st.Socket(exs.SockStream)
	if err := c1.Connect(q, name, "c1"); err != nil {
		t.Fatal(err)
	}
	if got := c1.Addr(); got != inproc.Scheme+name {
		t.Errorf("Addr = %q, want the default scheme", got)
	}
	checkErr(t, "connect through the default provider", waitType(t, q, exs.EventConnect, "c1").Err, "connect", syscall.ECONNREFUSED)
	c2, _ := st.Socket(exs.SockStream)
	if err := c2.Connect(q, "alt:"+name, "c2"); err != nil {
		t.Fatal(err)
	}
	got := collect(t, q, 2)
	if got["c2"].Err != nil || got["accept"].Err != nil {
		t.Fatalf("connect through the named provider: %v, %v", got["c2"].Err, got["accept"].Err)
	}
	if a := got["accept"].Accepted.Addr(); a != "alt:"+name {
		t.Errorf("accepted socket's Addr = %q", a)
	}
}

func TestLogger(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	st := newStack(t, exs.WithLogger(zap.New(core)))
	p := connectOn(t, st, st, exs.SockStream)
	for _, msg := range []string{"listening", "connected", "accepted"} {
		if logs.FilterMessage(msg).Len() == 0 {
			t.Errorf("no %q entry: %v", msg, logs.AllUntimed())
		}
	}
	// Nothing per operation.
	before := logs.Len()
	echoRounds(t, p, 50, 100)
	if n := logs.Len() - before; n != 0 {
		t.Errorf("%d entries for 50 messages: %v", n, logs.AllUntimed()[before:])
	}
	// A socket's own logger.
	core2, logs2 := observer.New(zapcore.DebugLevel)
	s, err := st.Socket(exs.SockStream, exs.WithLogger(zap.New(core2)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Connect(p.q, testAddr(t), "refused"); err != nil {
		t.Fatal(err)
	}
	waitType(t, p.q, exs.EventConnect, "refused")
	if logs2.FilterMessage("connect failed").Len() != 1 {
		t.Errorf("socket logger: %v", logs2.AllUntimed())
	}
}

func TestNoGoroutineAfterClose(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	st, err := exs.NewStack()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p := connectOn(t, st, st, exs.SockStream)
	if err := p.server.Recv(p.q, make([]byte, 10), nil, 0, "recv"); err != nil {
		t.Fatal(err)
	}
	if err := p.ln.Accept(p.q, "accept"); err != nil {
		t.Fatal(err)
	}
	// Closing each socket ends its goroutine.
	for _, s := range []*exs.Socket{p.client, p.server, p.ln} {
		if err := s.Close(p.q, "close"); err != nil {
			t.Fatal(err)
		}
	}
	got := 0
	for got < 3 {
		if ev := wait(t, p.q); ev.Type == exs.EventClose {
			got++
		}
	}
	if err := goleak.Find(ignore); err != nil {
		t.Errorf("after closing the sockets: %v", err)
	}
	// Stack.Close ends every goroutine too, and waits for them.
	p = connectOn(t, st, st, exs.SockStream)
	if err := p.server.Recv(p.q, make([]byte, 10), nil, 0, "recv"); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := goleak.Find(ignore); err != nil {
		t.Errorf("after Stack.Close: %v", err)
	}
}

// failAllocProvider is the in-process provider with an allocator that
// always fails, as the same-host provider's does outside Linux.
type failAllocProvider struct{ *inproc.Provider }

func (failAllocProvider) Alloc(n int) ([]byte, error) {
	return nil, errors.New("exs: test: no shared memory here")
}

func (failAllocProvider) Free(b []byte) error {
	return fmt.Errorf("exs: test: free memory not from Alloc: %w", mreg.ErrInvalid)
}

// TestStackAllocFallback checks that Stack.Alloc falls back to mreg.Alloc
// when the first provider's allocator fails, and that Stack.Free returns
// that memory.
func TestStackAllocFallback(t *testing.T) {
	st, err := exs.NewStack(exs.WithProvider("afail", failAllocProvider{inproc.New()}))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b, err := st.Alloc(5000)
	if err != nil {
		t.Fatalf("Alloc with a failing provider allocator: %v, want memory from mreg.Alloc", err)
	}
	if len(b) != 5000 {
		t.Fatalf("Alloc(5000) returned %d bytes", len(b))
	}
	h, err := st.Mregister(b, exs.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Mderegister(h); err != nil {
		t.Fatal(err)
	}
	if err := st.Free(b); err != nil {
		t.Errorf("Free of the fallback allocation: %v", err)
	}
	if err := st.Free(b); !errors.Is(err, exs.ErrInvalid) {
		t.Errorf("second Free = %v, want ErrInvalid", err)
	}
}
