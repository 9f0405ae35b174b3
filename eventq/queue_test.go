package eventq

import (
	"context"
	"errors"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestWaitModeString(t *testing.T) {
	tests := []struct {
		m    WaitMode
		want string
	}{
		{Adaptive, "Adaptive"},
		{BusyPoll, "BusyPoll"},
		{Notify, "Notify"},
		{0, "WaitMode(0)"},
		{9, "WaitMode(9)"},
	}
	for _, tt := range tests {
		if got := tt.m.String(); got != tt.want {
			t.Errorf("WaitMode(%d).String() = %q, want %q", uint8(tt.m), got, tt.want)
		}
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		name     string
		depth    int
		opts     Options
		wantErr  error
		wantMode WaitMode
	}{
		{"zero options", 1, Options{}, nil, Adaptive},
		{"notify", 8, Options{Mode: Notify}, nil, Notify},
		{"busy poll", 8, Options{Mode: BusyPoll, SpinTime: time.Second}, nil, BusyPoll},
		{"zero depth", 0, Options{}, ErrInvalid, 0},
		{"negative depth", -1, Options{}, ErrInvalid, 0},
		{"unknown mode", 4, Options{Mode: Notify + 1}, ErrInvalid, 0},
		{"negative spin", 4, Options{SpinTime: -time.Nanosecond}, ErrInvalid, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := New[int](tt.depth, tt.opts)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("New(%d, %+v) error = %v, want %v", tt.depth, tt.opts, err, tt.wantErr)
			}
			if err != nil {
				if q != nil {
					t.Errorf("New returned a queue with error %v", err)
				}
				return
			}
			defer q.Close()
			if q.Cap() != tt.depth || q.Len() != 0 || q.Reserved() != 0 || q.Mode() != tt.wantMode {
				t.Errorf("Cap, Len, Reserved, Mode = %d, %d, %d, %v; want %d, 0, 0, %v",
					q.Cap(), q.Len(), q.Reserved(), q.Mode(), tt.depth, tt.wantMode)
			}
		})
	}
}

func TestInvalidArguments(t *testing.T) {
	q := newQueue[int](t, 4, Notify)
	if err := q.Post(7); err != nil {
		t.Fatal(err)
	}
	evs := make([]int, 2)
	tests := []struct {
		name string
		f    func() error
	}{
		{"Dequeue min > len", func() error { _, err := q.Dequeue(evs, 3, -1); return err }},
		{"Dequeue negative min", func() error { _, err := q.Dequeue(evs, -1, 0); return err }},
		{"Dequeue nil events min 1", func() error { _, err := q.Dequeue(nil, 1, time.Second); return err }},
		{"DequeueContext min > len", func() error { _, err := q.DequeueContext(context.Background(), evs, 3); return err }},
		{"DequeueContext negative min", func() error { _, err := q.DequeueContext(context.Background(), evs, -2); return err }},
		//lint:ignore SA1012 testing the nil check
		{"DequeueContext nil ctx", func() error { _, err := q.DequeueContext(nil, evs, 1); return err }}, //nolint:staticcheck
		//lint:ignore SA1012 testing the nil check
		{"Wait nil ctx", func() error { return q.Wait(nil) }}, //nolint:staticcheck
		{"Reserve negative", func() error { return q.Reserve(-1) }},
		{"PostReserved without reservation", func() error { return q.PostReserved(1) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.f(); !errors.Is(err, ErrInvalid) {
				t.Errorf("error = %v, want ErrInvalid", err)
			}
			if q.Len() != 1 || q.Reserved() != 0 {
				t.Errorf("Len, Reserved = %d, %d after invalid call; want 1, 0", q.Len(), q.Reserved())
			}
		})
	}
}

func TestUnreservePanics(t *testing.T) {
	q := newQueue[int](t, 4, Notify)
	if err := q.Reserve(2); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{-1, 3} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Unreserve(%d) with 2 reserved did not panic", n)
				}
			}()
			q.Unreserve(n)
		}()
	}
	if got := q.Reserved(); got != 2 {
		t.Errorf("Reserved() = %d after refused Unreserve, want 2", got)
	}
}

func TestOverflowDropsNothing(t *testing.T) {
	const depth = 8
	q := newQueue[int](t, depth, Notify)
	// Start the ring part way so that the queued events wrap around.
	for i := range 5 {
		if err := q.Post(-1 - i); err != nil {
			t.Fatal(err)
		}
	}
	if n := q.TryDequeue(make([]int, 5)); n != 5 {
		t.Fatalf("TryDequeue = %d, want 5", n)
	}
	for i := range depth {
		if err := q.Post(i); err != nil {
			t.Fatalf("Post(%d): %v", i, err)
		}
	}
	if err := q.Post(depth); !errors.Is(err, ErrFull) {
		t.Fatalf("Post on a full queue: error = %v, want ErrFull", err)
	}
	if n, err := q.PostBatch([]int{depth, depth + 1}); n != 0 || !errors.Is(err, ErrFull) {
		t.Fatalf("PostBatch on a full queue = %d, %v; want 0, ErrFull", n, err)
	}
	evs := make([]int, 2*depth)
	n := q.TryDequeue(evs)
	if diff := cmp.Diff(seq(0, depth), evs[:n]); diff != "" {
		t.Errorf("dequeued events (-want +got):\n%s", diff)
	}
	if q.Len() != 0 {
		t.Errorf("Len() = %d after draining, want 0", q.Len())
	}
}

func TestPostBatch(t *testing.T) {
	q := newQueue[int](t, 6, Notify)
	if err := q.Reserve(1); err != nil {
		t.Fatal(err)
	}
	if n, err := q.PostBatch(seq(0, 3)); n != 3 || err != nil {
		t.Fatalf("PostBatch(3) = %d, %v; want 3, nil", n, err)
	}
	if n, err := q.PostBatch(seq(3, 4)); n != 2 || !errors.Is(err, ErrFull) {
		t.Fatalf("PostBatch(4) with 2 free = %d, %v; want 2, ErrFull", n, err)
	}
	if n, err := q.PostBatch(nil); n != 0 || err != nil {
		t.Fatalf("PostBatch(nil) = %d, %v; want 0, nil", n, err)
	}
	evs := make([]int, 8)
	n := q.TryDequeue(evs)
	if diff := cmp.Diff(seq(0, 5), evs[:n]); diff != "" {
		t.Errorf("dequeued events (-want +got):\n%s", diff)
	}
}

func TestPoll(t *testing.T) {
	tests := []struct {
		name    string
		queued  int
		size    int
		min     int
		want    []int
		wantErr error
	}{
		{"empty min 1", 0, 4, 1, []int{}, ErrTimeout},
		{"empty min 0", 0, 4, 0, []int{}, nil},
		{"empty nil events", 0, 0, 0, []int{}, nil},
		{"fewer than min", 2, 4, 3, []int{0, 1}, ErrTimeout},
		{"min met returns up to len", 6, 4, 2, []int{0, 1, 2, 3}, nil},
		{"min 0 returns what is there", 3, 4, 0, []int{0, 1, 2}, nil},
	}
	for _, mode := range allModes {
		for _, tt := range tests {
			t.Run(mode.String()+"/"+tt.name, func(t *testing.T) {
				q := newQueue[int](t, 8, mode)
				if _, err := q.PostBatch(seq(0, tt.queued)); err != nil {
					t.Fatal(err)
				}
				evs := make([]int, tt.size)
				n, err := q.Dequeue(evs, tt.min, 0)
				if err != tt.wantErr {
					t.Errorf("Dequeue error = %v, want %v", err, tt.wantErr)
				}
				if diff := cmp.Diff(tt.want, evs[:n]); diff != "" {
					t.Errorf("Dequeue events (-want +got):\n%s", diff)
				}
				if want := tt.queued - n; q.Len() != want {
					t.Errorf("Len() = %d after Dequeue, want %d", q.Len(), want)
				}
			})
		}
	}
}

func TestErrTimeout(t *testing.T) {
	if !errors.Is(ErrTimeout, os.ErrDeadlineExceeded) {
		t.Error("errors.Is(ErrTimeout, os.ErrDeadlineExceeded) = false")
	}
	if errors.Is(ErrTimeout, ErrClosed) {
		t.Error("errors.Is(ErrTimeout, ErrClosed) = true")
	}
	var te interface{ Timeout() bool }
	if !errors.As(ErrTimeout, &te) || !te.Timeout() {
		t.Error("ErrTimeout has no Timeout() == true")
	}
}

func TestDequeueMin(t *testing.T) {
	for _, mode := range bubbleModes {
		t.Run(mode.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := newQueue[int](t, 16, mode)
				ch := goDequeue(q, 8, 3, -1)
				for i := range 2 {
					if err := q.Post(i); err != nil {
						t.Fatal(err)
					}
					synctest.Wait()
					if r, ok := returned(ch); ok {
						t.Fatalf("Dequeue(min 3) returned %v, %v with %d events queued", r.evs, r.err, i+1)
					}
				}
				if _, err := q.PostBatch(seq(2, 3)); err != nil {
					t.Fatal(err)
				}
				r := <-ch
				if r.err != nil {
					t.Fatalf("Dequeue error = %v", r.err)
				}
				if diff := cmp.Diff(seq(0, 5), r.evs); diff != "" {
					t.Errorf("Dequeue events (-want +got):\n%s", diff)
				}

				// More than len(events) queued: at most len(events) returned.
				if _, err := q.PostBatch(seq(0, 10)); err != nil {
					t.Fatal(err)
				}
				r = <-goDequeue(q, 4, 2, -1)
				if diff := cmp.Diff(seq(0, 4), r.evs); diff != "" || r.err != nil {
					t.Errorf("Dequeue(len 4, min 2) error %v, events (-want +got):\n%s", r.err, diff)
				}
			})
		})
	}
}

func TestDequeueTimeout(t *testing.T) {
	for _, mode := range bubbleModes {
		t.Run(mode.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := newQueue[int](t, 16, mode)
				if err := q.Post(42); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				evs := make([]int, 4)
				n, err := q.Dequeue(evs, 3, 10*time.Millisecond)
				if elapsed := time.Since(start); elapsed != 10*time.Millisecond {
					t.Errorf("Dequeue returned after %v, want 10ms", elapsed)
				}
				if !errors.Is(err, ErrTimeout) || !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Errorf("Dequeue error = %v, want ErrTimeout and os.ErrDeadlineExceeded", err)
				}
				if diff := cmp.Diff([]int{42}, evs[:n]); diff != "" {
					t.Errorf("Dequeue events (-want +got):\n%s", diff)
				}
				// Nothing queued: the timeout returns no events.
				n, err = q.Dequeue(evs, 1, time.Second)
				if n != 0 || err != ErrTimeout {
					t.Errorf("Dequeue on empty queue = %d, %v; want 0, ErrTimeout", n, err)
				}
				// A timeout that lets the events arrive is not reported.
				go func() {
					time.Sleep(5 * time.Millisecond)
					_, _ = q.PostBatch(seq(0, 3))
				}()
				n, err = q.Dequeue(evs, 3, 10*time.Millisecond)
				if n != 3 || err != nil {
					t.Errorf("Dequeue with events in time = %d, %v; want 3, nil", n, err)
				}
			})
		})
	}
}

// TestBusyPollTimeout runs in real time: BusyPoll never lets a bubble's
// clock move.
func TestBusyPollTimeout(t *testing.T) {
	q := newQueue[int](t, 16, BusyPoll)
	if err := q.Post(1); err != nil {
		t.Fatal(err)
	}
	within(t, 10*time.Second, func() {
		start := time.Now()
		evs := make([]int, 4)
		n, err := q.Dequeue(evs, 2, 5*time.Millisecond)
		if elapsed := time.Since(start); elapsed < 5*time.Millisecond {
			t.Errorf("Dequeue returned after %v, before its 5ms timeout", elapsed)
		}
		if n != 1 || evs[0] != 1 || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("Dequeue = %d (%v), %v; want 1 ([1]), ErrTimeout", n, evs[:n], err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		defer cancel()
		if n, err := q.DequeueContext(ctx, evs, 1); n != 0 || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("DequeueContext = %d, %v; want 0, context.DeadlineExceeded", n, err)
		}
		if err := q.Post(2); err != nil {
			t.Error(err)
		}
		if n, err := q.Dequeue(evs, 1, -1); n != 1 || err != nil {
			t.Errorf("Dequeue with an event queued = %d, %v; want 1, nil", n, err)
		}
	})
}

func TestDequeueContext(t *testing.T) {
	for _, mode := range bubbleModes {
		t.Run(mode.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := newQueue[int](t, 16, mode)

				// Cancellation returns what is queued with a wrapped context.Canceled.
				ctx, cancel := context.WithCancel(context.Background())
				ch := goDequeueContext(ctx, q, 4, 3)
				if _, err := q.PostBatch([]int{1, 2}); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				if r, ok := returned(ch); ok {
					t.Fatalf("DequeueContext returned %v, %v before cancel", r.evs, r.err)
				}
				cancel()
				r := <-ch
				if !errors.Is(r.err, context.Canceled) {
					t.Errorf("error = %v, want context.Canceled", r.err)
				}
				if diff := cmp.Diff([]int{1, 2}, r.evs); diff != "" {
					t.Errorf("events (-want +got):\n%s", diff)
				}

				// A context deadline ends the wait at the deadline.
				ctx, cancel = context.WithTimeout(context.Background(), 7*time.Millisecond)
				defer cancel()
				start := time.Now()
				r = <-goDequeueContext(ctx, q, 4, 1)
				if elapsed := time.Since(start); elapsed != 7*time.Millisecond {
					t.Errorf("returned after %v, want 7ms", elapsed)
				}
				if len(r.evs) != 0 || !errors.Is(r.err, context.DeadlineExceeded) {
					t.Errorf("got %v, %v; want no events, context.DeadlineExceeded", r.evs, r.err)
				}

				// A done context still returns events that meet min.
				if _, err := q.PostBatch([]int{5, 6}); err != nil {
					t.Fatal(err)
				}
				r = <-goDequeueContext(ctx, q, 4, 2)
				if diff := cmp.Diff([]int{5, 6}, r.evs); diff != "" || r.err != nil {
					t.Errorf("with done ctx: error %v, events (-want +got):\n%s", r.err, diff)
				}
			})
		})
	}
}

func TestWait(t *testing.T) {
	for _, mode := range bubbleModes {
		t.Run(mode.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := newQueue[int](t, 4, mode)
				ch := goWait(context.Background(), q)
				synctest.Wait()
				if r, ok := returned(ch); ok {
					t.Fatalf("Wait returned %v on an empty queue", r.err)
				}
				if err := q.Post(1); err != nil {
					t.Fatal(err)
				}
				if r := <-ch; r.err != nil {
					t.Errorf("Wait error = %v", r.err)
				}
				if q.Len() != 1 {
					t.Errorf("Len() = %d after Wait, want 1 (Wait dequeues nothing)", q.Len())
				}
				if err := q.Wait(context.Background()); err != nil {
					t.Errorf("Wait on a non-empty queue = %v", err)
				}
				q.TryDequeue(make([]int, 1))

				ctx, cancel := context.WithCancel(context.Background())
				ch = goWait(ctx, q)
				synctest.Wait()
				cancel()
				if r := <-ch; !errors.Is(r.err, context.Canceled) {
					t.Errorf("Wait error after cancel = %v, want context.Canceled", r.err)
				}

				if err := q.Post(2); err != nil {
					t.Fatal(err)
				}
				if err := q.Close(); err != nil {
					t.Fatal(err)
				}
				if err := q.Wait(context.Background()); err != nil {
					t.Errorf("Wait on a closed non-empty queue = %v, want nil", err)
				}
				q.TryDequeue(make([]int, 1))
				if err := q.Wait(context.Background()); !errors.Is(err, ErrClosed) {
					t.Errorf("Wait on a closed empty queue = %v, want ErrClosed", err)
				}
			})
		})
	}
}

// startWaiters starts waiters of every kind on q, all with no limit but
// Close; it returns their result channels.
func startWaiters(q *Queue[int], n int) []<-chan result {
	var chs []<-chan result
	for i := range n {
		switch i % 4 {
		case 0:
			chs = append(chs, goDequeue(q, 4, 1+i%4, -1))
		case 1:
			chs = append(chs, goDequeue(q, 2, 2, time.Hour))
		case 2:
			chs = append(chs, goDequeueContext(context.Background(), q, 3, 1))
		case 3:
			chs = append(chs, goWait(context.Background(), q))
		}
	}
	return chs
}

func TestCloseWakesEveryWaiter(t *testing.T) {
	for _, mode := range bubbleModes {
		t.Run(mode.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := newQueue[int](t, 4, mode)
				chs := startWaiters(q, 32)
				synctest.Wait()
				for i, ch := range chs {
					if r, ok := returned(ch); ok {
						t.Fatalf("waiter %d returned %v before Close", i, r.err)
					}
				}
				if err := q.Close(); err != nil {
					t.Fatalf("Close() = %v", err)
				}
				for i, ch := range chs {
					if r := <-ch; !errors.Is(r.err, ErrClosed) || len(r.evs) != 0 {
						t.Errorf("waiter %d returned %v, %v; want no events, ErrClosed", i, r.evs, r.err)
					}
				}
			})
		})
	}
	t.Run(BusyPoll.String(), func(t *testing.T) {
		q := newQueue[int](t, 4, BusyPoll)
		chs := startWaiters(q, 4)
		time.Sleep(time.Millisecond)
		within(t, 10*time.Second, func() {
			if err := q.Close(); err != nil {
				t.Errorf("Close() = %v", err)
			}
			for i, ch := range chs {
				if r := <-ch; !errors.Is(r.err, ErrClosed) {
					t.Errorf("waiter %d returned %v, want ErrClosed", i, r.err)
				}
			}
		})
	})
}

func TestCloseKeepsQueuedEvents(t *testing.T) {
	for _, mode := range allModes {
		t.Run(mode.String(), func(t *testing.T) {
			q := newQueue[int](t, 8, mode)
			if _, err := q.PostBatch(seq(0, 5)); err != nil {
				t.Fatal(err)
			}
			if err := q.Close(); err != nil {
				t.Fatalf("first Close() = %v, want nil", err)
			}
			if err := q.Close(); !errors.Is(err, ErrClosed) {
				t.Errorf("second Close() = %v, want ErrClosed", err)
			}
			if err := q.Post(9); !errors.Is(err, ErrClosed) {
				t.Errorf("Post after Close = %v, want ErrClosed", err)
			}
			if n, err := q.PostBatch([]int{9}); n != 0 || !errors.Is(err, ErrClosed) {
				t.Errorf("PostBatch after Close = %d, %v; want 0, ErrClosed", n, err)
			}
			if err := q.Reserve(1); !errors.Is(err, ErrClosed) {
				t.Errorf("Reserve after Close = %v, want ErrClosed", err)
			}
			evs := make([]int, 3)
			var got []int
			within(t, 10*time.Second, func() {
				n, err := q.Dequeue(evs, 3, -1)
				got = append(got, evs[:n]...)
				if n != 3 || err != nil {
					t.Errorf("first Dequeue after Close = %d, %v; want 3, nil", n, err)
				}
				// Fewer than min remain: returned without waiting, no error.
				n, err = q.Dequeue(evs, 3, -1)
				got = append(got, evs[:n]...)
				if n != 2 || err != nil {
					t.Errorf("second Dequeue after Close = %d, %v; want 2, nil", n, err)
				}
				if n, err := q.Dequeue(evs, 1, -1); n != 0 || !errors.Is(err, ErrClosed) {
					t.Errorf("Dequeue on closed empty queue = %d, %v; want 0, ErrClosed", n, err)
				}
				if n, err := q.Dequeue(evs, 0, 0); n != 0 || !errors.Is(err, ErrClosed) {
					t.Errorf("poll on closed empty queue = %d, %v; want 0, ErrClosed", n, err)
				}
				if n, err := q.DequeueContext(context.Background(), evs, 1); n != 0 || !errors.Is(err, ErrClosed) {
					t.Errorf("DequeueContext on closed empty queue = %d, %v; want 0, ErrClosed", n, err)
				}
			})
			if diff := cmp.Diff(seq(0, 5), got); diff != "" {
				t.Errorf("events dequeued after Close (-want +got):\n%s", diff)
			}
			if n := q.TryDequeue(evs); n != 0 {
				t.Errorf("TryDequeue on closed empty queue = %d", n)
			}
		})
	}
}

func TestCloseReturnsPartialEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue[int](t, 8, Notify)
		ch := goDequeue(q, 8, 5, -1)
		if _, err := q.PostBatch([]int{3, 4}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		r := <-ch
		if diff := cmp.Diff([]int{3, 4}, r.evs); diff != "" || r.err != nil {
			t.Errorf("waiter woken by Close: error %v (want nil), events (-want +got):\n%s", r.err, diff)
		}
	})
}

func TestReservations(t *testing.T) {
	q := newQueue[int](t, 4, Notify)
	steps := []struct {
		name         string
		f            func() error
		wantErr      error
		wantLen      int
		wantReserved int
	}{
		{"Reserve 3", func() error { return q.Reserve(3) }, nil, 0, 3},
		{"Reserve 0", func() error { return q.Reserve(0) }, nil, 0, 3},
		{"Post uses the free slot", func() error { return q.Post(0) }, nil, 1, 3},
		{"Post finds no free slot", func() error { return q.Post(99) }, ErrFull, 1, 3},
		{"Reserve beyond capacity", func() error { return q.Reserve(1) }, ErrFull, 1, 3},
		{"PostReserved 1", func() error { return q.PostReserved(1) }, nil, 2, 2},
		{"PostReserved 2", func() error { return q.PostReserved(2) }, nil, 3, 1},
		{"PostReserved 3 fills the queue", func() error { return q.PostReserved(3) }, nil, 4, 0},
		{"PostReserved without reservation", func() error { return q.PostReserved(99) }, ErrInvalid, 4, 0},
		{"dequeue 3", func() error { q.TryDequeue(make([]int, 3)); return nil }, nil, 1, 0},
		{"Reserve 2", func() error { return q.Reserve(2) }, nil, 1, 2},
		{"PostReservedBatch beyond the reservations", func() error { return q.PostReservedBatch([]int{99, 99, 99}) }, ErrInvalid, 1, 2},
		{"PostReservedBatch 2", func() error { return q.PostReservedBatch([]int{4, 5}) }, nil, 3, 0},
		{"PostReservedBatch of nothing", func() error { return q.PostReservedBatch(nil) }, nil, 3, 0},
		{"dequeue 1", func() error { q.TryDequeue(make([]int, 1)); return nil }, nil, 2, 0},
		{"Reserve 2", func() error { return q.Reserve(2) }, nil, 2, 2},
		{"Post with all room reserved", func() error { return q.Post(99) }, ErrFull, 2, 2},
		{"Unreserve 1", func() error { q.Unreserve(1); return nil }, nil, 2, 1},
		{"Post into the returned slot", func() error { return q.Post(6) }, nil, 3, 1},
		{"Close", func() error { return q.Close() }, nil, 3, 1},
		{"PostReservedBatch after Close consumes them", func() error { return q.PostReservedBatch([]int{99}) }, ErrClosed, 3, 0},
		{"PostReserved after Close without one", func() error { return q.PostReserved(99) }, ErrInvalid, 3, 0},
	}
	for _, s := range steps {
		err := s.f()
		if !errors.Is(err, s.wantErr) || (s.wantErr == nil && err != nil) {
			t.Errorf("%s: error = %v, want %v", s.name, err, s.wantErr)
		}
		if q.Len() != s.wantLen || q.Reserved() != s.wantReserved {
			t.Errorf("%s: Len, Reserved = %d, %d; want %d, %d", s.name, q.Len(), q.Reserved(), s.wantLen, s.wantReserved)
		}
	}
	evs := make([]int, 8)
	n := q.TryDequeue(evs)
	if diff := cmp.Diff([]int{4, 5, 6}, evs[:n]); diff != "" {
		t.Errorf("events left (-want +got):\n%s", diff)
	}
}

// TestReservedProducersNeverOverflow runs producers that reserve a slot
// for each event before they promise it, next to an unreserved poster that
// keeps the queue full, and checks that no PostReserved ever fails.
func TestReservedProducersNeverOverflow(t *testing.T) {
	const (
		producers   = 3
		outstanding = 8
		rounds      = 100
	)
	q := newQueue[int](t, 32, Notify)
	within(t, 30*time.Second, func() {
		stop := make(chan struct{})
		noiseDone := make(chan struct{})
		go func() { // takes every free slot it can
			defer close(noiseDone)
			for {
				select {
				case <-stop:
					return
				default:
				}
				switch err := q.Post(-1); {
				case errors.Is(err, ErrFull):
					time.Sleep(20 * time.Microsecond)
				case err != nil:
					t.Errorf("noise Post: %v", err)
					return
				}
			}
		}()
		prodDone := make(chan struct{})
		for p := range producers {
			go func() {
				defer func() { prodDone <- struct{}{} }()
				for r := range rounds {
					// Accept `outstanding` requests: reserve their events.
					for {
						err := q.Reserve(outstanding)
						if err == nil {
							break
						}
						if !errors.Is(err, ErrFull) {
							t.Errorf("producer %d: Reserve: %v", p, err)
							return
						}
						time.Sleep(10 * time.Microsecond)
					}
					for i := range outstanding {
						if err := q.PostReserved(p<<20 | r*outstanding + i); err != nil {
							t.Errorf("producer %d: PostReserved: %v", p, err)
							return
						}
					}
				}
			}()
		}
		next := make([]int, producers)
		evs := make([]int, 16)
		for got := 0; got < producers*rounds*outstanding; {
			n, err := q.Dequeue(evs, 1, 10*time.Second)
			if err != nil {
				t.Errorf("Dequeue after %d events: %v", got, err)
				break
			}
			for _, ev := range evs[:n] {
				if ev < 0 {
					continue
				}
				p, i := ev>>20, ev&(1<<20-1)
				if i != next[p] {
					t.Errorf("producer %d: event %d, want %d", p, i, next[p])
				}
				next[p] = i + 1
				got++
			}
		}
		close(stop)
		<-noiseDone
		for range producers {
			<-prodDone
		}
		if q.Reserved() != 0 {
			t.Errorf("Reserved() = %d at the end, want 0", q.Reserved())
		}
	})
}
