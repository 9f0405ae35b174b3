//go:build !linux

package measure

import (
	"errors"
	"net"
	"syscall"
)

// SystemCongestion returns the host's default TCP congestion control:
// "unknown" on this platform.
func SystemCongestion() string { return "unknown" }

func congestionControl(name string) func(network, address string, c syscall.RawConn) error {
	if name == "" {
		return nil
	}
	return func(string, string, syscall.RawConn) error {
		return errors.New("setting the congestion control needs Linux (use --cc '')")
	}
}

func connCongestion(*net.TCPConn) string { return "unknown" }

var errStopped = errors.New("stopped")

func spinIO(*net.TCPConn, func() bool, func(read, write func([]byte) (int, error)) error) error {
	return errors.New("busy polling a socket needs Linux")
}

// BusyPollSupported says whether spinIO works here.
const BusyPollSupported = false
