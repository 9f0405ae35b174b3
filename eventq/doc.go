// Package eventq provides Queue, a bounded FIFO of events shared by many
// posters and many dequeuers.
//
// It backs two things: the completion queues of the software verbs layer,
// where every completed work request posts one event, and the event queues
// that the ES-API hands to applications.
//
// # Posting
//
// Posting never blocks and never drops an event silently: Post on a full
// queue returns ErrFull. A producer that must never see ErrFull (a queue
// pair whose work requests each complete once) reserves a slot for each
// event it promises, with Reserve(N) for N requests up front or Reserve(1)
// as it accepts each one, posts each event with PostReserved, and gives
// back the reservations it will not use with Unreserve. Each reservation is
// used once. See Queue.Reserve for the exact accounting.
//
// # Dequeuing and waiting
//
// TryDequeue never waits. Dequeue waits until a minimum number of events is
// queued, a timeout expires or the queue is closed; DequeueContext is the
// same bounded by a context; Wait waits for the queue to become non-empty
// without dequeuing. How they wait is set by Options.Mode:
//
//   - Adaptive (the default) re-checks the queue for Options.SpinTime,
//     yielding the processor between checks, and then blocks. Waking a
//     blocked goroutine on another CPU costs tens of microseconds, so a
//     short spin keeps the latency of a busy queue low.
//   - BusyPoll never blocks: it re-checks, yielding between checks, until
//     events arrive, the deadline passes or the queue is closed.
//   - Notify blocks at once.
//
// Blocked waiters are woken without a channel operation on Post when no one
// is blocked. A Post wakes, in arrival order, the blocked waiters whose
// minimum is met by events that no other woken waiter is counting on; a
// woken waiter that finds its events taken goes back to sleep, and every
// waiter that leaves passes any surplus on, so no wake-up is lost.
//
// # Closing
//
// Close wakes every waiter and makes Post fail with ErrClosed. Events
// queued before Close stay dequeuable until drained; once the queue is
// closed and empty, the dequeue operations return ErrClosed.
package eventq
