//go:build linux

package shm

import (
	"encoding/binary"
	"fmt"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mappedPages counts the pages of b that this process's page tables map
// (bit 63 of each /proc/self/pagemap entry), and their number.
func mappedPages(t *testing.T, b []byte) (present, total int) {
	t.Helper()
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Skipf("no pagemap: %v", err)
	}
	defer f.Close()
	ps := uintptr(os.Getpagesize())
	first := uintptr(unsafe.Pointer(unsafe.SliceData(b))) / ps
	total = int((uintptr(len(b)) + ps - 1) / ps)
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

// TestAllocPopulated checks that the shared allocator hands out memory
// already allocated and mapped: every page present before the first
// access.
func TestAllocPopulated(t *testing.T) {
	p := mustNew()
	b, err := p.Alloc(2<<20 + 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Free(b)
	if present, total := mappedPages(t, b[:cap(b)]); present != total {
		t.Errorf("%d of %d pages mapped after Alloc, want all", present, total)
	}
}

// TestPeerArenaPopulated checks that a peer's arena is mapped here with
// the pages the peer has allocated already in this side's page tables, and
// that its holes are not allocated by the mapping: a memfd of 64 pages
// whose first 16 and pages 40-47 were written arrives; those 24 pages are
// mapped here, and the memfd still holds only them.
func TestPeerArenaPopulated(t *testing.T) {
	ps := uint64(pageSize)
	const pages = 64
	fd := sealedMemfd(t, pages*ps)
	own, err := unix.Mmap(fd, 0, int(pages*ps), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	for i := range uint64(pages) {
		if i < 16 || i >= 40 && i < 48 {
			own[i*ps] = 1
		}
	}
	unix.Munmap(own)
	var before unix.Stat_t
	unix.Fstat(fd, &before)
	dup, err := unix.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dup)
	l := arenaLink()
	defer l.dropPeerArenas()
	l.onArenaMsg(arenaMsgBytes(arenaAdd, 1, pages*ps), []int{fd})
	l.tx.Lock()
	m := l.tx.peerArenas[1]
	l.tx.Unlock()
	if m == nil {
		t.Fatal("arena not mapped")
	}
	present, _ := mappedPages(t, m)
	var after unix.Stat_t
	unix.Fstat(dup, &after)
	if present != 24 || after.Blocks != before.Blocks {
		t.Errorf("%d pages mapped (want the 24 written), memfd blocks %d before the mapping and %d after (want the same)", present, before.Blocks, after.Blocks)
	}
	if m[0] != 1 || m[40*ps] != 1 || m[20*ps] != 0 {
		t.Error("the mapping does not show the peer's bytes")
	}
}

// BenchmarkArenaAlloc is the cost of the shared allocator's memory: Alloc
// and Free ("alloc"), and the same with a write to every page in between
// ("touch": what the first transfers into fresh memory do). Alloc
// populates the memory, so the faults are taken there.
func BenchmarkArenaAlloc(b *testing.B) {
	p := mustNew()
	for _, size := range []int{1 << 20, 16 << 20} {
		for _, touch := range []bool{false, true} {
			b.Run(fmt.Sprintf("%dMiB/%s", size>>20, map[bool]string{false: "alloc", true: "touch"}[touch]), func(b *testing.B) {
				b.SetBytes(int64(size))
				for b.Loop() {
					m, err := p.Alloc(size)
					if err != nil {
						b.Fatal(err)
					}
					if touch {
						touchPages(m)
					}
					if err := p.Free(m); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkPeerArenaMap is the cost of a peer's arena on this side: the
// arena message handled (the memfd checked, mapped and populated) and the
// mapping dropped ("map"), and the same with a write to every page through
// the mapping in between ("touch": what this side's first copies into it
// do). The memfd's pages were allocated by its owner, as Alloc does.
func BenchmarkPeerArenaMap(b *testing.B) {
	for _, size := range []int{1 << 20, 16 << 20} {
		fd, own, err := createArena(uint64(size))
		if err != nil {
			b.Fatal(err)
		}
		touchPages(own)
		for _, touch := range []bool{false, true} {
			b.Run(fmt.Sprintf("%dMiB/%s", size>>20, map[bool]string{false: "map", true: "touch"}[touch]), func(b *testing.B) {
				l := arenaLink()
				b.SetBytes(int64(size))
				msg := arenaMsgBytes(arenaAdd, 1, uint64(size))
				for b.Loop() {
					dup, err := unix.Dup(fd)
					if err != nil {
						b.Fatal(err)
					}
					l.onArenaMsg(msg, []int{dup})
					m := l.tx.peerArenas[1]
					if m == nil {
						b.Fatal("arena not mapped")
					}
					if touch {
						touchPages(m)
					}
					l.onArenaMsg(arenaMsgBytes(arenaDrop, 1, 0), nil)
				}
			})
		}
		unix.Munmap(own)
		unix.Close(fd)
	}
}

// touchPages writes one byte of every page of m.
func touchPages(m []byte) {
	for i := 0; i < len(m); i += pageSize {
		m[i] = 1
	}
}
