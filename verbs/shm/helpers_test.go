//go:build linux

package shm_test

import (
	"os"
	"unsafe"
)

func osMkdirTemp() (string, error) { return os.MkdirTemp("", "shm") }
func osRemoveAll(dir string)       { os.RemoveAll(dir) }

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }
