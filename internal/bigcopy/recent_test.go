package bigcopy

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCopyCached(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for _, n := range []int{0, 1, 100, Min - 1, Min, Min + 1, Min + cachedPiece + 17, 3*Min + 5} {
		for _, p := range [][2]int{{0, 0}, {1, 0}, {0, 1}, {3, 13}} {
			src, want := fill(rng, p[0]+n+70), fill(rng, p[1]+n+70)
			got := bytes.Clone(want)
			wn := copy(want[p[1]:p[1]+n], src[p[0]:])
			if gn := CopyCached(got[p[1]:p[1]+n], src[p[0]:]); gn != wn || !bytes.Equal(got, want) {
				t.Fatalf("len %d offsets %v: CopyCached returned %d (bytes equal %v), copy() %d", n, p, gn, bytes.Equal(got, want), wn)
			}
		}
	}
	// Overlapping slices move as copy() moves them.
	for _, shift := range []int{-cachedPiece - 1, -64, -1, 1, 64, cachedPiece + 1} {
		n := Min + 4096
		buf := fill(rng, n+2*cachedPiece+256)
		want := bytes.Clone(buf)
		so, do := cachedPiece+128, cachedPiece+128+shift
		copy(want[do:do+n], want[so:so+n])
		if got := CopyCached(buf[do:do+n], buf[so:so+n]); got != n || !bytes.Equal(buf, want) {
			t.Fatalf("shift %d: CopyCached returned %d (bytes equal %v)", shift, got, bytes.Equal(buf, want))
		}
	}
}

func TestRecent(t *testing.T) {
	const mib = 1 << 20
	type tr struct {
		addr uintptr
		n    int
	}
	nt, cached := "Copy", "CopyCached"
	for _, tc := range []struct {
		name string
		trs  []tr
		want []string
	}{
		{"small transfers go through the cache", []tr{{0, 100}, {0, Min - 1}}, []string{cached, cached}},
		{"a new destination is cold", []tr{{0, mib}, {16 * mib, mib}}, []string{nt, nt}},
		{"the same destination again is hot", []tr{{0, mib}, {0, mib}, {0, mib}}, []string{nt, cached, cached}},
		{"an overlap is hot", []tr{{0, mib}, {mib - 1, mib}}, []string{nt, cached}},
		{"an adjacent one is not", []tr{{0, mib}, {mib, mib}}, []string{nt, nt}},
		{"hot within the window", []tr{{0, mib}, {8 * mib, mib}, {16 * mib, mib}, {24 * mib, mib}, {0, mib}}, []string{nt, nt, nt, nt, cached}},
		{"cold after the window", []tr{{0, mib}, {8 * mib, mib}, {16 * mib, mib}, {24 * mib, mib}, {32 * mib, mib}, {0, mib}}, []string{nt, nt, nt, nt, nt, nt}},
		{"cold once forgotten", []tr{{0, Min}, {1 * mib * 2, Min}, {2 * mib * 2, Min}, {3 * mib * 2, Min}, {4 * mib * 2, Min},
			{5 * mib * 2, Min}, {6 * mib * 2, Min}, {7 * mib * 2, Min}, {8 * mib * 2, Min}, {0, Min}},
			[]string{nt, nt, nt, nt, nt, nt, nt, nt, nt, nt}},
		{"a stream of 32 buffers is cold", func() []tr {
			var trs []tr
			for i := range 64 {
				trs = append(trs, tr{uintptr(i%32) * mib, mib})
			}
			return trs
		}(), func() []string {
			var w []string
			for range 64 {
				w = append(w, nt)
			}
			return w
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r Recent
			var got []string
			for _, x := range tc.trs {
				switch f := r.Copier(x.addr+4096, x.n); reflect.ValueOf(f).Pointer() {
				case reflect.ValueOf(Copy).Pointer():
					got = append(got, nt)
				case reflect.ValueOf(CopyCached).Pointer():
					got = append(got, cached)
				default:
					got = append(got, "?")
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("copiers (-want +got):\n%s", diff)
			}
		})
	}
}

// BenchmarkHot copies 1 MiB with Copy and with CopyCached into a
// destination written just before (one buffer) and into one of 24 (a
// working set above the last-level cache).
func BenchmarkHot(b *testing.B) {
	for _, nbuf := range []int{1, 24} {
		src, dst := make([]byte, nbuf*Min), make([]byte, nbuf*Min)
		for i := range src {
			src[i], dst[i] = byte(i), 1
		}
		for _, f := range []struct {
			name string
			fn   func(d, s []byte) int
		}{{"Copy", Copy}, {"CopyCached", CopyCached}} {
			b.Run(fmt.Sprintf("buffers=%d/%s", nbuf, f.name), func(b *testing.B) {
				b.SetBytes(Min)
				i := 0
				for b.Loop() {
					o := (i % nbuf) * Min
					f.fn(dst[o:o+Min], src[o:o+Min])
					i++
				}
			})
		}
	}
}
