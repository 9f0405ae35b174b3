//go:build linux

package shm_test

import (
	"errors"
	"testing"

	"github.com/exsgo/exs/exs"
)

// TestStackAlloc checks that a stack whose same-host provider offers the
// shared allocator hands out its memory (exs.Stack.Alloc), and that Free
// refuses it while a handle on it is registered.
func TestStackAlloc(t *testing.T) {
	p := newProvider()
	st, err := exs.NewStack(exs.WithProvider("shm", p))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b, err := st.Alloc(10000)
	if err != nil {
		t.Fatal(err)
	}
	h, err := st.Mregister(b, exs.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Free(b); !errors.Is(err, exs.ErrBusy) {
		t.Errorf("Free of registered memory = %v, want ErrBusy", err)
	}
	if err := st.Mderegister(h); err != nil {
		t.Fatal(err)
	}
	if err := p.Free(b); err != nil {
		t.Errorf("the provider's Free of the stack's allocation: %v, want success (memory from shm.Provider.Alloc)", err)
	}
	if err := st.Free(b); !errors.Is(err, exs.ErrInvalid) {
		t.Errorf("second Free = %v, want ErrInvalid", err)
	}
	if _, err := st.Alloc(0); !errors.Is(err, exs.ErrInvalid) {
		t.Errorf("Alloc(0) = %v, want ErrInvalid", err)
	}
}
