package exs

import (
	"sync"
	"sync/atomic"
)

// A queue's signal (EXS_QATTR_SIGNAL's purpose): a notification that events
// are queued, usable outside Dequeue, so that a program can wait on several
// queues, or on a queue and other I/O, at once.
//
// The signal is raised when an event is queued while it is lowered, and
// lowered by the Dequeue (or TryDequeue, DequeueContext) that leaves the
// queue empty; that dequeue raises it again at once if an event arrived
// meanwhile. So, while events are queued, the signal is raised: the
// channel of Queue.Signal holds a value and the file descriptor of
// Queue.SignalFD is readable. A wake-up may be spurious (an event taken by
// another dequeuer first); a dequeue that finds nothing lowers the signal
// again.
type qsignal struct {
	raised atomic.Bool
	ch     chan struct{}

	mu     sync.Mutex
	fd     int // eventfd, -1 if none was asked for
	closed bool
}

// signal returns q's signal, creating it on first use.
func (q *Queue) signal() *qsignal {
	if s := q.sig.Load(); s != nil {
		return s
	}
	s := &qsignal{ch: make(chan struct{}, 1), fd: -1}
	if !q.sig.CompareAndSwap(nil, s) {
		return q.sig.Load()
	}
	// Events queued before the signal existed raise it now; so does a
	// queue already deleted, so that its waiter looks and sees ErrClosed.
	if q.Len() > 0 || q.state.Load()&queueDeleted != 0 {
		s.raise()
	}
	return s
}

// Signal returns a channel that holds a value while events are queued (see
// SignalFD for the exact rule): a program waits on it in a select beside
// other channels, then dequeues with TryDequeue until the queue is empty.
// A receive takes the value; a dequeue that leaves events queued puts it
// back. After Qdelete the channel holds a value, so that a waiter looks
// and Dequeue reports ErrClosed once the events left are taken. Signal
// starts no goroutine; it costs posters one atomic operation per event,
// and a channel send when the queue turns non-empty.
func (q *Queue) Signal() <-chan struct{} { return q.signal().ch }

// raise raises the signal if it is lowered.
func (s *qsignal) raise() {
	if s.raised.Load() || s.raised.Swap(true) {
		return
	}
	select {
	case s.ch <- struct{}{}:
	default:
	}
	s.mu.Lock()
	if s.fd >= 0 {
		fdRaise(s.fd)
	}
	s.mu.Unlock()
}

// afterDequeue keeps the signal raised while events are queued and lowers
// it when the queue is empty.
func (q *Queue) afterDequeue() {
	s := q.sig.Load()
	if s == nil || !s.raised.Load() {
		return
	}
	if q.Len() > 0 || q.state.Load()&queueDeleted != 0 {
		select {
		case s.ch <- struct{}{}:
		default:
		}
		return
	}
	s.mu.Lock()
	if s.fd >= 0 {
		fdLower(s.fd)
	}
	select {
	case <-s.ch:
	default:
	}
	// Lower, then look again: an event queued before the store saw the
	// signal raised and did not raise it.
	s.raised.Store(false)
	s.mu.Unlock()
	if q.Len() > 0 {
		s.raise()
	}
}

// closeSignal releases the signal's file descriptor when q is deleted, and
// wakes a waiter on the channel.
func (q *Queue) closeSignal() {
	s := q.sig.Load()
	if s == nil {
		return
	}
	s.mu.Lock()
	s.closed = true
	if s.fd >= 0 {
		fdClose(s.fd)
		s.fd = -1
	}
	s.mu.Unlock()
	s.raised.Store(true)
	select {
	case s.ch <- struct{}{}:
	default:
	}
}
