package eventq

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Queue is a bounded FIFO of events of type T.
//
// A Queue is safe for concurrent use by many posters and many dequeuers.
// Its zero value is not usable: create queues with New. Events are copied
// in and out by value; the queue clears a slot when its event is dequeued,
// so it holds no reference to a dequeued event.
//
// Capacity accounting: of the Cap() slots, Len() hold queued events,
// Reserved() are promised to holders of reservations, and the rest are
// free. Post and PostBatch use only free slots; PostReserved uses a
// reserved one. Len()+Reserved() <= Cap() always holds.
type Queue[T any] struct {
	mu       sync.Mutex
	buf      []T // ring; len(buf) is the capacity
	head     int // index of the oldest event
	n        int // number of queued events
	reserved int // slots promised by Reserve and not yet used
	closed   bool

	// Blocked waiters, guarded by mu. A registered waiter is on the list
	// and has not been signalled. A signalled waiter has been taken off the
	// list and sent its token; until it runs again, its claim (the events
	// it counts on taking) is part of claimed.
	waitHead, waitTail *waiter
	nwait              int     // registered waiters
	minWant            int     // <= least min of registered waiters; MaxInt if none
	claimed            int     // sum of the claims of signalled waiters
	free               *waiter // reusable waiters

	// Lock-free view for spinning waiters. avail mirrors n while
	// spinners > 0 (a spinner stores it under mu when it starts).
	spinners atomic.Int32
	avail    atomic.Int64
	isClosed atomic.Bool

	mode WaitMode
	spin time.Duration
}

// New returns an empty queue that holds up to depth events.
// It returns ErrInvalid if depth <= 0, opts.Mode is unknown or
// opts.SpinTime is negative.
func New[T any](depth int, opts Options) (*Queue[T], error) {
	if depth <= 0 {
		return nil, fmt.Errorf("%w: event queue depth %d", ErrInvalid, depth)
	}
	mode := opts.Mode
	if mode == 0 {
		mode = Adaptive
	}
	if mode > Notify {
		return nil, fmt.Errorf("%w: wait mode %v", ErrInvalid, mode)
	}
	d := opts.SpinTime
	if d < 0 {
		return nil, fmt.Errorf("%w: spin time %v", ErrInvalid, d)
	}
	if d == 0 {
		d = DefaultSpinTime
	}
	q := &Queue[T]{
		buf:     make([]T, depth),
		minWant: math.MaxInt,
		mode:    mode,
		spin:    d,
	}
	return q, nil
}

// Mode returns the queue's wait mode (Adaptive when Options.Mode was zero).
func (q *Queue[T]) Mode() WaitMode { return q.mode }

// Cap returns the queue's depth, the number of events it can hold.
func (q *Queue[T]) Cap() int { return len(q.buf) }

// Len returns the number of queued events.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	n := q.n
	q.mu.Unlock()
	return n
}

// Reserved returns the number of slots held by reservations.
func (q *Queue[T]) Reserved() int {
	q.mu.Lock()
	r := q.reserved
	q.mu.Unlock()
	return r
}

// Post appends ev to the queue using a free, unreserved slot. It never
// blocks and does not allocate. It returns ErrFull, without queuing ev, if
// Len()+Reserved() == Cap(), and ErrClosed after Close. Post never uses a
// reservation; see PostReserved.
func (q *Queue[T]) Post(ev T) error {
	q.mu.Lock()
	err := ErrFull
	if q.closed || q.n+q.reserved < len(q.buf) {
		err = q.postLocked(ev)
	}
	q.mu.Unlock()
	return err
}

// postLocked queues ev, in room the caller made sure of, unless the queue
// is closed (ErrClosed).
func (q *Queue[T]) postLocked(ev T) error {
	if q.closed {
		return ErrClosed
	}
	q.pushLocked(ev)
	q.postedLocked()
	return nil
}

// PostBatch appends as many events of evs, in order, as there are free
// unreserved slots, and returns how many it queued. If not all fit it
// returns ErrFull: evs[n:] were not queued. After Close it returns 0,
// ErrClosed. Like Post it never blocks.
func (q *Queue[T]) PostBatch(evs []T) (int, error) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return 0, ErrClosed
	}
	k := min(len(evs), len(q.buf)-q.n-q.reserved)
	for _, ev := range evs[:k] {
		q.pushLocked(ev)
	}
	if k > 0 {
		q.postedLocked()
	}
	q.mu.Unlock()
	if k < len(evs) {
		return k, ErrFull
	}
	return k, nil
}

// Blocked returns how many waiters are blocked on the queue (registered to
// be woken, past their spinning), for tests and monitoring.
func (q *Queue[T]) Blocked() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.nwait
}

// checkMin checks a dequeue's minimum count.
func (q *Queue[T]) checkMin(events []T, min int) error {
	switch {
	case min < 0 || min > len(events):
		return fmt.Errorf("%w: min %d, want 0 to len(events) = %d", ErrInvalid, min, len(events))
	case min > q.Cap():
		return fmt.Errorf("%w: min %d, more than the queue's depth %d: it would never be met", ErrInvalid, min, q.Cap())
	}
	return nil
}

// Reserve sets aside n free slots for n later calls of PostReserved, which
// then cannot fail with ErrFull. It returns ErrFull, reserving nothing, if
// Len()+Reserved()+n > Cap(); ErrInvalid if n < 0; ErrClosed after Close.
// Reserve(0) does nothing. Reserved slots are not free: Post and PostBatch
// cannot use them.
//
// A reservation is used once: PostReserved turns one reserved slot into a
// queued event, and when that event is dequeued its slot becomes free, not
// reserved again. The queue keeps only the total of reservations, so each
// producer keeps its own count. The intended use is a producer that
// promises one event per request it accepts (a queue pair promises one
// completion per work request): it calls Reserve(1) when it accepts a
// request, or Reserve(N) for N requests at once, and refuses the requests
// while Reserve returns ErrFull; it posts each event with PostReserved; on
// teardown it calls Unreserve with the number of requests that will never
// post their event.
func (q *Queue[T]) Reserve(n int) error {
	if n < 0 {
		return fmt.Errorf("%w: reserve %d slots", ErrInvalid, n)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	if n > len(q.buf)-q.n-q.reserved {
		return ErrFull
	}
	q.reserved += n
	return nil
}

// Unreserve gives back n reservations that will not be used, making their
// slots free for Post. It may be called after Close. Unreserve(0) does
// nothing. It panics if n is negative or more than Reserved(): giving back
// slots that were never reserved is a bookkeeping bug in the caller, like a
// negative sync.WaitGroup counter.
func (q *Queue[T]) Unreserve(n int) {
	q.mu.Lock()
	if n < 0 || n > q.reserved {
		r := q.reserved
		q.mu.Unlock()
		panic(fmt.Sprintf("eventq: Unreserve(%d) with %d reserved", n, r))
	}
	q.reserved -= n
	q.mu.Unlock()
}

// PostReserved appends ev using one reservation made by Reserve. If a
// reservation is held it always consumes it, whatever it returns; so a
// producer that reserved N slots may call PostReserved N times and never
// gets ErrFull. It returns ErrClosed after Close (the reservation is
// consumed and ev is not queued), and ErrInvalid, queuing nothing, if no
// reservation is held. Like Post it never blocks and does not allocate.
func (q *Queue[T]) PostReserved(ev T) error {
	q.mu.Lock()
	if q.reserved == 0 {
		q.mu.Unlock()
		return errNoReservation
	}
	q.reserved--
	// Len()+Reserved() <= Cap() held with the reservation, so there is room.
	err := q.postLocked(ev)
	q.mu.Unlock()
	return err
}

// PostReservedBatch appends the events of evs, in order, using one
// reservation each, under one lock and with one wake-up of the waiters: as
// len(evs) calls of PostReserved, without anything between them. It
// returns ErrInvalid, queuing nothing and consuming nothing, if fewer than
// len(evs) reservations are held, and ErrClosed after Close (the
// reservations are consumed and nothing is queued); an empty evs does
// nothing and returns nil. Like Post it never blocks and does not
// allocate.
func (q *Queue[T]) PostReservedBatch(evs []T) error {
	if len(evs) == 0 {
		return nil
	}
	q.mu.Lock()
	if q.reserved < len(evs) {
		q.mu.Unlock()
		return errNoReservation
	}
	q.reserved -= len(evs)
	if q.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	for i := range evs {
		q.pushLocked(evs[i])
	}
	q.postedLocked()
	q.mu.Unlock()
	return nil
}

// TryDequeue moves up to len(events) queued events, oldest first, into
// events and returns how many it moved. It never waits. On a closed queue
// it still returns the events that remain.
func (q *Queue[T]) TryDequeue(events []T) int {
	q.mu.Lock()
	k := q.takeLocked(events)
	q.mu.Unlock()
	return k
}

// Dequeue moves queued events, oldest first, into events once at least min
// are queued, and returns how many it moved: at least min and at most
// len(events).
//
// The wait ends early in two cases:
//   - timeout expires: Dequeue moves what is queued (possibly fewer than
//     min, possibly none) and returns ErrTimeout, which satisfies
//     errors.Is(err, os.ErrDeadlineExceeded);
//   - the queue is closed: Dequeue moves what is queued, up to len(events),
//     and returns a nil error, even if fewer than min; once the closed
//     queue is empty it returns 0, ErrClosed.
//
// timeout < 0 waits without limit. timeout == 0 never waits: with fewer
// than min events queued it moves those and returns ErrTimeout at once.
// min == 0 is a poll that never fails with ErrTimeout. How Dequeue waits is
// set by the queue's WaitMode. It returns ErrInvalid, moving nothing, if
// min < 0, min > len(events), or min > Cap() (the queue could never hold
// that many events).
func (q *Queue[T]) Dequeue(events []T, min int, timeout time.Duration) (int, error) {
	if timeout == 0 {
		if err := q.checkMin(events, min); err != nil {
			return 0, err
		}
		q.mu.Lock()
		k, err := q.expireLocked(events, min, false, ErrTimeout)
		q.mu.Unlock()
		return k, err
	}
	if k, ok, err := q.try(events, min); ok {
		return k, err
	}
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	return q.wait(events, min, false, deadline, timeout > 0, nil)
}

// DequeueContext is Dequeue bounded by ctx instead of a timeout. When ctx
// is done before min events are queued it moves what is queued (possibly
// fewer than min) and returns an error that wraps ctx.Err(), so
// errors.Is(err, context.Canceled) or errors.Is(err,
// context.DeadlineExceeded) holds. If min events are already queued it
// returns them even when ctx is done. A nil ctx is ErrInvalid, and so are
// the min Dequeue refuses.
func (q *Queue[T]) DequeueContext(ctx context.Context, events []T, min int) (int, error) {
	if ctx == nil {
		return 0, fmt.Errorf("%w: nil context", ErrInvalid)
	}
	if k, ok, err := q.try(events, min); ok {
		return k, err
	}
	return q.wait(events, min, false, time.Time{}, false, ctx)
}

// try is a dequeue that does not wait: it moves the queued events if there
// are min of them or the queue is closed (ok), and refuses the min Dequeue
// refuses (ok, with the error).
func (q *Queue[T]) try(events []T, min int) (k int, ok bool, err error) {
	if err := q.checkMin(events, min); err != nil {
		return 0, true, err
	}
	q.mu.Lock()
	k, ok, err = q.tryLocked(events, min, false)
	q.mu.Unlock()
	return k, ok, err
}

// Wait waits, in the queue's WaitMode, until the queue holds an event, is
// closed, or ctx is done, and dequeues nothing. It returns nil if the queue
// holds an event (even if it is closed) or an event was posted while it
// waited; ErrClosed if the queue is closed and empty; and an error wrapping
// ctx.Err() if ctx is done first. Other dequeuers may have taken the event
// by the time the caller looks, as with a completion-queue notification. A
// nil ctx is ErrInvalid.
func (q *Queue[T]) Wait(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalid)
	}
	q.mu.Lock()
	if _, ok, err := q.tryLocked(nil, 1, true); ok {
		q.mu.Unlock()
		return err
	}
	q.mu.Unlock()
	_, err := q.wait(nil, 1, true, time.Time{}, false, ctx)
	return err
}

// Close closes the queue and never blocks. Every waiter wakes: it returns
// the events still queued, if any, and otherwise ErrClosed. Events queued
// before Close stay dequeuable until drained; Post, PostBatch, PostReserved
// and Reserve fail with ErrClosed. Unreserve keeps working. Close returns
// nil the first time and ErrClosed after that.
func (q *Queue[T]) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	q.closed = true
	q.isClosed.Store(true)
	// Signal every registered waiter; each finds the queue closed when it
	// runs and registers no more. Spinning waiters watch isClosed.
	for w := q.waitHead; w != nil; {
		next := w.next
		q.claimed += w.claim
		q.removeLocked(w)
		w.ch <- struct{}{}
		w = next
	}
	return nil
}

// pushLocked appends ev. The caller has checked that there is room.
func (q *Queue[T]) pushLocked(ev T) {
	i := q.head + q.n
	if i >= len(q.buf) {
		i -= len(q.buf)
	}
	q.buf[i] = ev
	q.n++
}

// postedLocked tells spinning and blocked waiters that events were added.
func (q *Queue[T]) postedLocked() {
	if q.spinners.Load() > 0 {
		q.avail.Store(int64(q.n))
	}
	if q.nwait > 0 && q.n >= q.minWant {
		q.wakeLocked()
	}
}

// takeLocked moves up to len(events) events into events.
func (q *Queue[T]) takeLocked(events []T) int {
	k := min(len(events), q.n)
	if k == 0 {
		return 0
	}
	if k == 1 { // the common case of a poll for one completion
		var zero T
		events[0] = q.buf[q.head]
		q.buf[q.head] = zero
		if q.head++; q.head == len(q.buf) {
			q.head = 0
		}
		q.n--
		if q.spinners.Load() > 0 {
			q.avail.Store(int64(q.n))
		}
		return 1
	}
	end := q.head + k
	if end <= len(q.buf) {
		copy(events, q.buf[q.head:end])
		clear(q.buf[q.head:end])
	} else {
		c := copy(events, q.buf[q.head:])
		clear(q.buf[q.head:])
		copy(events[c:k], q.buf[:k-c])
		clear(q.buf[:k-c])
		end = k - c
	}
	if end == len(q.buf) {
		end = 0
	}
	q.head = end
	q.n -= k
	if q.spinners.Load() > 0 {
		q.avail.Store(int64(q.n))
	}
	return k
}

// tryLocked finishes a waiting operation if it can: done is true with the
// operation's result. A peek (Wait) moves nothing.
func (q *Queue[T]) tryLocked(events []T, min int, peek bool) (k int, done bool, err error) {
	if q.n == 0 && q.closed {
		return 0, true, ErrClosed
	}
	if q.n >= min || q.closed {
		if peek {
			return 0, true, nil
		}
		return q.takeLocked(events), true, nil
	}
	return 0, false, nil
}

// expireLocked ends a wait whose timeout or context expired: if the
// operation can finish normally it does; otherwise a dequeue moves what is
// queued and cause is returned.
func (q *Queue[T]) expireLocked(events []T, min int, peek bool, cause error) (int, error) {
	if k, ok, err := q.tryLocked(events, min, peek); ok {
		return k, err
	}
	if peek {
		return 0, cause
	}
	return q.takeLocked(events), cause
}
