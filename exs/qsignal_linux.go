package exs

import (
	"encoding/binary"

	"golang.org/x/sys/unix"
)

// SignalFD returns a file descriptor that is readable while events are
// queued, for event loops built on epoll or poll: register it for reading
// (EPOLLIN), and when it fires, dequeue with TryDequeue until the queue is
// empty. Do not read from it: the dequeue that empties the queue clears it.
// It is an eventfd, non-blocking and close-on-exec, owned by the queue:
// every call returns the same descriptor, and Qdelete (or Stack.Close)
// closes it, so remove it from the poller before deleting the queue. On a
// deleted queue SignalFD fails with ErrClosed.
func (q *Queue) SignalFD() (int, error) {
	s := q.signal()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return -1, opErr("signalfd", "", ErrClosed)
	case s.fd >= 0:
		return s.fd, nil
	}
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return -1, opErr("signalfd", "", err)
	}
	s.fd = fd
	if s.raised.Load() {
		fdRaise(fd)
	}
	return fd, nil
}

var one = binary.NativeEndian.AppendUint64(nil, 1)

// fdRaise makes the eventfd readable. The counter cannot overflow: it is
// written at most twice between two reads, which reset it.
func fdRaise(fd int) { unix.Write(fd, one) }

// fdLower makes the eventfd unreadable.
func fdLower(fd int) {
	var b [8]byte
	unix.Read(fd, b[:])
}

func fdClose(fd int) { unix.Close(fd) }
