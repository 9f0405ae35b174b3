package verbs

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exsgo/exs/eventq"
)

// WaitMode says how CQ.Wait waits while fewer completions are queued than
// it needs: the modes of the event queue a CQ is built on. The zero
// WaitMode is not a mode; in CQOptions it stands for WaitAdaptive.
type WaitMode = eventq.WaitMode

const (
	// WaitAdaptive spins for CQOptions.SpinTime, checking the queue and
	// yielding the processor (runtime.Gosched) between checks, and then
	// blocks. It is the default.
	WaitAdaptive = eventq.Adaptive
	// WaitBusyPoll never blocks: it keeps checking, yielding between
	// checks, until the completions come, ctx is done or the CQ is
	// closed. It keeps a CPU busy per waiting goroutine.
	WaitBusyPoll = eventq.BusyPoll
	// WaitNotify blocks at once.
	WaitNotify = eventq.Notify
)

// DefaultSpinTime is how long WaitAdaptive spins when CQOptions.SpinTime
// is zero.
const DefaultSpinTime = eventq.DefaultSpinTime

// CQOptions configures a completion queue. The zero value waits
// adaptively, spinning for DefaultSpinTime.
type CQOptions struct {
	// Wait is how Wait waits. Zero means WaitAdaptive.
	Wait WaitMode
	// SpinTime is how long WaitAdaptive spins before it blocks. Zero
	// means DefaultSpinTime; negative is invalid. The other modes ignore
	// it.
	SpinTime time.Duration
}

// eventq returns the options of the CQ's event queue.
func (o CQOptions) eventq() (eventq.Options, error) {
	switch o.Wait {
	case 0, WaitAdaptive, WaitBusyPoll, WaitNotify:
	default:
		return eventq.Options{}, fmt.Errorf("%w: completion queue wait mode %v", ErrInvalid, o.Wait)
	}
	if o.SpinTime < 0 {
		return eventq.Options{}, fmt.Errorf("%w: completion queue spin time %v", ErrInvalid, o.SpinTime)
	}
	return eventq.Options{Mode: o.Wait, SpinTime: o.SpinTime}, nil
}

// CQ is a completion queue: a bounded queue of work completions (WC),
// built on eventq.Queue. Queue pairs post to it; the application polls it,
// blocks on it, or asks to be notified.
//
// Capacity: every posted work request reserves a slot for its completion
// when it is posted, so a CQ never overflows; a post that finds no slot
// fails with ErrQueueFull. An unsignaled work request gives its slot back
// when it succeeds. Size a CQ for the work requests that may be
// outstanding on the queues attached to it, plus the completions not yet
// polled.
//
// A CQ is safe for concurrent use by many queue pairs and many pollers.
// The zero CQ is not usable: call Device.CreateCQ.
type CQ struct {
	dev *Device
	q   *eventq.Queue[WC]

	armed  atomic.Bool
	notify chan struct{} // capacity 1: one token or none

	mu       sync.Mutex
	attached int // queue pairs using this CQ (for each queue)
	closed   bool
}

// CreateCQ creates a completion queue holding up to depth completions
// (depth > 0). opts says how Wait waits; the zero CQOptions spins briefly,
// then blocks. A depth or an option out of range is ErrInvalid.
func (d *Device) CreateCQ(depth int, opts CQOptions) (*CQ, error) {
	cq := &CQ{dev: d, notify: make(chan struct{}, 1)}
	eo, err := opts.eventq()
	if err != nil {
		return nil, err
	}
	q, err := eventq.New[WC](depth, eo)
	if err != nil {
		return nil, fmt.Errorf("verbs: create completion queue: %w", err)
	}
	cq.q = q
	if err := d.add(func() { d.cqs[cq] = struct{}{} }); err != nil {
		return nil, err
	}
	return cq, nil
}

// Cap returns the completion queue's depth.
func (cq *CQ) Cap() int { return cq.q.Cap() }

// Len returns the number of completions waiting to be polled.
func (cq *CQ) Len() int { return cq.q.Len() }

// Poll moves up to len(wcs) completions, oldest first, into wcs and
// returns how many. It never blocks and does not allocate. Completions of
// each work queue (a queue pair's send queue, its receive queue) appear in
// the order their work requests were posted. After Close, Poll still
// returns the completions that remain.
func (cq *CQ) Poll(wcs []WC) int { return cq.q.TryDequeue(wcs) }

// Wait moves completions into wcs once at least min are queued (1 <= min
// <= len(wcs); min 0 makes Wait a Poll) and returns how many, at most
// len(wcs). It waits as configured by the CQOptions of CreateCQ,
// until ctx is done (it then returns what is queued, possibly fewer than
// min, and an error wrapping ctx.Err()) or the CQ is closed (it returns
// what is left with a nil error, then 0 and ErrClosed once drained).
func (cq *CQ) Wait(ctx context.Context, wcs []WC, min int) (int, error) {
	return cq.q.DequeueContext(ctx, wcs, min)
}

// RequestNotify arms the completion queue: the next completion added after
// this call sends one token on the channel Notify returns, and disarms it.
// Completions already queued do not fire it, so the usual sequence is: arm,
// poll until empty, then wait on the channel (as ibv_req_notify_cq). It
// never blocks.
func (cq *CQ) RequestNotify() { cq.armed.Store(true) }

// Notify returns the channel that receives a token after RequestNotify
// when a completion is added. It has capacity one, so tokens do not pile
// up; it is never closed.
func (cq *CQ) Notify() <-chan struct{} { return cq.notify }

// Close closes the completion queue. It returns ErrBusy while queue pairs
// use it (destroy them first) and ErrClosed the second time. Completions
// still queued stay pollable; blocked Wait calls return them, then
// ErrClosed.
func (cq *CQ) Close() error {
	cq.mu.Lock()
	switch {
	case cq.closed:
		cq.mu.Unlock()
		return ErrClosed
	case cq.attached > 0:
		n := cq.attached
		cq.mu.Unlock()
		return fmt.Errorf("%w: completion queue used by %d queues", ErrBusy, n)
	}
	cq.closed = true
	cq.mu.Unlock()
	cq.q.Close()
	cq.dev.mu.Lock()
	delete(cq.dev.cqs, cq)
	cq.dev.mu.Unlock()
	return nil
}

// attach records a queue using the CQ.
func (cq *CQ) attach() error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return fmt.Errorf("verbs: completion queue: %w", ErrClosed)
	}
	cq.attached++
	return nil
}

// detach undoes attach.
func (cq *CQ) detach() {
	cq.mu.Lock()
	cq.attached--
	cq.mu.Unlock()
}

// reserve reserves n completion slots.
func (cq *CQ) reserve(n int) error {
	if err := cq.q.Reserve(n); err != nil {
		if err == eventq.ErrFull {
			return fmt.Errorf("%w: completion queue has no room", ErrQueueFull)
		}
		return err
	}
	return nil
}

// free returns the slots neither holding a completion nor reserved.
func (cq *CQ) free() int {
	return cq.q.Cap() - cq.q.Len() - cq.q.Reserved()
}

// unreserve gives back n reserved slots.
func (cq *CQ) unreserve(n int) {
	if n > 0 {
		cq.q.Unreserve(n)
	}
}

// push posts wc into a reserved slot and fires an armed notification. A
// queue stays attached while it holds reservations, so the CQ is not
// closed and PostReserved cannot fail.
func (cq *CQ) push(wc WC) {
	cq.q.PostReserved(wc)
	if cq.armed.Load() && cq.armed.CompareAndSwap(true, false) {
		select {
		case cq.notify <- struct{}{}:
		default:
		}
	}
}
