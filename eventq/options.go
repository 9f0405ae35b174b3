package eventq

import (
	"strconv"
	"time"
)

// WaitMode says how a Dequeue, DequeueContext or Wait that must wait does
// so. The zero value is not a mode; in Options it stands for Adaptive.
type WaitMode uint8

const (
	// Adaptive spins for Options.SpinTime, re-checking the queue and
	// yielding the processor with runtime.Gosched between checks, and then
	// blocks. It is the default. While more threads are runnable than the
	// CPUs can run (CPUs shared with other work; the process's own running
	// goroutines beyond one do not count), the spin is cut to 5 us, as
	// every spin of the module is.
	Adaptive WaitMode = iota + 1
	// BusyPoll re-checks the queue, yielding with runtime.Gosched between
	// checks, until events arrive, the timeout or context expires, or the
	// queue is closed. It keeps one CPU busy per waiter. It blocks only
	// while input of a socket the module reads through the Go runtime's
	// network poller waits for the runtime to poll (the TCP provider's),
	// which a spinning processor keeps it from doing.
	BusyPoll
	// Notify blocks at once until woken by a Post, Close, the timeout or
	// the context.
	Notify
)

// String returns the mode's name, or "WaitMode(n)" for an unknown value.
func (m WaitMode) String() string {
	switch m {
	case Adaptive:
		return "Adaptive"
	case BusyPoll:
		return "BusyPoll"
	case Notify:
		return "Notify"
	}
	return "WaitMode(" + strconv.Itoa(int(m)) + ")"
}

// DefaultSpinTime is how long Adaptive spins when Options.SpinTime is zero.
// Waking a blocked goroutine on another CPU costs about 30 microseconds on
// a small virtual machine, so a spin a little longer than that catches the
// events of a busy queue without paying for the wake-up.
const DefaultSpinTime = 50 * time.Microsecond

// Options configures a Queue. The zero value gives an Adaptive queue that
// spins for DefaultSpinTime.
type Options struct {
	// Mode is how waiting operations wait. Zero means Adaptive.
	Mode WaitMode
	// SpinTime is how long Adaptive spins before blocking. Zero means
	// DefaultSpinTime; negative is invalid. Other modes ignore it.
	SpinTime time.Duration
}
