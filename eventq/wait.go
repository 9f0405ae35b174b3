package eventq

// Waiting: the spinning and the blocking of Dequeue, DequeueContext and
// Wait, and the list of the blocked waiters that posts wake.

import (
	"context"
	"math"
	"time"

	"github.com/exsgo/exs/internal/spin"
)

// waiter is one goroutine blocked in a waiting operation. Waiters are
// reused through the queue's free list, so blocking does not allocate once
// the queue has seen as many concurrent waiters.
type waiter struct {
	ch         chan struct{} // capacity 1: the wake token, one or none
	timer      *time.Timer   // created on first use, stopped when idle
	min        int           // events needed to wake: min of Dequeue, 1 for Wait
	claim      int           // events it expects to take: min, 0 for Wait
	queued     bool          // on the waiter list
	prev, next *waiter
}

// wait runs the waiting part of Dequeue, DequeueContext and Wait after
// their first check failed: it spins (Adaptive, BusyPoll), then blocks
// (Adaptive, Notify). ctx may be nil; hasDeadline says whether deadline is
// set.
func (q *Queue[T]) wait(events []T, min int, peek bool, deadline time.Time, hasDeadline bool, ctx context.Context) (int, error) {
	var done <-chan struct{}
	if ctx != nil {
		done = ctx.Done()
	}
	if q.mode != Notify {
		if k, ok, err := q.spinWait(events, min, peek, deadline, hasDeadline, ctx, done); ok {
			return k, err
		}
	}
	return q.blockWait(events, min, peek, deadline, hasDeadline, ctx, done)
}

// spinWait re-checks the queue, yielding between checks, until the
// operation finishes (ok is true) or, in Adaptive mode, the spin time is
// used up (ok is false).
func (q *Queue[T]) spinWait(events []T, min int, peek bool, deadline time.Time, hasDeadline bool, ctx context.Context, done <-chan struct{}) (k int, ok bool, err error) {
	need := int64(max(min, 1))
	q.spinners.Add(1)
	defer q.spinners.Add(-1)
	q.mu.Lock()
	if k, ok, err := q.tryLocked(events, min, peek); ok {
		q.mu.Unlock()
		return k, true, err
	}
	q.avail.Store(int64(q.n))
	q.mu.Unlock()

	sp := spin.Spin{}
	if q.mode == Adaptive {
		sp = spin.For(q.spin)
	}
	if hasDeadline {
		sp.SetDeadline(deadline)
	}
	for {
		if q.avail.Load() >= need || q.isClosed.Load() {
			q.mu.Lock()
			k, ok, err := q.tryLocked(events, min, peek)
			q.mu.Unlock()
			if ok {
				return k, true, err
			}
		}
		if done != nil {
			select {
			case <-done:
				q.mu.Lock()
				k, err := q.expireLocked(events, min, peek, ctxError(ctx))
				q.mu.Unlock()
				return k, true, err
			default:
			}
		}
		switch sp.Next() {
		case spin.Expired:
			q.mu.Lock()
			k, err := q.expireLocked(events, min, peek, ErrTimeout)
			q.mu.Unlock()
			return k, true, err
		case spin.Block:
			return 0, false, nil
		}
	}
}

// blockWait registers a waiter and sleeps until it is signalled, the queue
// is closed, the deadline passes or ctx is done, re-checking after each
// wake-up.
func (q *Queue[T]) blockWait(events []T, min int, peek bool, deadline time.Time, hasDeadline bool, ctx context.Context, done <-chan struct{}) (int, error) {
	claim := min
	if peek {
		claim = 0
	}
	need := max(min, 1)

	q.mu.Lock()
	w := q.getWaiterLocked()
	var timerC <-chan time.Time
	if hasDeadline {
		d := time.Until(deadline)
		if d <= 0 {
			k, err := q.expireLocked(events, min, peek, ErrTimeout)
			q.putWaiterLocked(w)
			q.mu.Unlock()
			return k, err
		}
		if w.timer == nil {
			w.timer = time.NewTimer(d)
		} else {
			w.timer.Reset(d)
		}
		timerC = w.timer.C
	}
	for {
		if k, ok, err := q.tryLocked(events, min, peek); ok {
			q.putWaiterLocked(w)
			q.passOnLocked()
			q.mu.Unlock()
			return k, err
		}
		q.addWaiterLocked(w, need, claim)
		// If w was signalled and found its events taken, the events it
		// claimed may satisfy a waiter that was skipped for them.
		q.passOnLocked()
		q.mu.Unlock()

		var cause error
		woken := false
		if timerC == nil && done == nil {
			<-w.ch // a plain receive is cheaper than a select
			woken = true
		} else {
			select {
			case <-w.ch:
				woken = true
			case <-timerC:
				cause = ErrTimeout
			case <-done:
				cause = ctxError(ctx)
			}
		}

		q.mu.Lock()
		q.detachLocked(w, woken)
		if peek && woken && !q.closed {
			// Wait reports that an event arrived, even if another
			// dequeuer has taken it since. (Close wakes waiters too; they
			// report ErrClosed below if the queue is empty.)
			q.putWaiterLocked(w)
			q.passOnLocked()
			q.mu.Unlock()
			return 0, nil
		}
		if cause != nil {
			k, err := q.expireLocked(events, min, peek, cause)
			q.putWaiterLocked(w)
			q.passOnLocked()
			q.mu.Unlock()
			return k, err
		}
	}
}

// getWaiterLocked returns an idle waiter from the free list or a new one.
func (q *Queue[T]) getWaiterLocked() *waiter {
	w := q.free
	if w == nil {
		return &waiter{ch: make(chan struct{}, 1)}
	}
	q.free = w.next
	w.next = nil
	return w
}

// putWaiterLocked returns a detached waiter to the free list.
func (q *Queue[T]) putWaiterLocked(w *waiter) {
	if w.timer != nil {
		w.timer.Stop() // no stale tick can be received after Stop
	}
	w.next = q.free
	q.free = w
}

// addWaiterLocked registers w at the tail of the waiter list.
func (q *Queue[T]) addWaiterLocked(w *waiter, need, claim int) {
	w.min, w.claim, w.queued = need, claim, true
	w.prev, w.next = q.waitTail, nil
	if q.waitTail == nil {
		q.waitHead = w
	} else {
		q.waitTail.next = w
	}
	q.waitTail = w
	q.nwait++
	q.minWant = min(q.minWant, need)
}

// removeLocked takes a registered waiter off the list. minWant stays a
// lower bound; wakeLocked recomputes it.
func (q *Queue[T]) removeLocked(w *waiter) {
	if w.prev == nil {
		q.waitHead = w.next
	} else {
		w.prev.next = w.next
	}
	if w.next == nil {
		q.waitTail = w.prev
	} else {
		w.next.prev = w.prev
	}
	w.prev, w.next, w.queued = nil, nil, false
	q.nwait--
	if q.nwait == 0 {
		q.minWant = math.MaxInt
	}
}

// detachLocked undoes w's registration after it woke for any reason;
// woken says whether it received its token. A still registered waiter
// leaves the list. A signalled one drops its claim and, if it woke for
// another reason, consumes its token (sent under mu, so it is there), so
// that w.ch is empty when w is next registered.
func (q *Queue[T]) detachLocked(w *waiter, woken bool) {
	if w.queued {
		q.removeLocked(w)
		return
	}
	if !woken {
		<-w.ch
	}
	q.claimed -= w.claim
}

// passOnLocked wakes registered waiters that the current state satisfies.
// Every waiter calls it when it leaves, so events it was woken for but did
// not take reach the next waiter.
func (q *Queue[T]) passOnLocked() {
	if q.nwait > 0 && q.n >= q.minWant {
		q.wakeLocked()
	}
}

// Wake-up protocol. The invariant, true whenever mu is released: if a
// registered waiter is satisfiable (its min <= n), then claimed > 0: a
// signalled waiter has not run yet and will pass the events on. It holds
// because
//   - every Post that adds events calls wakeLocked when a registered waiter
//     may be satisfiable (n >= minWant, a lower bound of their mins);
//   - wakeLocked skips a satisfiable waiter only when the events are
//     claimed by signalled waiters;
//   - a signalled waiter, when it runs, drops its claim and calls
//     passOnLocked, whether it leaves or registers again;
//   - every other change lowers n, which cannot make a waiter satisfiable.
// TestNoLostWakeups checks it at every quiescent point of random runs.

// wakeLocked signals, in arrival order, each registered waiter whose min is
// met and whose claim fits in the events not yet claimed by signalled
// waiters; waiters it skips wait for a later Post or for a signalled waiter
// to pass on what it leaves. It recomputes minWant.
func (q *Queue[T]) wakeLocked() {
	budget := q.n - q.claimed
	low := math.MaxInt
	for w := q.waitHead; w != nil; {
		next := w.next
		if w.min <= q.n && w.claim <= budget {
			budget -= w.claim
			q.claimed += w.claim
			q.removeLocked(w)
			w.ch <- struct{}{} // never blocks: the token was consumed before w re-registered
		} else {
			low = min(low, w.min)
		}
		w = next
	}
	q.minWant = low
}
