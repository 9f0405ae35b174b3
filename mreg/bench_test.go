package mreg_test

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/exsgo/exs/mreg"
)

// TestLookupDoesNotAllocate checks the hot path: a successful Lookup and
// Release, and a refused Lookup of a forged key, allocate nothing.
func TestLookupDoesNotAllocate(t *testing.T) {
	tab := mreg.NewTable()
	r := mustRegister(t, tab, make([]byte, 4096), mreg.LocalWrite|mreg.RemoteWrite)
	ok := testing.AllocsPerRun(1000, func() {
		got, _, err := tab.Lookup(r.RKey(), r.Addr()+100, 1000, mreg.RemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		got.Release()
	})
	forged := testing.AllocsPerRun(1000, func() {
		if _, _, err := tab.Lookup(r.RKey()^1<<20, r.Addr(), 1, mreg.RemoteWrite); err == nil {
			t.Fatal("forged key accepted")
		}
	})
	if ok != 0 || forged != 0 {
		t.Errorf("allocations per Lookup: %v on success, %v on a forged key; want 0", ok, forged)
	}
}

func BenchmarkLookupRelease(b *testing.B) {
	tab := mreg.NewTable()
	r := mustRegister(b, tab, make([]byte, 1<<16), mreg.LocalWrite|mreg.RemoteWrite)
	key, addr := r.RKey(), r.Addr()
	b.ReportAllocs()
	for b.Loop() {
		got, _, err := tab.Lookup(key, addr+512, 4096, mreg.RemoteWrite)
		if err != nil {
			b.Fatal(err)
		}
		got.Release()
	}
}

func BenchmarkLookupForgedKey(b *testing.B) {
	tab := mreg.NewTable()
	r := mustRegister(b, tab, make([]byte, 1<<16), mreg.LocalWrite|mreg.RemoteWrite)
	key, addr := r.RKey()^1<<20, r.Addr()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := tab.Lookup(key, addr, 4096, mreg.RemoteWrite); err == nil {
			b.Fatal("forged key accepted")
		}
	}
}

// BenchmarkLookupReleaseParallel runs Lookup+Release on every P, all on one
// region (the reference count is shared) or each on its own region.
func BenchmarkLookupReleaseParallel(b *testing.B) {
	for _, shared := range []bool{true, false} {
		name := "own-region"
		if shared {
			name = "one-region"
		}
		b.Run(name, func(b *testing.B) {
			tab := mreg.NewTable()
			one := mustRegister(b, tab, make([]byte, 1<<16), mreg.LocalWrite|mreg.RemoteWrite)
			var mu sync.Mutex
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := one
				if !shared {
					mu.Lock()
					r = mustRegister(b, tab, make([]byte, 1<<16), mreg.LocalWrite|mreg.RemoteWrite)
					mu.Unlock()
				}
				key, addr := r.RKey(), r.Addr()
				for pb.Next() {
					got, _, err := tab.Lookup(key, addr+512, 4096, mreg.RemoteWrite)
					if err != nil {
						b.Error(err)
						return
					}
					got.Release()
				}
			})
		})
	}
}

// rwTable is the obvious alternative design, kept here only to compare
// against: a map under a sync.RWMutex, each lookup taking the read lock.
type rwTable struct {
	mu sync.RWMutex
	m  map[mreg.Key]*mreg.Region
}

func (t *rwTable) lookup(key mreg.Key, addr, n uint64) (*mreg.Region, []byte, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	r := t.m[key]
	if r == nil || r.Acquire() != nil {
		return nil, nil, false
	}
	s, err := r.Slice(addr, n)
	if err != nil {
		r.Release()
		return nil, nil, false
	}
	return r, s, true
}

// BenchmarkRWMutexMapBaseline measures that alternative, in parallel on
// regions of their own, for a ratio against LookupReleaseParallel/own-region.
func BenchmarkRWMutexMapBaseline(b *testing.B) {
	tab := mreg.NewTable()
	rw := &rwTable{m: map[mreg.Key]*mreg.Region{}}
	var mu sync.Mutex
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		mu.Lock()
		r := mustRegister(b, tab, make([]byte, 1<<16), mreg.LocalWrite|mreg.RemoteWrite)
		mu.Unlock()
		rw.mu.Lock()
		rw.m[r.RKey()] = r
		rw.mu.Unlock()
		key, addr := r.RKey(), r.Addr()
		for pb.Next() {
			got, _, ok := rw.lookup(key, addr+512, 4096)
			if !ok {
				b.Error("lookup failed")
				return
			}
			got.Release()
		}
	})
}

func BenchmarkRegisterDeregister(b *testing.B) {
	tab := mreg.NewTable()
	buf := make([]byte, 1<<16)
	b.ReportAllocs()
	for b.Loop() {
		r, err := tab.Register(buf, mreg.LocalWrite|mreg.RemoteWrite)
		if err != nil {
			b.Fatal(err)
		}
		if err := tab.Deregister(r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAllocFree1MiB(b *testing.B) {
	const n = 1 << 20
	b.SetBytes(n)
	b.ReportAllocs()
	for b.Loop() {
		m, err := mreg.Alloc(n)
		if err != nil {
			b.Fatal(err)
		}
		if err := mreg.Free(m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAlloc is the cost of allocating memory for registration and
// freeing it, with a write to every page in between (what the first
// transfers into fresh memory do): "alloc" is Alloc and Free alone, "touch"
// adds the writes. Since Alloc populates its memory, the page faults are
// taken in Alloc and the writes find every page mapped.
func BenchmarkAlloc(b *testing.B) {
	ps := os.Getpagesize()
	for _, size := range []int{64 << 10, 1 << 20, 16 << 20} {
		for _, touch := range []bool{false, true} {
			name := "alloc"
			if touch {
				name = "touch"
			}
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, name), func(b *testing.B) {
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					m, err := mreg.Alloc(size)
					if err != nil {
						b.Fatal(err)
					}
					if touch {
						for i := 0; i < len(m); i += ps {
							m[i] = 1
						}
					}
					if err := mreg.Free(m); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
