package verbs

import (
	"errors"
	"syscall"

	"github.com/exsgo/exs/eventq"
	"github.com/exsgo/exs/internal/errno"
)

// Errors returned by this package. Compare with errors.Is: functions that
// add context wrap these sentinels with %w.
var (
	// ErrClosed reports an operation on a closed object: a post on a
	// destroyed queue pair, an Accept on a closed listener, a second Close.
	// It is the same sentinel as eventq.ErrClosed, so one errors.Is check
	// covers every "it is closed" error of the lower layers.
	ErrClosed = eventq.ErrClosed

	// ErrInvalid reports a bad argument: an unknown opcode, too many
	// scatter/gather elements, a nil completion queue, private data longer
	// than MaxPrivateData, a malformed address. It is the invalid-argument
	// error every layer of exs shares, and it matches syscall.EINVAL.
	ErrInvalid error = errno.Invalid

	// ErrQueueFull reports a post that would exceed a queue's depth: the
	// send or receive queue holds as many outstanding work requests as its
	// depth, or the completion queue has no room left for the completion
	// the work request will produce. Nothing was posted; retry after
	// polling completions. It also satisfies errors.Is(err, syscall.EAGAIN).
	ErrQueueFull error = queueFullError{}

	// ErrQPState reports an operation the queue pair's state does not
	// allow: a send before the queue pair is connected (state
	// ReadyToSend), a receive in state Reset, a Connect on a queue pair
	// that is not in Init, an illegal Modify.
	ErrQPState = errors.New("operation not allowed in queue pair state")

	// ErrBusy reports a Close of an object still in use: a protection
	// domain with queue pairs or memory regions, a completion queue with
	// queue pairs attached. Deregistering a memory region that posted work
	// still uses returns mreg.ErrBusy. It is the busy error every layer of
	// exs shares, and it matches syscall.EBUSY.
	ErrBusy error = errno.Busy

	// ErrRejected reports a connection request rejected by the passive
	// side. Connect returns it as a *RejectError, which carries the
	// rejecter's private data; it also satisfies errors.Is(err,
	// syscall.ECONNREFUSED).
	ErrRejected = errors.New("connection rejected")

	// ErrDisconnected is the cause a queue pair records when it is
	// disconnected, locally (Disconnect, Close) or by its peer. It also
	// satisfies errors.Is(err, syscall.ECONNRESET).
	ErrDisconnected error = errno.New("disconnected", syscall.ECONNRESET)

	// ErrTerminated is the cause a queue pair records when its connection
	// was terminated because of an error (a protection violation, a
	// receive that was too short, receiver-not-ready with RNRFail, a
	// transport failure), on either end. It also satisfies errors.Is(err,
	// syscall.ECONNABORTED).
	ErrTerminated error = errno.New("connection terminated", syscall.ECONNABORTED)
)

// Errors that an Endpoint's Deliver returns to a provider, and that a
// provider passes back to the initiator's Endpoint (Complete), so that the
// initiator's work request completes with the matching Status. Besides
// these, Deliver returns mreg.ErrInvalidKey, mreg.ErrBounds and
// mreg.ErrAccess for a one-sided operation that fails the target's check
// (StatusRemoteAccessError), and ErrClosed when the target queue pair is
// not connected (StatusFlushed).
var (
	// ErrNoRecv reports a SEND or RDMA WRITE with immediate data that
	// found no posted RECV at the target: receiver not ready. The target
	// stays connected; see RNRPolicy for what the initiator does.
	ErrNoRecv = errors.New("receiver not ready: no receive posted")

	// ErrTooLong reports a SEND larger than the RECV it consumed. The
	// target completes that RECV with StatusLocalLengthError; the initiator
	// completes the SEND with StatusRemoteInvalidRequest.
	ErrTooLong = errors.New("message longer than the receive buffer")

	// ErrRemoteOperation reports a fault at the target that is not the
	// initiator's doing: the scatter list of the RECV a SEND consumed
	// names memory the target may not write (its RECV completes with
	// StatusLocalProtectionError). The initiator completes with
	// StatusRemoteOperationError.
	ErrRemoteOperation = errors.New("remote operation error")
)

// queueFullError is the type of ErrQueueFull.
type queueFullError struct{}

func (queueFullError) Error() string { return "queue full" }

// Is makes errors.Is(ErrQueueFull, syscall.EAGAIN) hold.
func (queueFullError) Is(target error) bool { return target == syscall.EAGAIN }

// Temporary reports true: the post may succeed later.
func (queueFullError) Temporary() bool { return true }

// RejectError is the error Connect returns when the passive side rejects
// the connection request. It satisfies errors.Is(err, ErrRejected) and
// errors.Is(err, syscall.ECONNREFUSED).
type RejectError struct {
	// PrivateData is the private data the rejecter sent (possibly empty).
	PrivateData []byte
}

// Error describes the rejection.
func (e *RejectError) Error() string { return "connection rejected by peer" }

// Is makes errors.Is hold for ErrRejected and syscall.ECONNREFUSED.
func (e *RejectError) Is(target error) bool {
	return target == ErrRejected || target == syscall.ECONNREFUSED
}
