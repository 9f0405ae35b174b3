package mreg_test

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/exsgo/exs/mreg"
	"github.com/google/go-cmp/cmp"
)

// This file checks Table against a naive reference: a map from live keys to
// regions, with bounds and rights written out the slow way.

// source supplies the choices of a random operation sequence.
type source interface {
	// intn returns a number in [0, n).
	intn(n int) int
	// u64 returns any 64-bit number.
	u64() uint64
	// done reports that the source has run out.
	done() bool
}

type randSource struct{ r *rand.Rand }

func (s randSource) intn(n int) int { return s.r.IntN(n) }
func (s randSource) u64() uint64    { return s.r.Uint64() }
func (s randSource) done() bool     { return false }

// byteSource reads choices from fuzz input; once it runs out, it is done.
type byteSource struct{ b []byte }

func (s *byteSource) byte() byte {
	if len(s.b) == 0 {
		return 0
	}
	c := s.b[0]
	s.b = s.b[1:]
	return c
}
func (s *byteSource) intn(n int) int {
	v := int(s.byte())
	if n > 256 {
		v = v<<8 | int(s.byte())
	}
	return v % n
}
func (s *byteSource) u64() uint64 {
	var v uint64
	for range 8 {
		v = v<<8 | uint64(s.byte())
	}
	return v
}
func (s *byteSource) done() bool { return len(s.b) == 0 }

// refRegion is the reference's view of one registration.
type refRegion struct {
	real   *mreg.Region // what Register returned
	buf    []byte
	access mreg.Access
	refs   int
	live   bool
}

// model is the reference table.
type model struct {
	keys    map[mreg.Key]*refRegion // live keys
	remote  map[mreg.Key]bool       // whether a live key is an rkey
	regions []*refRegion            // every registration, live or not
	held    []*refRegion            // one entry per reference held
	live    int
}

// outcome is what one operation returned, reduced to comparable values.
type outcome struct {
	Op     string
	Err    string
	Region int    // index in model.regions, -1 for none
	Off    uint64 // offset of the returned slice in the region's buffer
	Len    int
	Cap    int
}

// bounds reports whether [addr, addr+n) lies in buf, written independently
// of the implementation: the end is computed with a carry.
func bounds(buf []byte, addr, n uint64) (uint64, bool) {
	base := uint64(uintptr(unsafe.Pointer(&buf[0])))
	end, carry := bits.Add64(addr, n, 0)
	if carry != 0 || addr < base || end > base+uint64(len(buf)) {
		return 0, false
	}
	return addr - base, true
}

// runOps runs steps random operations on a fresh Table and on the model,
// comparing every result. It returns how often each operation had each
// result.
func runOps(t *testing.T, src source, steps int) map[string]int {
	t.Helper()
	tab := mreg.NewTable()
	m := &model{keys: map[mreg.Key]*refRegion{}, remote: map[mreg.Key]bool{}}
	index := map[*mreg.Region]int{}
	seen := map[string]int{}
	// result reduces a returned region and slice to an outcome.
	result := func(op string, r *mreg.Region, b []byte, err error, addr uint64) outcome {
		o := outcome{Op: op, Err: errName(err), Region: -1}
		if r != nil {
			i, ok := index[r]
			if !ok {
				t.Fatalf("%s returned an unknown region", op)
			}
			o.Region = i
		}
		if err == nil && b != nil {
			o.Off = addr - m.regions[o.Region].real.Addr()
			o.Len, o.Cap = len(b), cap(b)
			if len(b) > 0 && &b[0] != &m.regions[o.Region].buf[o.Off] {
				t.Fatalf("%s: slice does not alias the buffer at offset %d", op, o.Off)
			}
		}
		return o
	}
	// pickRegion picks any region, live ones more often.
	pickRegion := func() (int, *refRegion) {
		if len(m.regions) == 0 {
			return -1, nil
		}
		i := src.intn(len(m.regions))
		for range 2 {
			if m.regions[i].live {
				break
			}
			i = src.intn(len(m.regions))
		}
		return i, m.regions[i]
	}
	// pickAddr picks an address near the bounds of region g, or anywhere.
	pickAddr := func(g *refRegion) (uint64, uint64) {
		if g == nil || src.intn(8) == 0 {
			return src.u64(), src.u64()
		}
		base, size := g.real.Addr(), uint64(len(g.buf))
		addr := base + uint64(src.intn(int(size)+5)) - 2
		n := uint64(src.intn(int(size) + 3))
		switch src.intn(10) {
		case 0:
			n = math.MaxUint64 - uint64(src.intn(3))
		case 1:
			n = math.MaxUint64 - addr + uint64(src.intn(3))
		}
		return addr, n
	}

	for step := 0; step < steps && !src.done(); step++ {
		var want, got outcome
		switch op := src.intn(8); op {
		case 0, 1: // Register
			n := src.intn(40)
			var buf []byte
			if n > 0 || src.intn(2) == 0 {
				buf = make([]byte, n)
			}
			acc := mreg.Access(src.intn(9))
			want = outcome{Op: "Register", Err: "nil", Region: len(m.regions)}
			switch {
			case n == 0, acc > mreg.LocalWrite|mreg.RemoteRead|mreg.RemoteWrite,
				acc&mreg.RemoteWrite != 0 && acc&mreg.LocalWrite == 0:
				want.Err, want.Region = "ErrInvalid", -1
			case m.live == mreg.MaxRegions:
				want.Err, want.Region = "ErrTableFull", -1
			}
			r, err := tab.Register(buf, acc)
			got = outcome{Op: "Register", Err: errName(err), Region: -1}
			if err == nil {
				got.Region = len(m.regions)
				index[r] = len(m.regions)
				g := &refRegion{real: r, buf: buf, access: acc, live: true}
				m.regions = append(m.regions, g)
				m.live++
				if r.LKey() == r.RKey() || r.LKey() == 0 || r.RKey() == 0 {
					t.Fatalf("step %d: keys %v %v", step, r.LKey(), r.RKey())
				}
				for _, k := range []mreg.Key{r.LKey(), r.RKey()} {
					if m.keys[k] != nil {
						t.Fatalf("step %d: key %v is already live", step, k)
					}
					m.keys[k] = g
				}
				m.remote[r.RKey()] = true
				m.remote[r.LKey()] = false
			}

		case 2: // Deregister
			i, g := pickRegion()
			if g == nil {
				continue
			}
			want = outcome{Op: "Deregister", Err: "nil", Region: -1}
			switch {
			case !g.live:
				want.Err = "ErrDeregistered"
			case g.refs > 0:
				want.Err = "ErrBusy"
			default:
				g.live = false
				m.live--
				delete(m.keys, g.real.LKey())
				delete(m.keys, g.real.RKey())
			}
			got = outcome{Op: "Deregister", Err: errName(tab.Deregister(g.real)), Region: -1}
			_ = i

		case 3, 4: // Lookup
			var key mreg.Key
			var g *refRegion
			switch src.intn(6) {
			case 0:
				key = mreg.Key(src.u64()) // forged
			case 1:
				key = 0
			default:
				_, g = pickRegion()
				if g == nil {
					continue
				}
				key = g.real.LKey()
				if src.intn(2) == 0 {
					key = g.real.RKey()
				}
			}
			addr, n := pickAddr(g)
			acc := mreg.Access(src.intn(9))
			if g != nil && src.intn(2) == 0 {
				// Ask for rights that fit the kind of key.
				if key == g.real.RKey() {
					acc = []mreg.Access{mreg.RemoteRead, mreg.RemoteWrite, mreg.RemoteWrite | mreg.LocalWrite}[src.intn(3)]
				} else {
					acc = mreg.Access(src.intn(2))
				}
			}
			want = outcome{Op: "Lookup", Err: "nil", Region: -1}
			target := m.keys[key]
			var off uint64
			var in bool
			if target != nil {
				off, in = bounds(target.buf, addr, n)
			}
			switch {
			case acc > mreg.LocalWrite|mreg.RemoteRead|mreg.RemoteWrite:
				want.Err = "ErrInvalid"
			case target == nil:
				want.Err = "ErrInvalidKey"
			case !in:
				want.Err = "ErrBounds"
			case (acc&(mreg.RemoteRead|mreg.RemoteWrite) != 0) != m.remote[key],
				acc&^target.access != 0:
				want.Err = "ErrAccess"
			default:
				want.Region = index[target.real]
				want.Off, want.Len, want.Cap = off, int(n), int(n)
				target.refs++
				m.held = append(m.held, target)
			}
			r, b, err := tab.Lookup(key, addr, n, acc)
			got = result("Lookup", r, b, err, addr)
			if err == nil && r != target.real {
				t.Fatalf("step %d: Lookup returned the wrong region", step)
			}

		case 5: // Release
			if len(m.held) == 0 {
				continue
			}
			i := src.intn(len(m.held))
			g := m.held[i]
			m.held[i] = m.held[len(m.held)-1]
			m.held = m.held[:len(m.held)-1]
			g.refs--
			g.real.Release()
			want = outcome{Op: "Release", Err: "nil", Region: index[g.real]}
			got = want

		case 6: // Acquire
			i, g := pickRegion()
			if g == nil {
				continue
			}
			want = outcome{Op: "Acquire", Err: "nil", Region: i}
			if g.live {
				g.refs++
				m.held = append(m.held, g)
			} else {
				want.Err = "ErrDeregistered"
			}
			got = outcome{Op: "Acquire", Err: errName(g.real.Acquire()), Region: i}

		case 7: // Slice
			i, g := pickRegion()
			if g == nil {
				continue
			}
			addr, n := pickAddr(g)
			want = outcome{Op: "Slice", Err: "nil", Region: i}
			if !g.live {
				want.Err = "ErrDeregistered"
			} else if off, ok := bounds(g.buf, addr, n); !ok {
				want.Err = "ErrBounds"
			} else {
				want.Off, want.Len, want.Cap = off, int(n), int(n)
			}
			b, err := g.real.Slice(addr, n)
			got = outcome{Op: "Slice", Err: errName(err), Region: i}
			if err == nil {
				got.Off, got.Len, got.Cap = addr-g.real.Addr(), len(b), cap(b)
				if len(b) > 0 && &b[0] != &g.buf[got.Off] {
					t.Fatalf("step %d: Slice does not alias the buffer", step)
				}
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("step %d (-want +got):\n%s", step, diff)
		}
		seen[got.Op+" "+got.Err]++
		if tab.Len() != m.live {
			t.Fatalf("step %d: Len() = %d, model has %d", step, tab.Len(), m.live)
		}
		for _, g := range m.regions {
			n, closed := refs(g.real)
			if n != uint64(g.refs) || closed == g.live {
				t.Fatalf("step %d: region %v: refs %d closed %v, model %d live %v",
					step, g.real.LKey(), n, closed, g.refs, g.live)
			}
		}
	}

	// Drain: every reference released, every region deregistered.
	for _, g := range m.held {
		g.real.Release()
	}
	for _, g := range m.regions {
		if g.live {
			if err := tab.Deregister(g.real); err != nil {
				t.Fatalf("final Deregister: %v", err)
			}
		}
		for _, k := range []mreg.Key{g.real.LKey(), g.real.RKey()} {
			if _, _, err := tab.Lookup(k, g.real.Addr(), 0, 0); errName(err) != "ErrInvalidKey" {
				t.Fatalf("key %v after the final Deregister: %v", k, err)
			}
		}
	}
	if tab.Len() != 0 {
		t.Fatalf("Len() = %d after draining", tab.Len())
	}
	return seen
}

func TestRandomOps(t *testing.T) {
	runs, steps := 20, 3000
	if testing.Short() {
		runs, steps = 5, 1000
	}
	seed := rand.Uint64()
	total := map[string]int{}
	for i := range runs {
		s := seed + uint64(i)
		t.Run(fmt.Sprintf("seed=%d", s), func(t *testing.T) {
			for k, v := range runOps(t, randSource{rand.New(rand.NewPCG(s, 0))}, steps) {
				total[k] += v
			}
		})
	}
	// The sequences must reach every outcome, or the comparison proves little.
	for _, k := range []string{
		"Register nil", "Register ErrInvalid",
		"Deregister nil", "Deregister ErrBusy", "Deregister ErrDeregistered",
		"Lookup nil", "Lookup ErrInvalid", "Lookup ErrInvalidKey", "Lookup ErrBounds", "Lookup ErrAccess",
		"Release nil", "Acquire nil", "Acquire ErrDeregistered",
		"Slice nil", "Slice ErrBounds", "Slice ErrDeregistered",
	} {
		if total[k] == 0 && !t.Failed() {
			t.Errorf("no operation had the outcome %q; counts: %v", k, total)
		}
	}
	t.Logf("outcomes: %v", total)
}

func FuzzOps(f *testing.F) {
	f.Add([]byte{0, 10, 7, 3, 2, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 2, 0})
	f.Add([]byte("\x00\x20\x07\x00\x20\x03\x06\x00\x02\x00\x03\x02\x00\x01\x02\x03\x04\x05\x05\x00\x02\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		runOps(t, &byteSource{data}, 1<<20)
	})
}
