//go:build !linux

package mreg

import (
	"os"
	"unsafe"
)

// sysAlloc returns size bytes (a multiple of the page size) of zeroed,
// page-aligned memory from the Go heap, which does not move objects. The
// allocation registry keeps it alive until Free.
func sysAlloc(size int) ([]byte, error) {
	ps := os.Getpagesize()
	raw := make([]byte, size+ps)
	mis := int(uintptr(unsafe.Pointer(unsafe.SliceData(raw))) & uintptr(ps-1))
	off := (ps - mis) & (ps - 1)
	return raw[off : off+size : off+size], nil
}

// sysFree lets the garbage collector take the memory back.
func sysFree([]byte) error { return nil }
