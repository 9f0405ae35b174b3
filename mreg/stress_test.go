package mreg_test

import (
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/exsgo/exs/mreg"
)

// TestStress runs Lookup/Release and Acquire/Release on many goroutines
// against Deregister and Register on others, with the memory either on the
// Go heap (so that the race detector sees any access to memory after its
// region was given up: the deregistering goroutine overwrites it) or from
// Alloc (so that such an access faults: the deregistering goroutine unmaps
// it). Run it with -race.
func TestStress(t *testing.T) {
	for _, mem := range []string{"heap", "alloc"} {
		t.Run(mem, func(t *testing.T) { stress(t, mem == "alloc") })
	}
}

// entry is the published state of one slot of the test: the current region
// of that slot, and how many readers are using its memory.
type entry struct {
	r     *mreg.Region
	buf   []byte // the registered memory, which r forgets on Deregister
	inUse atomic.Int32
}

func stress(t *testing.T, mapped bool) {
	const size = 256
	readers, owners, perOwner := 6, 2, 4
	iters := 100000
	if testing.Short() {
		iters = 2000
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(readers + owners))

	tab := mreg.NewTable()
	newBuf := func() []byte {
		if !mapped {
			return make([]byte, size)
		}
		b, err := mreg.Alloc(size)
		if err != nil {
			t.Error(err)
			return make([]byte, size)
		}
		return b
	}
	register := func() *entry {
		buf := newBuf()
		r, err := tab.Register(buf, mreg.LocalWrite|mreg.RemoteWrite)
		if err != nil {
			t.Errorf("Register: %v", err)
			return nil
		}
		return &entry{r: r, buf: buf}
	}
	slots := make([]atomic.Pointer[entry], owners*perOwner)
	for i := range slots {
		e := register()
		if e == nil {
			t.FailNow()
		}
		slots[i].Store(e)
	}

	var wg sync.WaitGroup
	var lookups, busy, deregs atomic.Int64
	fail := func(format string, args ...any) { t.Errorf(format, args...) }
	for w := range readers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range iters {
				e := slots[rng.IntN(len(slots))].Load()
				var b []byte
				if rng.IntN(4) == 0 {
					if err := e.r.Acquire(); err != nil {
						if !errors.Is(err, mreg.ErrDeregistered) {
							fail("Acquire: %v", err)
						}
						continue
					}
					b = e.r.Bytes()
				} else {
					off := uint64(rng.IntN(size))
					r, s, err := tab.Lookup(e.r.RKey(), e.r.Addr()+off, uint64(size)-off, mreg.RemoteWrite)
					if err != nil {
						if !errors.Is(err, mreg.ErrInvalidKey) {
							fail("Lookup: %v", err)
						}
						continue
					}
					if r != e.r {
						fail("Lookup returned another region")
					}
					b = s
				}
				lookups.Add(1)
				e.inUse.Add(1)
				if b == nil {
					fail("no memory while holding a reference")
				}
				var sum byte
				for _, c := range b {
					sum += c // plain reads: the race detector checks them
				}
				_ = sum
				if rng.IntN(8) == 0 {
					runtime.Gosched() // hold the reference a while
				}
				e.inUse.Add(-1)
				e.r.Release()
			}
		})
	}
	for o := range owners {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(o), 2))
			mine := slots[o*perOwner : (o+1)*perOwner]
			for range iters / 4 {
				p := &mine[rng.IntN(len(mine))]
				e := p.Load()
				err := tab.Deregister(e.r)
				if errors.Is(err, mreg.ErrBusy) {
					busy.Add(1)
					runtime.Gosched()
					continue
				}
				if err != nil {
					fail("Deregister: %v", err)
					return
				}
				deregs.Add(1)
				if n := e.inUse.Load(); n != 0 {
					fail("Deregister succeeded while %d readers use the memory", n)
				}
				if _, _, err := tab.Lookup(e.r.RKey(), e.r.Addr(), 1, mreg.RemoteWrite); !errors.Is(err, mreg.ErrInvalidKey) {
					fail("Lookup after Deregister: %v", err)
				}
				old := e.buf
				if mapped {
					if err := mreg.Free(old); err != nil {
						fail("Free: %v", err)
					}
				} else {
					for i := range old {
						old[i] = byte(i) // plain writes to memory given up
					}
				}
				next := register()
				if next == nil {
					return
				}
				p.Store(next)
			}
		})
	}
	wg.Wait()
	for i := range slots {
		e := slots[i].Load()
		b := e.buf
		if err := tab.Deregister(e.r); err != nil {
			t.Errorf("final Deregister: %v", err)
		}
		if mapped {
			if err := mreg.Free(b); err != nil {
				t.Errorf("final Free: %v", err)
			}
		}
	}
	if tab.Len() != 0 {
		t.Errorf("Len() = %d at the end", tab.Len())
	}
	t.Logf("%d references taken, %d deregistrations, %d refused as busy", lookups.Load(), deregs.Load(), busy.Load())
	// Both outcomes of Deregister must occur, or the race was not run. The
	// short run is too brief to count on a refusal.
	if deregs.Load() == 0 || lookups.Load() == 0 || busy.Load() == 0 && !testing.Short() {
		t.Errorf("the stress test did not exercise both outcomes of Deregister")
	}
}
