package eventq

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"
)

// event identifies the i-th event of poster p.
func event(p, i int) int { return p<<32 | i }

func splitEvent(ev int) (p, i int) { return ev >> 32, ev & (1<<32 - 1) }

// postAll posts event(p, 0..n-1) in order, retrying while the queue is full.
func postAll(t *testing.T, q *Queue[int], p, n int) {
	for i := 0; i < n; {
		err := q.Post(event(p, i))
		switch {
		case err == nil:
			i++
		case errors.Is(err, ErrFull):
			runtime.Gosched()
		default:
			t.Errorf("poster %d: Post(%d): %v", p, i, err)
			return
		}
	}
}

func TestFIFOConcurrentPosters(t *testing.T) {
	const posters = 4
	perPoster := 5000
	if testing.Short() {
		perPoster = 1000
	}
	for _, mode := range allModes {
		t.Run(mode.String(), func(t *testing.T) {
			q := newQueue[int](t, 64, mode)
			within(t, time.Minute, func() {
				var wg sync.WaitGroup
				for p := range posters {
					wg.Go(func() { postAll(t, q, p, perPoster) })
				}
				next := make([]int, posters)
				evs := make([]int, 16)
				for got := 0; got < posters*perPoster; {
					n, err := q.Dequeue(evs, 1, 10*time.Second)
					if err != nil {
						t.Errorf("Dequeue after %d events: %v", got, err)
						break
					}
					for _, ev := range evs[:n] {
						p, i := splitEvent(ev)
						if i != next[p] {
							t.Errorf("poster %d: got event %d, want %d", p, i, next[p])
							return
						}
						next[p]++
					}
					got += n
				}
				wg.Wait()
				if n := q.Len(); n != 0 {
					t.Errorf("Len() = %d after all events were taken", n)
				}
			})
		})
	}
}

// TestStress runs posters that use Post, PostBatch and reservations
// against dequeuers that use every dequeue operation with random sizes,
// minimums and timeouts, then closes the queue. Every event must be taken
// exactly once, and each dequeuer must see each poster's events in order.
func TestStress(t *testing.T) {
	const (
		posters   = 4
		dequeuers = 3
	)
	perPoster := 4000
	if testing.Short() {
		perPoster = 500
	}
	for i, mode := range allModes {
		seed := uint64(i + 1)
		t.Run(fmt.Sprintf("%v/seed=%d", mode, seed), func(t *testing.T) {
			q := newQueue[int](t, 32, mode)
			var mu sync.Mutex
			seen := make(map[int]int) // event -> dequeuer that took it
			within(t, 2*time.Minute, func() {
				var posting, taking sync.WaitGroup
				for p := range posters {
					rng := rand.New(rand.NewPCG(seed, uint64(p)))
					posting.Go(func() { stressPoster(t, q, rng, p, perPoster) })
				}
				for d := range dequeuers {
					rng := rand.New(rand.NewPCG(seed, uint64(100+d)))
					taking.Go(func() {
						last := make([]int, posters)
						for i := range last {
							last[i] = -1
						}
						for ev := range stressDequeuer(t, q, rng) {
							p, i := splitEvent(ev)
							if i <= last[p] {
								t.Errorf("dequeuer %d: poster %d event %d after %d", d, p, i, last[p])
							}
							last[p] = i
							mu.Lock()
							if prev, dup := seen[ev]; dup {
								t.Errorf("event %d/%d taken by dequeuers %d and %d", p, i, prev, d)
							}
							seen[ev] = d
							mu.Unlock()
						}
					})
				}
				posting.Wait()
				if err := q.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
				taking.Wait()
			})
			if len(seen) != posters*perPoster {
				t.Errorf("took %d distinct events, want %d", len(seen), posters*perPoster)
			}
			if q.Reserved() != 0 || q.Len() != 0 {
				t.Errorf("Reserved, Len = %d, %d at the end; want 0, 0", q.Reserved(), q.Len())
			}
		})
	}
}

func stressPoster(t *testing.T, q *Queue[int], rng *rand.Rand, p, n int) {
	batch := make([]int, 0, 8)
	for i := 0; i < n; {
		switch rng.IntN(3) {
		case 0:
			err := q.Post(event(p, i))
			if err == nil {
				i++
			} else if !errors.Is(err, ErrFull) {
				t.Errorf("Post: %v", err)
				return
			}
		case 1:
			batch = batch[:0]
			for j := range min(1+rng.IntN(8), n-i) {
				batch = append(batch, event(p, i+j))
			}
			k, err := q.PostBatch(batch)
			i += k
			if err != nil && !errors.Is(err, ErrFull) {
				t.Errorf("PostBatch: %v", err)
				return
			}
		case 2:
			k := min(1+rng.IntN(4), n-i)
			if err := q.Reserve(k); err != nil {
				if !errors.Is(err, ErrFull) {
					t.Errorf("Reserve: %v", err)
					return
				}
				break
			}
			// Use some of the reservations and give the rest back.
			use := rng.IntN(k + 1)
			for j := range use {
				if err := q.PostReserved(event(p, i+j)); err != nil {
					t.Errorf("PostReserved: %v", err)
					return
				}
			}
			q.Unreserve(k - use)
			i += use
		}
		if rng.IntN(4) == 0 {
			runtime.Gosched()
		}
	}
}

// stressDequeuer takes events until the queue is closed and drained,
// calling yield for each.
func stressDequeuer(t *testing.T, q *Queue[int], rng *rand.Rand) func(func(int) bool) {
	return func(yield func(int) bool) {
		evs := make([]int, 16)
		for {
			size := 1 + rng.IntN(len(evs))
			mn := rng.IntN(size + 1)
			var n int
			var err error
			isDequeue := false
			switch rng.IntN(6) {
			case 0:
				n = q.TryDequeue(evs[:size])
			case 1:
				n, err = q.Dequeue(evs[:size], mn, -1)
				isDequeue = true
			case 2:
				n, err = q.Dequeue(evs[:size], mn, time.Duration(rng.IntN(200))*time.Microsecond)
				isDequeue = true
			case 3:
				n, err = q.Dequeue(evs[:size], mn, 0)
				isDequeue = true
			case 4:
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(300))*time.Microsecond)
				n, err = q.DequeueContext(ctx, evs[:size], mn)
				cancel()
				if errors.Is(err, context.DeadlineExceeded) {
					err = nil
				}
			case 5:
				ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
				err = q.Wait(ctx)
				cancel()
				if errors.Is(err, context.DeadlineExceeded) {
					err = nil
				}
			}
			for _, ev := range evs[:n] {
				if !yield(ev) {
					return
				}
			}
			switch {
			case errors.Is(err, ErrClosed):
				if n != 0 {
					t.Errorf("ErrClosed with %d events", n)
				}
				return
			case err != nil && !errors.Is(err, ErrTimeout):
				t.Errorf("dequeue: %v", err)
				return
			case isDequeue && err == nil && n < mn && !q.isClosed.Load():
				// Fewer than min without an error only once closed.
				t.Errorf("Dequeue got %d events with min %d and no error on an open queue", n, mn)
			}
		}
	}
}
