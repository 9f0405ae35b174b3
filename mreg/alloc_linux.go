package mreg

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// sysAlloc maps size bytes (a multiple of the page size) of anonymous
// private memory, which the kernel zeroes.
func sysAlloc(size int) ([]byte, error) {
	m, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("mreg: mmap of %d bytes: %w", size, err)
	}
	return m, nil
}

// sysFree unmaps a mapping made by sysAlloc.
func sysFree(m []byte) error {
	if err := unix.Munmap(m); err != nil {
		return fmt.Errorf("mreg: munmap of %d bytes: %w", len(m), err)
	}
	return nil
}
