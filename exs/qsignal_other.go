//go:build !linux

package exs

import "fmt"

// SignalFD returns a file descriptor readable while events are queued. It
// needs eventfd: on this system it fails with ErrInvalid; use Signal.
func (q *Queue) SignalFD() (int, error) {
	return -1, opErr("signalfd", "", fmt.Errorf("%w: no eventfd on this system", ErrInvalid))
}

func fdRaise(int) {}
func fdLower(int) {}
func fdClose(int) {}
