package tcp

import (
	"errors"
	"io"
	"math"
	"net"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/exsgo/exs/internal/spin"
)

// fdOf returns the descriptor of c. The provider writes with its own
// system calls (non-blocking writev under the link's lock) and reads with
// c.Read; it closes c only once no goroutine uses the descriptor.
func fdOf(c *net.TCPConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	if err := rc.Control(func(f uintptr) { fd = int(f) }); err != nil {
		return -1, err
	}
	return fd, nil
}

// errWouldBlock reports a non-blocking call that found nothing to do.
var errWouldBlock = syscall.EAGAIN

// iovecs is a reusable vector for writev. It is thread-compatible.
type iovecs struct{ v []unix.Iovec }

// maxIov is the most buffers one writev takes (IOV_MAX).
const maxIov = 1024

// maxWrite is about the most bytes one writev takes (it ends with the
// FPDU that reaches it). Linux's tcp_sendmsg sends a write's segments as
// they fill only while none is held back (by pacing, or the window), else
// the rest at the write's end, short of half the peer's window: a writev
// of megabytes can leave the peer idle while it is copied, then busy
// while the writer waits for room.
const maxWrite = 256 << 10

// writev writes bufs (at most maxIov non-empty ones) to fd without
// blocking: it returns the bytes written, or errWouldBlock if the socket
// took none.
func (x *iovecs) writev(fd int, bufs [][]byte) (int, error) {
	x.v = x.v[:0]
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		v := unix.Iovec{Base: &b[0]}
		v.SetLen(len(b))
		x.v = append(x.v, v)
	}
	if len(x.v) == 0 {
		return 0, nil
	}
	for {
		n, _, e := unix.Syscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&x.v[0])), uintptr(len(x.v)))
		switch e {
		case 0:
			clear(x.v) // no pointers kept
			return int(n), nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			clear(x.v)
			return 0, errWouldBlock
		}
		clear(x.v)
		return 0, e
	}
}

// sockReader reads a connection with read(2) called directly, waiting in
// the runtime's poller when there is nothing to read (and honouring the
// connection's read deadline). The kernel copies the bytes into the
// caller's memory, as a NIC's DMA would: the race detector does not see
// those copies, as it does not see the peer's, so that memory placed for a
// peer and read after a completion that came back through the socket is
// not reported as a race. It is thread-compatible and does not allocate.
//
// idle, if set, is called when a Read finds nothing to read, before it
// waits, or before it reads when the read before it took all the socket
// held (fewer bytes than asked for): a read that would only find nothing
// is saved.
type sockReader struct {
	rc      syscall.RawConn
	idle    func()
	p, q, s []byte // q, s: the second and third buffers, for ReadVec
	iov     [3]unix.Iovec
	n       int
	err     error
	waits   bool // this Read already called idle
	drained bool // the last read returned fewer bytes than asked for
	fn      func(uintptr) bool
	// in tells spinning goroutines when this reader is parked in the
	// network poller (internal/spin.Watch).
	in *spin.Input
}

func newSockReader(c *net.TCPConn) (*sockReader, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	r := &sockReader{rc: rc, in: spin.NewInput()}
	r.fn = r.read
	return r, nil
}

func (r *sockReader) read(fd uintptr) bool {
	r.in.SetFD(fd)
	r.in.Park(false)
	if r.drained && !r.waits && r.idle != nil {
		r.waits = true
		r.idle()
	}
	r.drained = false
	for {
		var n uintptr
		var e syscall.Errno
		if r.q != nil || r.s != nil {
			n, e = readv3(fd, &r.iov, r.p, r.q, r.s)
		} else {
			n, _, e = unix.Syscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&r.p[0])), uintptr(len(r.p)))
		}
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			if !r.waits && r.idle != nil {
				r.waits = true
				r.idle()
				continue // what idle did may have taken a while
			}
			r.in.Park(true)
			return false
		case 0:
			r.n = int(n)
			r.drained = r.n > 0 && r.n < len(r.p)+len(r.q)+len(r.s)
		default:
			r.err = e
		}
		return true
	}
}

// Read reads at least one byte into p, waiting for it; io.EOF at the end
// of the stream.
func (r *sockReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.p = p
	err := r.rc.Read(r.fn)
	r.in.Park(false) // also after a deadline or a close, which do not call fn
	n := r.n
	if err == nil {
		err = r.err
	}
	r.p, r.q, r.s, r.n, r.err, r.waits = nil, nil, nil, 0, nil, false
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// ReadVec reads at least one byte into a, then b, then c (each only once
// the one before is full; b and c may be empty), with one readv, waiting
// for it.
func (r *sockReader) ReadVec(a, b, c []byte) (int, error) {
	if len(a) == 0 {
		if len(b) == 0 {
			return r.Read(c)
		}
		a, b, c = b, c, nil
	}
	if len(b) > 0 {
		r.q = b
	}
	if len(c) > 0 {
		r.s = c
	}
	return r.Read(a)
}

// readv3 reads into a, then b, then c with one readv(2); a is not empty,
// b and c may be.
func readv3(fd uintptr, iov *[3]unix.Iovec, a, b, c []byte) (uintptr, syscall.Errno) {
	n := 0
	for _, p := range [3][]byte{a, b, c} {
		if len(p) > 0 {
			iov[n] = unix.Iovec{Base: &p[0]}
			iov[n].SetLen(len(p))
			n++
		}
	}
	k, _, e := unix.Syscall(unix.SYS_READV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(n))
	*iov = [3]unix.Iovec{}
	return k, e
}

// readNB reads what fd holds now, without waiting: errWouldBlock if
// nothing, io.EOF at the end of the stream.
type readNB int

func (fd readNB) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		n, _, e := unix.Syscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		switch e {
		case unix.EINTR:
			continue
		case 0:
			if n == 0 {
				return 0, io.EOF
			}
			return int(n), nil
		}
		return 0, e
	}
}

// peerClosed reports whether the peer shut down its side of the
// connection (or it failed), even with data still unread.
func peerClosed(fd int) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
	for {
		n, err := unix.Poll(pfd, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil && n > 0 && pfd[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0
	}
}

// hasData reports whether the socket fd holds received bytes not yet
// read (SIOCINQ), the end of the stream aside.
func hasData(fd int) bool {
	n, err := unix.IoctlGetInt(fd, unix.SIOCINQ)
	return err == nil && n > 0
}

// sockError returns (and clears) the socket's pending error (SO_ERROR):
// nil if none.
func sockError(fd int) error {
	n, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil || n == 0 {
		return nil
	}
	return syscall.Errno(n)
}

// hasInput reports whether fd has input to read (or failed), without
// waiting.
func hasInput(fd int) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(pfd, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil && n > 0
	}
}

// maxSegment returns the connection's maximum segment size, or 0.
func maxSegment(fd int) int {
	n, err := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_MAXSEG)
	if err != nil {
		return 0
	}
	return n
}

// setCongestion sets the socket's TCP congestion control.
func setCongestion(fd int, name string) error {
	return unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
}

// setUserTimeout sets the socket's TCP_USER_TIMEOUT to d, rounded up to
// a millisecond (without overflowing near math.MaxInt64) and at most
// math.MaxInt32 ms, about 24.8 days.
func setUserTimeout(fd int, d time.Duration) error {
	ms := d / time.Millisecond
	if d%time.Millisecond != 0 {
		ms++
	}
	return unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(min(ms, math.MaxInt32)))
}

// congestion returns the socket's TCP congestion control.
func congestion(fd int) string {
	s, err := unix.GetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	if err != nil {
		return ""
	}
	return s
}
