package bigcopy

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
)

// check copies src[so:so+n] to dst[do:do+n] with Copy and compares the
// whole of dst, and the count, with what copy() gives.
func check(t *testing.T, rng *rand.Rand, so, do, n, extra int) {
	t.Helper()
	src, want := fill(rng, so+n+extra), fill(rng, do+n+extra)
	got := bytes.Clone(want)
	wn := copy(want[do:do+n], src[so:])
	gn := Copy(got[do:do+n], src[so:])
	if gn != wn {
		t.Fatalf("src off %d, dst off %d, len %d: Copy returned %d, copy %d", so, do, n, gn, wn)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for got[i] == want[i] {
			i++
		}
		t.Fatalf("src off %d, dst off %d, len %d: first difference at byte %d of dst", so, do, n, i)
	}
}

// fill returns n random bytes.
func fill(rng *rand.Rand, n int) []byte {
	b := make([]byte, n+7)
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
	}
	return b[:n]
}

func TestCopy(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	var lens []int
	for n := range 301 {
		lens = append(lens, n)
	}
	for _, c := range []int{512, 4096, Min} {
		for _, d := range []int{-65, -64, -63, -17, -16, -15, -1, 0, 1, 15, 16, 17, 63, 64, 65} {
			lens = append(lens, c+d)
		}
	}
	lens = append(lens, Min+4096+17, 3*Min+5)
	offs := []int{0, 1, 7, 8, 15, 16, 31, 63}
	for _, n := range lens {
		// Every pair of offsets for small and medium lengths; a few for
		// the large ones, whose copies are slow under -race.
		pairs := [][2]int{{0, 0}, {1, 0}, {0, 1}, {3, 13}, {15, 1}}
		if n <= 8192 {
			pairs = pairs[:0]
			for _, so := range offs {
				for _, do := range offs {
					pairs = append(pairs, [2]int{so, do})
				}
			}
		}
		for _, p := range pairs {
			check(t, rng, p[0], p[1], n, 70)
		}
	}
}

// TestCopyShort covers the counts copy() returns when dst and src differ
// in length.
func TestCopyShort(t *testing.T) {
	tests := []struct{ dst, src int }{
		{0, 4096}, {4096, 0}, {1000, 5000}, {5000, 1000}, {Min, Min + 1}, {Min + 1, Min},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d<-%d", tt.dst, tt.src), func(t *testing.T) {
			src := bytes.Repeat([]byte{0xa5, 1, 2, 3, 4}, tt.src/5+1)[:tt.src]
			want, got := make([]byte, tt.dst), make([]byte, tt.dst)
			wn, gn := copy(want, src), Copy(got, src)
			if gn != wn || !bytes.Equal(got, want) {
				t.Fatalf("Copy returned %d (equal %v), copy %d", gn, bytes.Equal(got, want), wn)
			}
		})
	}
}

// TestCopyOverlap checks overlapping slices, which copy() moves as
// memmove does.
func TestCopyOverlap(t *testing.T) {
	for _, n := range []int{100, 4096, 70000} {
		for _, shift := range []int{-64, -17, -1, 1, 17, 64} {
			buf := make([]byte, n+128)
			for i := range buf {
				buf[i] = byte(i * 7)
			}
			want := bytes.Clone(buf)
			so, do := 64, 64+shift
			copy(want[do:do+n], want[so:so+n])
			if got := Copy(buf[do:do+n], buf[so:so+n]); got != n {
				t.Fatalf("len %d shift %d: Copy returned %d", n, shift, got)
			}
			if !bytes.Equal(buf, want) {
				t.Fatalf("len %d shift %d: bytes differ from copy()", n, shift)
			}
		}
	}
}

func FuzzCopy(f *testing.F) {
	f.Add(uint16(0), uint8(0), uint8(0), int64(1))
	f.Add(uint16(600), uint8(3), uint8(5), int64(2))
	f.Add(uint16(4097), uint8(15), uint8(1), int64(3))
	f.Fuzz(func(t *testing.T, n uint16, so, do uint8, seed int64) {
		rng := rand.New(rand.NewPCG(uint64(seed), 1))
		check(t, rng, int(so%64), int(do%64), int(n), int(so/64))
	})
}

func BenchmarkCopy(b *testing.B) {
	for _, n := range []int{256 << 10, Min} {
		src, dst := make([]byte, 4*Min), make([]byte, 4*Min)
		for _, f := range []struct {
			name string
			fn   func(d, s []byte) int
		}{{"copy", func(d, s []byte) int { return copy(d, s) }}, {"Copy", Copy}} {
			b.Run(fmt.Sprintf("%s/%d", f.name, n), func(b *testing.B) {
				b.SetBytes(int64(n))
				i := 0
				for b.Loop() {
					o := (i * n) % len(src)
					f.fn(dst[o:o+n], src[o:o+n])
					i++
				}
			})
		}
	}
}
