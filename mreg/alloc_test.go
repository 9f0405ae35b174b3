package mreg_test

import (
	"errors"
	"os"
	"sync"
	"testing"
	"unsafe"

	"github.com/exsgo/exs/mreg"
	"github.com/google/go-cmp/cmp"
)

func TestAlloc(t *testing.T) {
	ps := os.Getpagesize()
	for _, n := range []int{1, 100, ps - 1, ps, ps + 1, 3 * ps, 1 << 20, 1<<20 + 7} {
		b, err := mreg.Alloc(n)
		if err != nil {
			t.Fatalf("Alloc(%d): %v", n, err)
		}
		wantCap := (n + ps - 1) / ps * ps
		type shape struct{ Len, Cap, Misalign int }
		got := shape{len(b), cap(b), int(uintptr(unsafe.Pointer(&b[0])) % uintptr(ps))}
		if diff := cmp.Diff(shape{n, wantCap, 0}, got); diff != "" {
			t.Errorf("Alloc(%d) (-want +got):\n%s", n, diff)
		}
		full := b[:cap(b)]
		for i, c := range full {
			if c != 0 {
				t.Fatalf("Alloc(%d): byte %d is %#x, want 0", n, i, c)
			}
		}
		for i := range full {
			full[i] = 0xa5 // the whole capacity is writable
		}
		if err := mreg.Free(b); err != nil {
			t.Errorf("Free of Alloc(%d): %v", n, err)
		}
	}
}

func TestAllocInvalid(t *testing.T) {
	for _, n := range []int{0, -1, int(^uint(0) >> 1)} {
		if b, err := mreg.Alloc(n); !errors.Is(err, mreg.ErrInvalid) || b != nil {
			t.Errorf("Alloc(%d) = %d bytes, %v; want ErrInvalid", n, len(b), err)
		}
	}
}

func TestFree(t *testing.T) {
	ps := os.Getpagesize()
	b, err := mreg.Alloc(2 * ps)
	if err != nil {
		t.Fatal(err)
	}
	other, err := mreg.Alloc(ps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := mreg.Free(other); err != nil {
			t.Error(err)
		}
	})
	type result struct{ Op, Err string }
	var got []result
	do := func(op string, err error) { got = append(got, result{op, errName(err)}) }
	do("Free(nil)", mreg.Free(nil))
	do("Free(heap memory)", mreg.Free(make([]byte, ps)))
	do("Free(interior slice)", mreg.Free(b[1:]))
	do("Free(second page)", mreg.Free(b[ps:]))
	do("Free(b[:0])", mreg.Free(b[:0])) // starts at the first byte: accepted
	do("Free(b) again", mreg.Free(b))
	want := []result{
		{"Free(nil)", "ErrInvalid"},
		{"Free(heap memory)", "ErrInvalid"},
		{"Free(interior slice)", "ErrInvalid"},
		{"Free(second page)", "ErrInvalid"},
		{"Free(b[:0])", "nil"},
		{"Free(b) again", "ErrInvalid"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Free (-want +got):\n%s", diff)
	}
	// The other allocation is untouched by the refused Frees.
	other[0] = 1
}

// TestAllocRegister registers allocated memory and writes through Lookup.
func TestAllocRegister(t *testing.T) {
	b, err := mreg.Alloc(10000)
	if err != nil {
		t.Fatal(err)
	}
	tab := mreg.NewTable()
	r := mustRegister(t, tab, b, mreg.LocalWrite|mreg.RemoteWrite)
	_, s, err := tab.Lookup(r.RKey(), r.Addr()+9990, 10, mreg.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	copy(s, "0123456789")
	r.Release()
	if err := tab.Deregister(r); err != nil {
		t.Fatal(err)
	}
	if string(b[9990:]) != "0123456789" {
		t.Errorf("tail of the buffer = %q", b[9990:])
	}
	if err := mreg.Free(b); err != nil {
		t.Fatal(err)
	}
}

func TestAllocConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				b, err := mreg.Alloc(1 + (g*200+i)%9000)
				if err != nil {
					t.Error(err)
					return
				}
				b[0] = byte(i)
				if err := mreg.Free(b); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
