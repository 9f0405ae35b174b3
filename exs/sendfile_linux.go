package exs

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// dupFile returns a duplicate of f's descriptor (close-on-exec), which a
// sendfile reads and closes, whatever the caller does with f. A file not
// open for reading is refused (sendfile(2) fails with EBADF).
func dupFile(f *os.File) (*os.File, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	nfd, flags, derr := -1, 0, error(nil)
	if err := rc.Control(func(fd uintptr) {
		if flags, derr = unix.FcntlInt(fd, unix.F_GETFL, 0); derr == nil && flags&unix.O_ACCMODE != unix.O_WRONLY {
			nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
		}
	}); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	switch {
	case derr != nil:
		return nil, fmt.Errorf("duplicate the file's descriptor: %w", derr)
	case nfd < 0:
		return nil, fmt.Errorf("%w: %s is not open for reading", ErrInvalid, f.Name())
	}
	return os.NewFile(uintptr(nfd), f.Name()), nil
}
