package measure

import (
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SystemCongestion returns the host's default TCP congestion control, or
// "unknown".
func SystemCongestion() string {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// congestionControl returns a socket control function that sets the
// congestion control algorithm name (TCP_CONGESTION) on a socket before it
// connects or listens. An empty name leaves the system default.
func congestionControl(name string) func(network, address string, c syscall.RawConn) error {
	if name == "" {
		return nil
	}
	return func(network, address string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
		})
		if err != nil {
			return err
		}
		if serr != nil {
			return &os.SyscallError{Syscall: "setsockopt TCP_CONGESTION " + name, Err: serr}
		}
		return nil
	}
}

// connCongestion returns the congestion control a connected socket uses.
func connCongestion(c *net.TCPConn) string {
	rc, err := c.SyscallConn()
	if err != nil {
		return "unknown"
	}
	name := "unknown"
	_ = rc.Control(func(fd uintptr) {
		if s, err := unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION); err == nil {
			name = strings.TrimRight(s, "\x00")
		}
	})
	return name
}

// errStopped reports a busy-poll loop ended by its stop function.
var errStopped = errors.New("stopped")

// spinIO runs f with read and write functions that work on c's socket
// without blocking: they retry on EAGAIN, spinning on the CPU, and give up
// with errStopped when stop reports true (checked every 1024 retries). A
// read of 0 bytes means the peer closed.
func spinIO(c *net.TCPConn, stop func() bool, f func(read, write func([]byte) (int, error)) error) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	err = rc.Control(func(fd uintptr) {
		sys := func(op func(int, []byte) (int, error)) func([]byte) (int, error) {
			return func(b []byte) (int, error) {
				for spins := 1; ; spins++ {
					n, err := op(int(fd), b)
					if err == nil {
						return n, nil
					}
					if err != unix.EAGAIN && err != unix.EINTR {
						return 0, err
					}
					if spins%1024 == 0 && stop() {
						return 0, errStopped
					}
				}
			}
		}
		ferr = f(sys(rawRead), sys(rawWrite))
	})
	if err != nil {
		return err
	}
	return ferr
}

// rawRead and rawWrite are read(2) and write(2) on a non-blocking socket
// without telling the Go scheduler about a system call: such a call never
// blocks, and announcing it lets the scheduler hand the spinning goroutine's
// processor away and park it for milliseconds.
func rawRead(fd int, b []byte) (int, error)  { return rawIO(unix.SYS_READ, fd, b) }
func rawWrite(fd int, b []byte) (int, error) { return rawIO(unix.SYS_WRITE, fd, b) }

func rawIO(trap uintptr, fd int, b []byte) (int, error) {
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	n, _, errno := unix.RawSyscall(trap, uintptr(fd), uintptr(p), uintptr(len(b)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// BusyPollSupported says whether spinIO works here.
const BusyPollSupported = true
