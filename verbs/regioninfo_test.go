package verbs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/exsgo/exs/mreg"
)

// TestRegionInfoCheckAgreesWithLookup checks RegionInfo.Check against the
// authority, mreg.Table.Lookup, on random operations near the edges of
// live regions.
func TestRegionInfoCheckAgreesWithLookup(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
		rng := rand.New(rand.NewPCG(uint64(seed), 2))
		table := mreg.NewTable()
		var infos []RegionInfo
		for i := range 8 {
			acc := mreg.Access(rng.IntN(8))
			if acc&mreg.RemoteWrite != 0 {
				acc |= mreg.LocalWrite
			}
			r, err := table.Register(make([]byte, 1+rng.IntN(100)), acc)
			if err != nil {
				t.Fatalf("region %d: %v", i, err)
			}
			infos = append(infos, RegionInfo{LKey: r.LKey(), RKey: r.RKey(), Addr: r.Addr(), Len: uint64(r.Len()), Access: acc})
		}
		edges := func(ri RegionInfo) uint64 {
			switch rng.IntN(6) {
			case 0:
				return ri.Addr - uint64(rng.IntN(3))
			case 1:
				return ri.Addr + ri.Len - uint64(rng.IntN(3))
			case 2:
				return ri.Addr + ri.Len + uint64(rng.IntN(3))
			case 3:
				return math.MaxUint64 - uint64(rng.IntN(8))
			}
			return ri.Addr + uint64(rng.IntN(int(ri.Len)+1))
		}
		for range 20000 {
			ri := infos[rng.IntN(len(infos))]
			key := ri.RKey
			switch rng.IntN(4) {
			case 0:
				key = ri.LKey
			case 1:
				key = mreg.Key(rng.Uint32())
			}
			addr := edges(ri)
			n := uint64(rng.IntN(int(ri.Len) + 3))
			if rng.IntN(20) == 0 {
				n = math.MaxUint64 - uint64(rng.IntN(4))
			}
			acc := mreg.Access(rng.IntN(9))
			r, _, want := table.Lookup(key, addr, n, acc)
			if want == nil {
				r.Release()
			}
			// A random key may name another live region: check against it.
			target := ri
			for _, o := range infos {
				if key == o.LKey || key == o.RKey {
					target = o
				}
			}
			got := target.Check(key, addr, n, acc)
			if sentinelOf(got) != sentinelOf(want) {
				t.Fatalf("Check(%v, %#x, %d, %v) on %+v = %v, Lookup says %v", key, addr, n, acc, target, got, want)
			}
		}
	})
}

// observer records registration events.
type observer struct {
	nopProvider
	events []string
}

func (o *observer) MemoryRegistered(_ *PD, mr *MR) {
	o.events = append(o.events, fmt.Sprint("+", mr.Len()))
}
func (o *observer) MemoryDeregistered(_ *PD, mr *MR) {
	o.events = append(o.events, fmt.Sprint("-", mr.Len()))
}
func (o *observer) Dial(context.Context, string, *Endpoint, []byte) (Link, []byte, error) {
	return nil, nil, ErrInvalid
}

func TestRegistrationObserver(t *testing.T) {
	o := &observer{}
	d, _ := Open(o)
	pd, _ := d.AllocPD()
	a, _ := pd.RegisterMR(make([]byte, 10), 0)
	b, _ := pd.RegisterMR(make([]byte, 20), mreg.LocalWrite)
	if _, err := pd.RegisterMR(nil, 0); err == nil {
		t.Fatal("registered an empty buffer")
	}
	b.Deregister()
	a.Deregister()
	a.Deregister() // fails: no event
	if diff := cmp.Diff([]string{"+10", "+20", "-20", "-10"}, o.events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// sentinelOf returns the mreg sentinel err matches (nil for nil).
func sentinelOf(err error) error {
	for _, s := range []error{mreg.ErrInvalid, mreg.ErrInvalidKey, mreg.ErrBounds, mreg.ErrAccess, mreg.ErrBusy, mreg.ErrDeregistered} {
		if errors.Is(err, s) {
			return s
		}
	}
	return err
}
