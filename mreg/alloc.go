package mreg

import (
	"fmt"
	"os"
	"sync"
	"unsafe"
)

// allocs records the live allocations of Alloc, so that Free can refuse
// memory it did not hand out and a second Free of the same memory.
var allocs struct {
	mu   sync.Mutex
	live map[uintptr][]byte // first byte's address -> the whole allocation
}

// Alloc returns n bytes of zeroed, page-aligned memory for registration. The
// allocation is rounded up to whole pages: len is n, cap may be larger. On
// Linux the memory is an anonymous private mapping outside the Go heap; it
// must be returned with Free, after every region that uses it has been
// deregistered, and must not be used after Free. Alloc returns ErrInvalid if
// n is not positive, or an error wrapping the system's errno if the
// mapping fails. It is safe for concurrent use.
func Alloc(n int) ([]byte, error) {
	ps := os.Getpagesize()
	if n <= 0 || n > int(^uint(0)>>1)-ps {
		return nil, fmt.Errorf("%w: allocate %d bytes", ErrInvalid, n)
	}
	size := (n + ps - 1) &^ (ps - 1)
	m, err := sysAlloc(size)
	if err != nil {
		return nil, err
	}
	allocs.mu.Lock()
	if allocs.live == nil {
		allocs.live = make(map[uintptr][]byte)
	}
	allocs.live[uintptr(unsafe.Pointer(unsafe.SliceData(m)))] = m
	allocs.mu.Unlock()
	return m[:n], nil
}

// Free returns memory obtained from Alloc. b must start at the first byte
// Alloc returned (its length and capacity do not matter). Free returns
// ErrInvalid for memory Alloc did not return or that was already freed. It
// is safe for concurrent use.
func Free(b []byte) error {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	allocs.mu.Lock()
	m, ok := allocs.live[p]
	if ok {
		delete(allocs.live, p)
	}
	allocs.mu.Unlock()
	if !ok || p == 0 {
		return fmt.Errorf("%w: free memory not from Alloc", ErrInvalid)
	}
	return sysFree(m)
}
