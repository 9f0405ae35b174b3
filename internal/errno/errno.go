// Package errno is the error type the layers of exs share: an error that
// stands for an errno (and possibly for other sentinels), so that an
// event's error keeps the errno it stands for through every layer, and the
// sentinels every layer returns (invalid argument, closed, busy) are one
// value each, tested with errors.Is at any layer.
//
// Messages carry no package prefix: a sentinel says what went wrong
// ("invalid argument"), a layer that adds context wraps it once, and exs
// names itself once at its API boundary (exs.OpError).
package errno

import (
	"net"
	"syscall"
)

// Error is an error that stands for an errno and possibly other sentinels:
// errors.Is holds for each of them. It is immutable; compare values with
// errors.Is, never by message.
type Error struct {
	msg     string
	errno   syscall.Errno
	is      []error
	timeout bool
}

// New returns an error with message msg that matches errno (unless it is
// 0) and each of is.
func New(msg string, errno syscall.Errno, is ...error) *Error {
	return &Error{msg: msg, errno: errno, is: is}
}

// NewTimeout is New for an error that is a timeout (its Timeout method
// reports true, as net.Error's does).
func NewTimeout(msg string, errno syscall.Errno, is ...error) *Error {
	e := New(msg, errno, is...)
	e.timeout = true
	return e
}

// Error returns the message.
func (e *Error) Error() string { return e.msg }

// Is reports whether target is the errno or one of the sentinels e stands
// for.
func (e *Error) Is(target error) bool {
	if e.errno != 0 && target == e.errno {
		return true
	}
	for _, t := range e.is {
		if t == target {
			return true
		}
	}
	return false
}

// Timeout reports whether the error is a timeout.
func (e *Error) Timeout() bool { return e.timeout }

// Errno returns the errno the error stands for (0 if none).
func (e *Error) Errno() syscall.Errno { return e.errno }

// The sentinels every layer shares.
var (
	// Invalid reports a bad argument. It matches syscall.EINVAL.
	Invalid = New("invalid argument", syscall.EINVAL)
	// Closed reports an operation on something closed. It matches
	// net.ErrClosed, so that code written for net.Conn recognises it.
	Closed = New("closed", 0, net.ErrClosed)
	// Busy reports a resource still in use. It matches syscall.EBUSY.
	Busy = New("resource busy", syscall.EBUSY)
)
