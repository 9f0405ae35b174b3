package spin

import "golang.org/x/sys/unix"

type pollFD = unix.PollFd

func newPollFD(fd int64) pollFD { return unix.PollFd{Fd: int32(fd), Events: unix.POLLIN} }

// readable reports whether any of fds has input, without waiting.
func readable(fds []pollFD) bool {
	for i := range fds {
		fds[i].Revents = 0
	}
	n, err := unix.Poll(fds, 0)
	if err != nil || n == 0 {
		return false
	}
	for _, f := range fds {
		if f.Revents&(unix.POLLIN|unix.POLLHUP|unix.POLLERR) != 0 {
			return true
		}
	}
	return false
}
