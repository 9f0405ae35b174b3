package exs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/exsgo/exs/eventq"
)

// EventType says which operation an Event completes. The zero EventType
// is not a type.
type EventType uint8

const (
	// EventAccept completes Socket.Accept; Event.Accepted is the new
	// connected socket.
	EventAccept EventType = iota + 1
	// EventConnect completes Socket.Connect.
	EventConnect
	// EventSend completes Socket.Send; Event.N is the number of bytes
	// sent (the whole buffer on success).
	EventSend
	// EventRecv completes Socket.Recv; Event.N is the number of bytes
	// received, 0 at the end of the stream.
	EventRecv
	// EventShutdown completes Socket.Shutdown.
	EventShutdown
	// EventClose completes Socket.Close. It is the last event the socket
	// posts.
	EventClose
	// EventCancel completes Socket.Cancel and Socket.CancelOp; Event.N is
	// the number of operations canceled, and a CancelOp whose operation
	// completed first fails with ErrNotFound.
	EventCancel
	// EventPoll completes Socket.Poll; Event.Revents tells which of the
	// conditions polled for hold.
	EventPoll
	// EventSendTimeout reports a send outstanding for longer than its
	// socket's send timeout (WithOpTimeout); the send stays posted.
	EventSendTimeout
	// EventRecvTimeout reports a recv outstanding for longer than its
	// socket's recv timeout (WithOpTimeout); the recv stays posted.
	EventRecvTimeout
	// EventSendMsg completes Socket.SendMsg; Event.N is the number of
	// bytes sent (those of every buffer on success).
	EventSendMsg
	// EventRecvMsg completes Socket.RecvMsg; Event.N is the number of
	// bytes received into the buffers, in order, 0 at the end of the
	// stream.
	EventRecvMsg
)

var eventNames = [...]string{"", "accept", "connect", "send", "recv", "shutdown", "close", "cancel", "poll", "send timeout", "recv timeout", "sendmsg", "recvmsg"}

// String returns the name of the operation, such as "send".
func (t EventType) String() string {
	if t > 0 && int(t) < len(eventNames) {
		return eventNames[t]
	}
	return "EventType(" + strconv.Itoa(int(t)) + ")"
}

// Event is the completion of one asynchronous operation. Every operation
// that a call accepted (returned nil) posts exactly one Event, to the queue
// named in the call. It is a plain value.
type Event struct {
	// Type is the operation.
	Type EventType
	// Socket is the socket the operation was posted on.
	Socket *Socket
	// User is the value passed with the operation.
	User any
	// N is the byte count of a send or recv, the number of operations
	// canceled by a cancel, the PollEvents that hold for a poll (see
	// Revents), and 0 otherwise.
	N int
	// Err is nil on success, otherwise an *OpError whose cause keeps its
	// errno: ECONNRESET, ECONNABORTED, ECANCELED, EPIPE, EMSGSIZE,
	// ECONNREFUSED, ETIMEDOUT (test with errors.Is).
	Err error
	// Accepted is the new socket of a successful accept.
	Accepted *Socket
	// EOF marks a recv that met the end of the peer's stream: N is 0, Err
	// is nil, and no byte or message follows (every later recv completes
	// so too). It tells the end of a seqpacket stream from an empty
	// message, which also completes with N 0.
	EOF bool
}

// Queue is an event queue: operations post their events to it, the
// application dequeues them. Create one with Stack.Qcreate.
//
// Each operation reserves room for its event when it is posted, so an
// event is never dropped: a post that finds the queue full (counting the
// events of operations still outstanding) fails with an error matching
// ErrWouldBlock.
//
// A Queue is safe for concurrent use by many posters and dequeuers. The
// zero Queue is not usable.
type Queue struct {
	st *Stack
	eq *eventq.Queue[Event]

	// state counts the operations posted that will post an event here:
	// bits 0..30 those whose event is still to come (pending), bits
	// 31..61 those posting it right now (posting), and bit 62 is set once
	// the queue is deleted. An operation moves from pending to posting
	// before its event can be dequeued, so that an application that has
	// dequeued every event finds the queue idle; the last posting
	// operation closes a deleted queue.
	state atomic.Int64

	// sig is the queue's signal, nil until Signal or SignalFD is called.
	sig atomic.Pointer[qsignal]

	// Errors returned without allocating.
	errTimeout, errClosed error
}

const (
	queuePendingMask       = 1<<31 - 1
	queuePosting           = 1 << 31
	queueDeleted     int64 = 1 << 62
)

// Qcreate creates an event queue that holds up to depth events (depth >=
// 1). Options WithWaitMode and WithSpinTime set how Dequeue waits (the
// stack's setting by default).
func (st *Stack) Qcreate(depth int, opts ...QueueOption) (*Queue, error) {
	cfg := st.cfg
	if err := cfg.applyQueueOptions(opts); err != nil {
		return nil, opErr("qcreate", "", err)
	}
	if depth <= 0 {
		return nil, opErr("qcreate", "", fmt.Errorf("%w: queue depth %d", ErrInvalid, depth))
	}
	eq, err := eventq.New[Event](depth, eventq.Options{Mode: cfg.wait.eventq(), SpinTime: cfg.spin})
	if err != nil {
		return nil, opErr("qcreate", "", err) // eventq.ErrInvalid is ErrInvalid
	}
	q := &Queue{
		st:         st,
		eq:         eq,
		errTimeout: &OpError{Op: "dequeue", Err: ErrTimeout},
		errClosed:  &OpError{Op: "dequeue", Err: ErrClosed},
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return nil, opErr("qcreate", "", ErrClosed)
	}
	st.queues[q] = struct{}{}
	return q, nil
}

// Qdelete deletes q. It refuses with an error matching ErrBusy while
// operations posted with q as their queue are outstanding (their events
// are still to come): cancel or complete them first, so that no event is
// ever dropped. An operation stops counting once its event can be
// dequeued: after dequeuing the events of every operation posted with q,
// Qdelete succeeds. Events already queued stay dequeuable; once they are
// drained, Dequeue returns ErrClosed, as do waiters blocked on the empty
// queue, which Qdelete wakes. (When the goroutine that posted the last
// event has not yet returned from posting it, the queue closes, and wakes
// its waiters, as that goroutine returns: a Dequeue that does not wait
// can report a timeout for that moment.) Operations posted with q
// afterwards fail with ErrClosed. A second Qdelete returns ErrClosed.
func (st *Stack) Qdelete(q *Queue) error {
	switch {
	case q == nil:
		return opErr("qdelete", "", fmt.Errorf("%w: nil queue", ErrInvalid))
	case q.st != st:
		return opErr("qdelete", "", fmt.Errorf("%w: queue of another stack", ErrInvalid))
	}
	if err := q.delete(false); err != nil {
		return opErr("qdelete", "", err)
	}
	st.mu.Lock()
	delete(st.queues, q)
	st.mu.Unlock()
	return nil
}

// delete marks q deleted and closes it; unless force, only when no
// operation has an event still to come. An event being posted at that
// moment is queued before the queue closes: the operation posting it
// closes the queue when it is done.
func (q *Queue) delete(force bool) error {
	var v int64
	for {
		v = q.state.Load()
		switch {
		case v&queueDeleted != 0:
			return ErrClosed
		case v&queuePendingMask != 0 && !force:
			return fmt.Errorf("%w: %d operations will still post to the queue", ErrBusy, v&queuePendingMask)
		}
		if q.state.CompareAndSwap(v, v|queueDeleted) {
			break
		}
	}
	if force || v == 0 {
		q.eq.Close()
	}
	q.closeSignal()
	return nil
}

// settle adds delta to the state and closes the queue if that left it
// deleted with nothing to post.
func (q *Queue) settle(delta int64) {
	if q.state.Add(delta) == queueDeleted {
		q.eq.Close()
	}
}

// reserve takes room for one operation's event.
func (q *Queue) reserve() error {
	// Add first and back out if deleted: Qdelete deletes only while no
	// event is pending, so it either saw this operation or came first.
	if q.state.Add(1)&queueDeleted != 0 {
		q.settle(-1)
		return ErrClosed
	}
	if err := q.eq.Reserve(1); err != nil {
		q.settle(-1)
		if errors.Is(err, eventq.ErrFull) {
			return errQueueFull
		}
		return err
	}
	return nil
}

// unreserve gives back room taken by reserve for an operation that was not
// posted after all.
func (q *Queue) unreserve() {
	q.eq.Unreserve(1)
	q.settle(-1)
}

// post posts the event of an operation that reserved room. The operation
// stops being pending before its event can be dequeued.
func (q *Queue) post(ev Event) {
	q.state.Add(queuePosting - 1)
	q.eq.PostReserved(ev)
	if s := q.sig.Load(); s != nil {
		s.raise()
	}
	if h := testHookPosted.Load(); h != nil {
		(*h)(q)
	}
	q.settle(-queuePosting)
}

// postBatch posts the events of operations that reserved room, as post
// does for each, in one batch.
func (q *Queue) postBatch(evs []Event) {
	n := int64(len(evs))
	q.state.Add(n * (queuePosting - 1))
	q.eq.PostReservedBatch(evs)
	if s := q.sig.Load(); s != nil {
		s.raise()
	}
	if h := testHookPosted.Load(); h != nil {
		(*h)(q)
	}
	q.settle(-n * queuePosting)
}

// testHookPosted, if set, runs after an event is queued and before its
// operation stops posting (tests of Qdelete racing a post).
var testHookPosted atomic.Pointer[func(*Queue)]

// Cap returns the queue's depth (EXS_QATTR_DEPTH).
func (q *Queue) Cap() int { return q.eq.Cap() }

// Len returns the number of events queued (EXS_QATTR_EVENTS): events
// that Dequeue can take now.
func (q *Queue) Len() int { return q.eq.Len() }

// Outstanding returns the number of operations posted with q whose events
// are still to come: Qdelete refuses while it is not 0. An event that can
// be dequeued is no longer counted.
func (q *Queue) Outstanding() int { return int(q.state.Load() & queuePendingMask) }

// TryDequeue moves up to len(events) queued events, oldest first, into
// events and returns how many. It never waits.
func (q *Queue) TryDequeue(events []Event) int {
	n := q.eq.TryDequeue(events)
	q.afterDequeue()
	return n
}

// Dequeue moves queued events, oldest first, into events once at least min
// are queued (0 <= min <= len(events)) and returns how many, at most
// len(events). It waits as the queue's WaitMode says, up to timeout
// (negative: no limit; zero: no wait). When timeout expires first it
// returns the events queued, possibly fewer than min, and an error matching
// ErrTimeout. On a deleted queue it returns the events left, then 0 and an
// error matching ErrClosed. Dequeue does not allocate.
func (q *Queue) Dequeue(events []Event, min int, timeout time.Duration) (int, error) {
	n, err := q.eq.Dequeue(events, min, timeout)
	q.afterDequeue()
	return n, q.err(err)
}

// DequeueContext is Dequeue bounded by ctx instead of a timeout: when ctx
// is done first it returns the events queued and an error wrapping
// ctx.Err().
func (q *Queue) DequeueContext(ctx context.Context, events []Event, min int) (int, error) {
	n, err := q.eq.DequeueContext(ctx, events, min)
	q.afterDequeue()
	return n, q.err(err)
}

func (q *Queue) err(err error) error {
	switch {
	case err == nil:
		return nil
	case err == eventq.ErrTimeout:
		return q.errTimeout
	case err == eventq.ErrClosed:
		return q.errClosed
	}
	return &OpError{Op: "dequeue", Err: err}
}
