//go:build linux

package mreg_test

import (
	"encoding/binary"
	"os"
	"testing"
	"unsafe"

	"github.com/exsgo/exs/mreg"
)

// residentPages counts the pages of b that this process's page tables map
// (bit 63 of each /proc/self/pagemap entry).
func residentPages(t *testing.T, b []byte) (present, total int) {
	t.Helper()
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Skipf("no pagemap: %v", err)
	}
	defer f.Close()
	ps := uintptr(os.Getpagesize())
	first := uintptr(unsafe.Pointer(unsafe.SliceData(b))) / ps
	total = int((uintptr(cap(b)) + ps - 1) / ps)
	ents := make([]byte, 8*total)
	if _, err := f.ReadAt(ents, int64(first*8)); err != nil {
		t.Fatalf("reading pagemap: %v", err)
	}
	for i := range total {
		if binary.LittleEndian.Uint64(ents[8*i:])>>63 != 0 {
			present++
		}
	}
	return present, total
}

// TestAllocPopulated checks that Alloc hands out memory already faulted in:
// every page is mapped before the first access.
func TestAllocPopulated(t *testing.T) {
	b, err := mreg.Alloc(4<<20 + 1)
	if err != nil {
		t.Fatal(err)
	}
	defer mreg.Free(b)
	if present, total := residentPages(t, b); present != total {
		t.Errorf("%d of %d pages mapped after Alloc, want all", present, total)
	}
}
