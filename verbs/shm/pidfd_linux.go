package shm

import (
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/exsgo/exs/verbs"
)

// The peer's process and cross-memory attach. process_vm_writev and
// process_vm_readv name the peer by pid, and a pid names whatever process
// has it now: once the peer has exited and been reaped, its pid may be
// given to an unrelated process, into which a write would then go. So a
// link holds a pidfd of the peer, opened at the rendezvous, which keeps
// naming that very process; a goroutine waits (in the runtime's poller,
// no thread held) for it to report the exit, and from then on the link
// makes no cross-memory-attach call at all (peerGone, which the end of the
// socket sets too); a call that fails checks the pidfd once, to stop the
// next ones at once.
//
// What is left: a call made between the peer's exit and the moment a
// goroutine of the link sets peerGone (a scheduling delay) could reach
// another process only if in that delay the peer was reaped and its pid
// handed out again, which takes the kernel's pid allocator going through
// every free pid up to pid_max first. A call in progress when the peer
// exits holds the peer's memory, not its pid. Without pidfds (Linux
// before 5.3) only the end of the socket stops the calls, and it does not
// end while a process that inherited the peer's socket lives.

// errPeerGone is the error of a cross-memory-attach call refused because
// the peer process is gone.
var errPeerGone = fmt.Errorf("shm: peer process gone: %w", verbs.ErrDisconnected)

// peerPidfd returns a pidfd of the process at the other end of the socket,
// whose pid is pid: SO_PEERPIDFD (Linux 6.5) names the very process that
// connected or listened; failing that, pidfd_open names the process that
// has pid now, which the caller checks is the peer (its probe word,
// pidfdExited after the probe). It returns -1 and nil without pidfds, and
// an error if the peer has exited.
func peerPidfd(c *net.UnixConn, pid int) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var gerr error
	if err := rc.Control(func(s uintptr) {
		fd, gerr = unix.GetsockoptInt(int(s), unix.SOL_SOCKET, unix.SO_PEERPIDFD)
	}); err != nil {
		return -1, err
	}
	switch {
	case gerr == nil:
		return fd, nil
	case !errors.Is(gerr, unix.ENOPROTOOPT):
		// The peer's process is gone (EINVAL, ESRCH): pidfd_open of
		// its pid could name another process.
		return -1, fmt.Errorf("shm: pidfd of the peer: %w", gerr)
	}
	fd, err = unix.PidfdOpen(pid, 0)
	switch {
	case err == nil:
		return fd, nil
	case errors.Is(err, unix.ENOSYS):
		return -1, nil
	}
	return -1, fmt.Errorf("shm: pidfd_open of the peer: %w", err)
}

// pidfdExited reports whether the process of the pidfd has exited: a
// pidfd polls readable then.
func pidfdExited(fd int) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(pfd, 0)
		if err == unix.EINTR {
			continue
		}
		return err == nil && n > 0 && pfd[0].Revents&(unix.POLLIN|unix.POLLHUP|unix.POLLERR) != 0
	}
}

// checkPeerProcess returns why cross-memory attach into the peer must not
// be used after the rendezvous's probe, or "": the pidfd opened before the
// probe reports no exit after it, so the process the probe read is the one
// the pidfd names.
func checkPeerProcess(pidfd int, perr error) string {
	switch {
	case perr != nil:
		return perr.Error()
	case pidfd >= 0 && pidfdExited(pidfd):
		return "the peer process exited"
	}
	return ""
}

// watchPeerProcess starts the goroutine that waits for the peer process to
// exit, when the link uses cross-memory attach and has a pidfd; otherwise
// it closes the pidfd, which nothing needs.
func (l *link) watchPeerProcess() {
	if l.pidfd < 0 || !l.cma {
		if l.pidfd >= 0 {
			unix.Close(l.pidfd)
			l.pidfd = -1
		}
		close(l.pidDone)
		return
	}
	unix.SetNonblock(l.pidfd, true) // so that the runtime polls it
	l.pidf = os.NewFile(uintptr(l.pidfd), "pidfd")
	rc, err := l.pidf.SyscallConn()
	if err != nil {
		close(l.pidDone)
		return
	}
	go func() {
		defer close(l.pidDone)
		// Read returns once the callback reports the exit, or when
		// exit closes the file (or the file cannot be polled: then
		// only the socket and failed calls tell).
		if rc.Read(func(fd uintptr) bool { l.pidChecks.Add(1); return pidfdExited(int(fd)) }) == nil {
			l.markPeerGone()
		}
	}()
}

// closePeerProcess stops watchPeerProcess's goroutine and closes the
// pidfd. Called by exit, and by abandon for a link never started.
func (l *link) closePeerProcess(started bool) {
	switch {
	case l.pidf != nil:
		l.pidf.Close()
	case l.pidfd >= 0:
		unix.Close(l.pidfd)
	}
	l.pidfd = -1
	if started {
		<-l.pidDone
	}
}

// peerExited checks the pidfd: whether the peer process has exited.
func (l *link) peerExited() bool {
	if l.pidf == nil {
		return l.pidfd >= 0 && pidfdExited(l.pidfd)
	}
	rc, err := l.pidf.SyscallConn()
	if err != nil {
		return false
	}
	exited := false
	if rc.Control(func(fd uintptr) { exited = pidfdExited(int(fd)) }) != nil {
		return false
	}
	return exited
}

// cmaTransfer moves k bytes between the iovecs of v and the peer's memory
// by cross-memory attach (into it if write), unless the link knows the
// peer process is gone. A failed call checks the pidfd: if the peer has
// exited, the link stops every later call and the error is a reset
// connection.
func (l *link) cmaTransfer(v *iovecs, write bool, k int) (int, error) {
	if l.peerGone.Load() {
		return 0, errPeerGone
	}
	n, err := v.transfer(l.peerPID, write, k)
	if err == nil {
		return n, nil
	}
	if l.peerExited() {
		l.markPeerGone()
		return n, fmt.Errorf("%w (%w)", errPeerGone, err)
	}
	return n, peerErr(err)
}
