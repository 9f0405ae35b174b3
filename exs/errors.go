package exs

import (
	"errors"
	"os"
	"strings"
	"syscall"

	"github.com/exsgo/exs/eventq"
	"github.com/exsgo/exs/internal/errno"
)

// Errors returned by this package, directly or inside an *OpError or an
// Event. Compare with errors.Is: every error this package returns wraps one
// of these sentinels (or a syscall.Errno) and keeps the errno it stands for,
// so that errors.Is(err, syscall.EAGAIN) and errors.Is(err, ErrWouldBlock)
// both hold for a would-block error.
var (
	// ErrClosed reports an operation on a closed socket, a deleted queue
	// or a closed stack, a second Close, and an operation canceled because
	// its socket was closed. It is the same value as eventq.ErrClosed, so
	// every "it is closed" error of the lower layers matches it too.
	ErrClosed = eventq.ErrClosed

	// ErrWouldBlock reports a post that cannot be accepted now: the
	// socket's limit of outstanding operations is reached, or the target
	// queue has no room for the operation's event. Nothing was posted;
	// dequeue events and retry. It matches syscall.EAGAIN.
	ErrWouldBlock error = errno.New("operation would block", syscall.EAGAIN)

	// ErrBusy reports a resource still in use: a memory handle with
	// operations posted (the error also wraps mreg.ErrBusy), a queue that
	// operations will still post events to. It matches syscall.EBUSY.
	ErrBusy = errno.Busy

	// ErrInvalid reports a bad argument: a nil or empty buffer where data
	// is needed, a buffer outside its memory handle, a deregistered
	// handle, a queue of another stack, a bad option, a malformed
	// address. It matches syscall.EINVAL.
	ErrInvalid = errno.Invalid

	// ErrNotConnected reports a send, recv or shutdown on a socket that is
	// neither connected nor connecting. It matches syscall.ENOTCONN.
	ErrNotConnected error = errno.New("socket is not connected", syscall.ENOTCONN)

	// ErrAccess reports a memory handle that lacks the access an
	// operation needs: AccessRead to send from, AccessWrite to receive
	// into. It matches syscall.EACCES.
	ErrAccess error = errno.New("memory handle does not grant the access", syscall.EACCES)

	// ErrMismatch reports a connection refused because the two ends'
	// protocol parameters differ (version, protocol mode or socket type).
	// It matches syscall.ECONNREFUSED.
	ErrMismatch error = errno.New("connection parameters do not match the peer's", syscall.ECONNREFUSED)

	// ErrCanceled reports an operation canceled by Cancel or Close. It
	// matches syscall.ECANCELED. Operations canceled by Close complete with
	// an error that matches ErrClosed as well.
	ErrCanceled error = errno.New("operation canceled", syscall.ECANCELED)

	// ErrTimedOut reports a connect that did not complete within its time
	// limit (WithConnectTimeout, or the deadline of ConnectContext's
	// context), as rdma_cm's and TCP's connect do, and an operation ended
	// by its timeout under WithTimeoutMode(TimeoutEnd). It matches
	// syscall.ETIMEDOUT and os.ErrDeadlineExceeded, and its OpError's
	// Timeout reports true.
	ErrTimedOut error = errno.NewTimeout("connection timed out", syscall.ETIMEDOUT, os.ErrDeadlineExceeded)

	// ErrPeerTimedOut reports a connection whose peer stopped answering:
	// the tcp provider's peer timeout found it silent (its host lost power
	// or its network; see "Ending a connection" in the package
	// documentation). It matches syscall.ETIMEDOUT, as a TCP connection's
	// error does after its user timeout, and its OpError's Timeout reports
	// true. Unlike ErrTimedOut it does not match os.ErrDeadlineExceeded,
	// which stands for a time limit of the caller's own: net.Conn's
	// callers (exsnet) take that error as a deadline they may extend and
	// read on, while this connection is over.
	ErrPeerTimedOut error = errno.NewTimeout("peer stopped answering", syscall.ETIMEDOUT)

	// ErrConnReset reports an operation that failed because the peer
	// closed or canceled the connection before it had ended in order. It
	// matches syscall.ECONNRESET.
	ErrConnReset error = errno.New("connection reset by peer", syscall.ECONNRESET)

	// ErrConnAborted reports an operation that failed because the
	// connection broke: a protocol violation by the peer (the error then
	// also matches syscall.EPROTO), a transport error. It matches
	// syscall.ECONNABORTED.
	ErrConnAborted error = errno.New("connection aborted", syscall.ECONNABORTED)

	// ErrNotFound reports a CancelOp whose operation is not outstanding:
	// never posted, or already complete. It matches syscall.ENOENT.
	ErrNotFound error = errno.New("no such operation outstanding", syscall.ENOENT)

	// ErrTimeout reports a Dequeue whose timeout expired before the
	// minimum number of events arrived. It is eventq.ErrTimeout and
	// matches os.ErrDeadlineExceeded.
	ErrTimeout = eventq.ErrTimeout
)

// Errors with more than one meaning.
var (
	errQueueFull = errno.New("event queue full", syscall.EAGAIN, ErrWouldBlock)
	errTooMany   = errno.New("too many operations outstanding", syscall.EAGAIN, ErrWouldBlock)
	// errClosedCanceled completes the operations that Close cancels.
	errClosedCanceled = errno.New("operation canceled: socket closed", syscall.ECANCELED, ErrCanceled, ErrClosed)
	errIsConn         = errno.New("socket is already connected or connecting", syscall.EISCONN, ErrInvalid)
	errNotListening   = errno.New("socket is not listening", syscall.EINVAL, ErrInvalid)
	errShutdown       = errno.New("socket shut down for sending", syscall.EPIPE)
)

// OpError is the error of an operation, returned by a call that failed or
// carried by the Event of an operation that completed with an error. Like
// net.OpError it says which operation on which address failed; Err is the
// cause, which errors.Is and errors.As see through Unwrap.
type OpError struct {
	// Op is the operation: "send", "recv", "accept", "connect",
	// "shutdown", "close", "cancel", "bind", "listen", "mregister",
	// "mderegister", "qcreate", "qdelete", "dequeue", "socket",
	// "newstack", "alloc", "free".
	Op string
	// Addr is the socket's address (the listening address, or the
	// address it connected to or was accepted on), if it has one.
	Addr string
	// Err is the cause.
	Err error
}

// Error returns "exs: OP ADDR: cause".
func (e *OpError) Error() string {
	var b strings.Builder
	b.WriteString("exs: ")
	b.WriteString(e.Op)
	if e.Addr != "" {
		b.WriteByte(' ')
		b.WriteString(e.Addr)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }

// Timeout reports whether the error is a timeout: a Dequeue that timed
// out, or an error matching ErrTimedOut (a connect past its time limit, an
// operation ended by its timeout) or ErrPeerTimedOut (a peer that stopped
// answering).
func (e *OpError) Timeout() bool {
	var t interface{ Timeout() bool }
	return errors.As(e.Err, &t) && t.Timeout()
}

// opErr wraps err for the boundary, unless it is nil.
func opErr(op, addr string, err error) error {
	if err == nil {
		return nil
	}
	return &OpError{Op: op, Addr: addr, Err: err}
}
