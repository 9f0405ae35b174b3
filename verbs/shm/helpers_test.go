//go:build linux

package shm_test

import (
	"os"
	"unsafe"

	"github.com/exsgo/exs/verbs/shm"
)

func osMkdirTemp() (string, error) { return os.MkdirTemp("", "shm") }
func osRemoveAll(dir string)       { os.RemoveAll(dir) }

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// newProvider returns a provider with opts. A test's options are
// constants, so an error is a bug of the test: it panics (in a child
// process too, where there is no testing.T).
func newProvider(opts ...shm.Option) *shm.Provider {
	p, err := shm.New(opts...)
	if err != nil {
		panic(err)
	}
	return p
}
