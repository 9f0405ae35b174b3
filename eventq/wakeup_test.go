package eventq

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// started starts a waiter and waits until it is blocked, so that waiters
// register in the order they are started.
func started(ch <-chan result) <-chan result {
	synctest.Wait()
	return ch
}

func TestWakeupsByMin(t *testing.T) {
	for _, mode := range bubbleModes {
		t.Run(mode.String()+"/each woken when its min is met", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := newQueue[int](t, 16, mode)
				a := started(goDequeue(q, 3, 3, -1))
				b := started(goDequeue(q, 1, 1, -1))
				if err := q.Post(0); err != nil {
					t.Fatal(err)
				}
				if r := <-b; r.err != nil || !cmp.Equal(r.evs, []int{0}) {
					t.Errorf("min-1 waiter got %v, %v; want [0], nil", r.evs, r.err)
				}
				if _, err := q.PostBatch([]int{1, 2}); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				if r, ok := returned(a); ok {
					t.Fatalf("min-3 waiter returned %v, %v with 2 events queued", r.evs, r.err)
				}
				if err := q.Post(3); err != nil {
					t.Fatal(err)
				}
				if r := <-a; r.err != nil || !cmp.Equal(r.evs, []int{1, 2, 3}) {
					t.Errorf("min-3 waiter got %v, %v; want [1 2 3], nil", r.evs, r.err)
				}
			})
		})
		t.Run(mode.String()+"/one batch wakes every waiter it satisfies", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := newQueue[int](t, 16, mode)
				chs := []<-chan result{
					started(goDequeue(q, 2, 2, -1)),
					started(goDequeue(q, 1, 1, -1)),
					started(goDequeue(q, 2, 2, -1)),
					started(goWait(context.Background(), q)),
				}
				if _, err := q.PostBatch(seq(0, 5)); err != nil {
					t.Fatal(err)
				}
				var got []int
				for i, ch := range chs {
					r := <-ch
					if r.err != nil {
						t.Errorf("waiter %d: %v", i, r.err)
					}
					got = append(got, r.evs...)
				}
				slices.Sort(got)
				if diff := cmp.Diff(seq(0, 5), got); diff != "" {
					t.Errorf("events taken by the waiters (-want +got):\n%s", diff)
				}
			})
		})
		t.Run(mode.String()+"/waiter not woken for claimed events", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := newQueue[int](t, 16, mode)
				a := started(goDequeue(q, 2, 2, -1))
				b := started(goDequeue(q, 1, 1, -1))
				if _, err := q.PostBatch([]int{0, 1}); err != nil {
					t.Fatal(err)
				}
				if r := <-a; r.err != nil || !cmp.Equal(r.evs, []int{0, 1}) {
					t.Errorf("first waiter got %v, %v; want [0 1], nil", r.evs, r.err)
				}
				synctest.Wait()
				if r, ok := returned(b); ok {
					t.Fatalf("second waiter returned %v, %v with nothing queued", r.evs, r.err)
				}
				if err := q.Post(2); err != nil {
					t.Fatal(err)
				}
				if r := <-b; r.err != nil || !cmp.Equal(r.evs, []int{2}) {
					t.Errorf("second waiter got %v, %v; want [2], nil", r.evs, r.err)
				}
			})
		})
	}
}

// waiterKind is the operation a randomized waiter runs.
type waiterKind int

const (
	kindDequeue waiterKind = iota
	kindDequeueTimeout
	kindDequeueContext
	kindWait
)

// liveWaiter is a waiter of TestNoLostWakeups that has not returned.
type liveWaiter struct {
	kind   waiterKind
	size   int
	min    int
	cancel context.CancelFunc
	ch     <-chan result
}

// TestNoLostWakeups drives random waiters, posts, steals, cancellations and
// clock advances. Whenever everything is blocked it checks that no waiter
// sleeps while the queue could satisfy it, and at the end that every event
// was taken exactly once, in contiguous runs of the posting order.
func TestNoLostWakeups(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 8
	}
	for s := range seeds {
		seed := uint64(s + 1)
		mode := bubbleModes[s%len(bubbleModes)]
		t.Run(fmt.Sprintf("seed=%d/%v", seed, mode), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				testNoLostWakeups(t, seed, mode)
			})
		})
	}
}

func testNoLostWakeups(t *testing.T, seed uint64, mode WaitMode) {
	rng := rand.New(rand.NewPCG(seed, 0))
	q := newQueue[int](t, 24, mode)
	var (
		live  []*liveWaiter
		taken []int // every event taken, in no particular order
		next  int   // next event to post
	)
	closed := false
	check := func(step int, w *liveWaiter, r result) {
		t.Helper()
		taken = append(taken, r.evs...)
		for i := 1; i < len(r.evs); i++ {
			if r.evs[i] != r.evs[i-1]+1 {
				t.Errorf("step %d: waiter got %v, not a contiguous run", step, r.evs)
			}
		}
		switch {
		case r.err == nil && w.kind != kindWait && len(r.evs) < w.min && !closed:
			t.Errorf("step %d: waiter (min %d) got %v with no error", step, w.min, r.evs)
		case errors.Is(r.err, ErrTimeout) && w.kind != kindDequeueTimeout:
			t.Errorf("step %d: waiter of kind %d got ErrTimeout", step, w.kind)
		case errors.Is(r.err, context.Canceled) && w.kind != kindDequeueContext && w.kind != kindWait:
			t.Errorf("step %d: waiter of kind %d got %v", step, w.kind, r.err)
		case r.err != nil && !errors.Is(r.err, ErrTimeout) && !errors.Is(r.err, context.Canceled) && !errors.Is(r.err, ErrClosed):
			t.Errorf("step %d: unexpected error %v", step, r.err)
		}
	}
	collect := func(step int) {
		t.Helper()
		synctest.Wait()
		live = slices.DeleteFunc(live, func(w *liveWaiter) bool {
			r, ok := returned(w.ch)
			if ok {
				check(step, w, r)
				if w.cancel != nil {
					w.cancel()
				}
			}
			return ok
		})
		// Everyone is blocked: no waiter may sleep while the queue could
		// satisfy it.
		n := q.Len()
		for _, w := range live {
			if w.kind == kindWait && n > 0 || w.kind != kindWait && n >= w.min {
				t.Fatalf("step %d: waiter (kind %d, min %d) asleep with %d events queued", step, w.kind, w.min, n)
			}
		}
	}

	steps := 300
	if testing.Short() {
		steps = 100
	}
	for step := range steps {
		switch op := rng.IntN(10); {
		case op < 3 && len(live) < 12: // new waiter
			w := &liveWaiter{kind: waiterKind(rng.IntN(4)), size: 1 + rng.IntN(6)}
			w.min = 1 + rng.IntN(w.size)
			switch w.kind {
			case kindDequeue:
				w.ch = goDequeue(q, w.size, w.min, -1)
			case kindDequeueTimeout:
				w.ch = goDequeue(q, w.size, w.min, time.Duration(1+rng.IntN(5))*time.Millisecond)
			case kindDequeueContext:
				var ctx context.Context
				ctx, w.cancel = context.WithCancel(context.Background())
				w.ch = goDequeueContext(ctx, q, w.size, w.min)
			case kindWait:
				var ctx context.Context
				ctx, w.cancel = context.WithCancel(context.Background())
				w.min = 1
				w.ch = goWait(ctx, q)
			}
			live = append(live, w)
		case op < 7: // post a batch
			k := 1 + rng.IntN(4)
			n, err := q.PostBatch(seq(next, k))
			if err != nil && !errors.Is(err, ErrFull) {
				t.Fatalf("step %d: PostBatch: %v", step, err)
			}
			next += n
		case op < 8: // steal events outside any waiter
			evs := make([]int, rng.IntN(3))
			n := q.TryDequeue(evs)
			taken = append(taken, evs[:n]...)
		case op < 9: // cancel a waiter
			if len(live) > 0 {
				if w := live[rng.IntN(len(live))]; w.cancel != nil {
					w.cancel()
				}
			}
		default: // let the clock move so timeouts fire
			time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
		}
		collect(step)
	}

	closed = true
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	collect(steps)
	if len(live) != 0 {
		t.Fatalf("%d waiters still blocked after Close", len(live))
	}
	evs := make([]int, q.Cap())
	taken = append(taken, evs[:q.TryDequeue(evs)]...)
	slices.Sort(taken)
	if diff := cmp.Diff(seq(0, next), taken); diff != "" {
		t.Errorf("events taken vs posted (-want +got):\n%s", diff)
	}
}

// TestStolenClaimPassedOn is the regression test for a lost wake-up: a
// waiter signalled for events that a TryDequeue takes before it runs must
// pass on the events left to a waiter that was skipped for them.
func TestStolenClaimPassedOn(t *testing.T) {
	for _, mode := range bubbleModes {
		t.Run(mode.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := newQueue[int](t, 8, mode)
				a := started(goDequeue(q, 2, 2, -1))
				b := started(goDequeue(q, 1, 1, -1))
				// Post two events and steal one in a single critical
				// section, so the steal surely comes before a runs.
				q.mu.Lock()
				q.pushLocked(0)
				q.pushLocked(1)
				q.postedLocked() // signals a (claim 2); b is skipped
				q.takeLocked(make([]int, 1))
				q.mu.Unlock()
				if r := <-b; r.err != nil || !cmp.Equal(r.evs, []int{1}) {
					t.Errorf("skipped waiter got %v, %v; want [1], nil", r.evs, r.err)
				}
				synctest.Wait()
				if r, ok := returned(a); ok {
					t.Errorf("min-2 waiter returned %v, %v with nothing queued", r.evs, r.err)
				}
			})
		})
	}
}
