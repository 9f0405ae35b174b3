package exs_test

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/exsgo/exs/exs"
)

// TestConcurrentPostAndClose has goroutines post sends, recvs, shutdowns
// and cancels on both ends of a connection while both ends are closed.
// Every operation a call accepted (sends, recvs, shutdowns and cancels
// alike: a cancel posts an EventCancel of its own) must complete with
// exactly one event of its type, on its socket, before the socket's
// EventClose, and nothing may hang. Each subtest makes a bounded number of
// calls. The seed, in the subtest's name, picks the calls and when the
// closes come (the interleaving is the scheduler's): replay one with
// -concurrent.seed=SEED -run 'TestConcurrentPostAndClose/^MODE$'.
func TestConcurrentPostAndClose(t *testing.T) {
	seed, step, rounds := *concurrentSeed, uint64(0), 1
	if seed == 0 {
		seed, step, rounds = uint64(time.Now().UnixNano()), 1, 4
	}
	for round := range rounds {
		for i, mode := range []exs.Mode{exs.ModeDynamic, exs.ModeDirectOnly, exs.ModeIndirectOnly} {
			s := seed + step*uint64(round*3+i)
			t.Run(fmt.Sprintf("%v/seed=%d", mode, s), func(t *testing.T) {
				concurrentPostAndClose(t, mode, s)
			})
		}
	}
}

var concurrentSeed = flag.Uint64("concurrent.seed", 0, "seed of TestConcurrentPostAndClose (0: four rounds from the clock)")

func concurrentPostAndClose(t *testing.T, mode exs.Mode, seed uint64) {
	const (
		posters  = 4
		maxCalls = 6000 // per poster
	)
	p := connect(t, exs.SockStream, exs.WithMode(mode), exs.WithStreamBuffer(8192), exs.WithOutstanding(16, 16))
	q := newQueue(t, p.st, 1024)
	// The closes come after a random number of accepted operations.
	closeAfter := int64(rand.New(rand.NewPCG(seed, 99)).IntN(4000))

	var (
		accepted atomic.Int64
		nextID   atomic.Int64
		posted   sync.Map // id -> the event type it is owed
		reached  = make(chan struct{})
		once     sync.Once
		wg       sync.WaitGroup
	)
	for g := range posters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(g)))
			sock := p.client
			if g%2 == 1 {
				sock = p.server
			}
			for range maxCalls {
				id := nextID.Add(1)
				var typ exs.EventType
				var post func() error
				switch k := r.IntN(200); {
				case k < 90:
					buf := make([]byte, 1+r.IntN(3000))
					typ, post = exs.EventSend, func() error { return sock.Send(q, buf, nil, 0, id) }
				case k < 180:
					buf, fl := make([]byte, 1+r.IntN(3000)), exs.Flags(r.IntN(2))
					typ, post = exs.EventRecv, func() error { return sock.Recv(q, buf, nil, fl, id) }
				case k < 190:
					typ, post = exs.EventShutdown, func() error { return sock.Shutdown(q, id) }
				case k < 191:
					typ, post = exs.EventCancel, func() error { return sock.Cancel(q, id) }
				default:
					continue
				}
				posted.Store(id, typ) // before the call: the event may come first
				err := post()
				switch {
				case err == nil:
					if accepted.Add(1) == closeAfter {
						once.Do(func() { close(reached) })
					}
					continue
				case errors.Is(err, exs.ErrWouldBlock):
					posted.Delete(id)
					time.Sleep(10 * time.Microsecond)
					continue
				case errors.Is(err, exs.ErrClosed):
				default:
					t.Errorf("post: %v", err)
				}
				posted.Delete(id)
				return
			}
		}()
	}
	postersDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(postersDone)
	}()

	var events int64
	var closes []*exs.Socket
	collectorDone := make(chan struct{})
	go func() {
		defer close(collectorDone)
		evs := make([]exs.Event, 64)
		seen := make(map[any]bool)
		// EventClose is the last event of its socket: once both have come,
		// every accepted operation must have posted its event.
		for len(closes) < 2 {
			n, err := q.Dequeue(evs, 1, testTimeout)
			if err != nil {
				t.Errorf("collector: %v (%d events, %d closes)", err, events, len(closes))
				return
			}
			for _, ev := range evs[:n] {
				if ev.Socket != p.client && ev.Socket != p.server {
					t.Errorf("event %v of an unknown socket", ev.Type)
				}
				if ev.Type == exs.EventClose {
					if ev.Err != nil {
						t.Errorf("close: %v", ev.Err)
					}
					closes = append(closes, ev.Socket)
					continue
				}
				for _, c := range closes {
					if ev.Socket == c {
						t.Errorf("event %v (user %v) after its socket's EventClose", ev.Type, ev.User)
					}
				}
				if seen[ev.User] {
					t.Errorf("two events for operation %v", ev.User)
				}
				seen[ev.User] = true
				if typ, ok := posted.Load(ev.User); !ok || typ != ev.Type {
					t.Errorf("event %v for operation %v, posted as %v", ev.Type, ev.User, typ)
				}
				checkConcurrentErr(t, ev)
				events++
			}
		}
	}()

	select {
	case <-reached:
	case <-postersDone:
	}
	for _, sock := range []*exs.Socket{p.client, p.server} {
		for {
			err := sock.Close(q, "close")
			if err == nil {
				break
			}
			if !errors.Is(err, exs.ErrWouldBlock) {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	<-postersDone
	<-collectorDone
	if n := q.Len(); n != 0 {
		t.Errorf("%d events after both EventClose", n)
	}
	if n := q.Outstanding(); n != 0 {
		t.Errorf("%d operations still owe an event after both EventClose", n)
	}
	if err := p.st.Qdelete(q); err != nil {
		t.Errorf("queue still awaited: %v", err)
	}
	if events != accepted.Load() {
		t.Errorf("%d operations accepted, %d events", accepted.Load(), events)
	}
	t.Logf("%d operations accepted (close after %d), all completed once", accepted.Load(), closeAfter)
}

// checkConcurrentErr checks that an event of TestConcurrentPostAndClose
// succeeded or failed with one of the errors the contract allows.
func checkConcurrentErr(t *testing.T, ev exs.Event) {
	t.Helper()
	if ev.Err == nil {
		return
	}
	var oe *exs.OpError
	if !errors.As(ev.Err, &oe) {
		t.Errorf("event %v: error %T %v, want an *OpError", ev.Type, ev.Err, ev.Err)
		return
	}
	for _, errno := range []error{syscall.ECANCELED, syscall.ECONNRESET, syscall.EPIPE} {
		if errors.Is(ev.Err, errno) {
			return
		}
	}
	t.Errorf("event %v (user %v): unexpected error %v", ev.Type, ev.User, ev.Err)
}

// TestQdeleteAfterLastEvent pins down the race that the test above found:
// the application dequeues the last event while the goroutine that posted
// it has not yet returned from posting. The operation must no longer count
// as outstanding, so that Qdelete succeeds; the queue then closes once the
// post is done.
func TestQdeleteAfterLastEvent(t *testing.T) {
	p := connect(t, exs.SockStream)
	q2 := newQueue(t, p.st, 4)
	posted, deleted := make(chan struct{}), make(chan struct{})
	var once sync.Once
	defer exs.SetPostHook(func(q *exs.Queue) {
		if q == q2 {
			once.Do(func() {
				close(posted)
				<-deleted
			})
		}
	})()
	if err := p.server.Recv(q2, make([]byte, 10), nil, 0, "recv"); err != nil {
		t.Fatal(err)
	}
	if err := p.server.Cancel(p.q, "cancel"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-posted:
	case <-time.After(testTimeout):
		t.Fatal("the recv's event was not posted")
	}
	var evs [2]exs.Event
	if n := q2.TryDequeue(evs[:]); n != 1 || evs[0].User != "recv" {
		t.Fatalf("dequeued %d events, want the recv's", n)
	}
	if n := q2.Outstanding(); n != 0 {
		t.Errorf("Outstanding = %d after the last event, want 0", n)
	}
	err := p.st.Qdelete(q2)
	close(deleted)
	if err != nil {
		t.Fatalf("Qdelete after the last event: %v", err)
	}
	if n, err := q2.Dequeue(evs[:], 1, testTimeout); n != 0 || !errors.Is(err, exs.ErrClosed) {
		t.Errorf("dequeue after Qdelete: %d, %v; want ErrClosed", n, err)
	}
	checkErr(t, "post after Qdelete", p.server.Recv(q2, make([]byte, 1), nil, 0, nil), "recv", exs.ErrClosed)
	waitType(t, p.q, exs.EventCancel, "cancel")
}

// TestCloseWhileFinishing pins down a Close that comes while the goroutine
// of a socket whose connect was canceled completes the operations still
// queued: the close's event must still come last.
func TestCloseWhileFinishing(t *testing.T) {
	st := newStack(t)
	q := newQueue(t, st, 8)
	addr := testAddr(t)
	ln, _ := st.Socket(exs.SockStream)
	if err := ln.Bind(addr); err != nil {
		t.Fatal(err)
	}
	if err := ln.Listen(0); err != nil {
		t.Fatal(err)
	}
	// No accept is posted: the connect waits until canceled.
	cl, _ := st.Socket(exs.SockStream)
	closed := make(chan error, 1)
	defer exs.SetFinishHook(func(s *exs.Socket) {
		if s == cl {
			closed <- s.Close(q, "close")
		}
	})()
	if err := cl.Connect(q, addr, "connect"); err != nil {
		t.Fatal(err)
	}
	if err := cl.Send(q, []byte("x"), nil, 0, "send"); err != nil {
		t.Fatal(err)
	}
	if err := cl.Cancel(q, "cancel"); err != nil {
		t.Fatal(err)
	}
	var order []string
	for range 4 {
		ev := wait(t, q)
		order = append(order, ev.User.(string))
		if ev.Type == exs.EventClose && ev.Err != nil {
			t.Errorf("close: %v", ev.Err)
		}
	}
	if err := <-closed; err != nil {
		t.Fatalf("close: %v", err)
	}
	if got, want := fmt.Sprint(order), "[connect send cancel close]"; got != want {
		t.Errorf("events %s, want %s", got, want)
	}
	noEvent(t, q)
}

// TestCancelRacingClose has a cancel of an unconnected socket (which
// completes at once) race its close: whichever call comes second fails or
// posts its event before EventClose.
func TestCancelRacingClose(t *testing.T) {
	st := newStack(t)
	q := newQueue(t, st, 8)
	for range 500 {
		s, err := st.Socket(exs.SockStream)
		if err != nil {
			t.Fatal(err)
		}
		start, cerr := make(chan struct{}), make(chan error, 1)
		go func() {
			<-start
			cerr <- s.Cancel(q, "cancel")
		}()
		close(start)
		runtime.Gosched()
		if err := s.Close(q, "close"); err != nil {
			t.Fatal(err)
		}
		want := 1
		if err := <-cerr; err == nil {
			want = 2
		} else if !errors.Is(err, exs.ErrClosed) {
			t.Fatalf("cancel: %v", err)
		}
		for i := range want {
			ev := wait(t, q)
			if last := i == want-1; (ev.Type == exs.EventClose) != last {
				t.Fatalf("event %d of %d: %v", i+1, want, ev.Type)
			}
		}
	}
	noEvent(t, q)
}
