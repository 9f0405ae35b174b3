//go:build race

package shm

import (
	"runtime"
	"sync"
	"unsafe"
)

// The race detector cannot see the synchronization of the rings: their
// counters live in a mapping shared by two processes. When both ends of a
// connection are in one process (the tests), it would report the bytes
// placed by one goroutine and read by another after a ring record as a
// race. Under -race, committing a record therefore releases, and reading
// one acquires, a Go variable of the connection's own, found by the
// connection's nonce from the shared header.
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
