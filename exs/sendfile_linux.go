package exs

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// dupFile returns a duplicate of f's descriptor (close-on-exec), which a
// sendfile reads and closes, whatever the caller does with f.
func dupFile(f *os.File) (*os.File, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	nfd, derr := -1, error(nil)
	if err := rc.Control(func(fd uintptr) {
		nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if derr != nil {
		return nil, fmt.Errorf("duplicate the file's descriptor: %w", derr)
	}
	return os.NewFile(uintptr(nfd), f.Name()), nil
}
