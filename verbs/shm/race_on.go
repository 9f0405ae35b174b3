//go:build race && linux

package shm

import (
	"os"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The race detector cannot see the synchronization of the rings: their
// counters live in a mapping shared by two processes. When both ends of a
// connection are in one process (the tests), it would report the bytes
// placed by one goroutine and read by another after a ring record as a
// race. Under -race, committing a record therefore releases, and reading
// one acquires, a Go variable of the connection's own, found by the
// connection's nonce from the shared header.
//
// Between two processes that does not help: a target's receiver places
// an RDMA WRITE into the application's region, and the application reads
// it after a message that went through the other process. So under -race
// the target's copies into and out of application memory are made by the
// kernel (process_vm_readv on its own pid), which the race detector does
// not see, as it does not see the copies of cross-memory attach.
var raceKeys struct {
	mu   sync.Mutex
	keys map[uint64]*byte
}

func raceKeyFor(nonce uint64) unsafe.Pointer {
	raceKeys.mu.Lock()
	defer raceKeys.mu.Unlock()
	if raceKeys.keys == nil {
		raceKeys.keys = make(map[uint64]*byte)
	}
	k := raceKeys.keys[nonce]
	if k == nil {
		k = new(byte)
		raceKeys.keys[nonce] = k
	}
	return unsafe.Pointer(k)
}

func raceRelease(k unsafe.Pointer) {
	if k != nil {
		runtime.RaceReleaseMerge(k)
	}
}

func raceAcquire(k unsafe.Pointer) {
	if k != nil {
		runtime.RaceAcquire(k)
	}
}

// placeCopy copies src into dst by the kernel where it can.
func placeCopy(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n == 0 {
		return 0
	}
	local := []unix.Iovec{{Base: &dst[0]}}
	local[0].SetLen(n)
	remote := []unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&src[0])), Len: n}}
	if k, err := unix.ProcessVMReadv(os.Getpid(), local, remote, 0); err == nil && k == n {
		return n
	}
	return copy(dst, src)
}
