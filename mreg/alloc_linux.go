package mreg

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// sysAlloc maps size bytes (a multiple of the page size) of anonymous
// private memory, which the kernel zeroes, and populates it
// (MAP_POPULATE: every page faulted in for writing before mmap returns), so
// that the first transfers into or out of it do not take a page fault per
// page. On a virtual machine a first write costs about 1-3 ms per MiB
// either way; populating moves that cost from the first transfers to the
// allocation. If the kernel cannot populate every page (memory is short)
// the mapping still succeeds and the rest is faulted in on first use.
func sysAlloc(size int) ([]byte, error) {
	m, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
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
