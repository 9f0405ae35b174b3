package eventq

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/exsgo/exs/internal/errno"
)

// Errors returned by this package. Compare with errors.Is: functions that
// add context wrap these sentinels with %w.
var (
	// ErrClosed reports an operation on a closed queue: Post, PostBatch,
	// PostReserved, Reserve and a second Close, and a dequeue or Wait on a
	// queue that is closed and empty. Waiters blocked when Close is called
	// return it once the queue is drained. It is the closed error every
	// layer of exs shares, and it matches net.ErrClosed.
	ErrClosed error = errno.Closed

	// ErrFull reports a Post or PostBatch that found no free unreserved
	// slot, or a Reserve asking for more slots than are free. Nothing was
	// dropped: the events that did not fit were not queued.
	ErrFull = errors.New("event queue full")

	// ErrTimeout reports that Dequeue's timeout expired before the minimum
	// number of events was queued. It also satisfies
	// errors.Is(err, os.ErrDeadlineExceeded), and its Timeout method
	// reports true, as for a net.Conn deadline.
	ErrTimeout error = timeoutError{}

	// ErrInvalid reports a bad argument: a depth <= 0, an unknown wait
	// mode, a negative spin time, a negative min or one larger than the
	// events slice, a negative reservation, a nil context, or PostReserved
	// without a reservation. It is the invalid-argument error every layer
	// of exs shares, and it matches syscall.EINVAL.
	ErrInvalid error = errno.Invalid
)

// errNoReservation is returned by PostReserved when no reservation is held.
var errNoReservation = fmt.Errorf("%w: PostReserved without a reservation", ErrInvalid)

// timeoutError is the type of ErrTimeout.
type timeoutError struct{}

func (timeoutError) Error() string { return "event queue wait timed out" }

// Timeout reports true: the error is a timeout (net.Error convention).
func (timeoutError) Timeout() bool { return true }

// Is makes errors.Is(ErrTimeout, os.ErrDeadlineExceeded) hold.
func (timeoutError) Is(target error) bool { return target == os.ErrDeadlineExceeded }

// ctxError wraps the error of a done context so that errors.Is against
// context.Canceled or context.DeadlineExceeded holds.
func ctxError(ctx context.Context) error {
	return fmt.Errorf("event queue wait: %w", ctx.Err())
}
