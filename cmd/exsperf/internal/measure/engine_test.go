package measure

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/exsgo/exs/dynproto"
)

// TestEnginePairDelivers streams through the engine pair in every mode with
// a stream buffer small enough to wrap often, checking every byte.
func TestEnginePairDelivers(t *testing.T) {
	for _, m := range Modes {
		for _, size := range []int{1, 100, 4096 + 7} {
			for _, so := range [][2]int{{1, 1}, {3, 8}, {8, 3}} {
				t.Run(fmt.Sprintf("%v/%d/sends%d-recvs%d", m, size, so[0], so[1]), func(t *testing.T) {
					mp, err := newMemPair(Params{Mode: m, Size: size, Sends: so[0], Recvs: so[1], Ring: 3 * 4096, Verify: true, Seed: 7})
					if err != nil {
						t.Fatal(err)
					}
					r, err := mp.Stream(context.Background(), 0, 5*time.Millisecond)
					if err != nil {
						t.Fatal(err)
					}
					if r.Bytes == 0 || mp.b.recvOff == 0 {
						t.Fatalf("nothing delivered: %+v", r)
					}
				})
			}
		}
	}
}

// TestEnginePingPong checks that each round trip moves a whole message both
// ways.
func TestEnginePingPong(t *testing.T) {
	for _, m := range Modes {
		mp, err := newMemPair(Params{Mode: m, Size: 1000, Sends: 1, Recvs: 1, Ring: 4096, Verify: true})
		if err != nil {
			t.Fatal(err)
		}
		rts, err := mp.PingPong(context.Background(), 0, 5*time.Millisecond, WaitInline)
		if err != nil {
			t.Fatalf("%v: %v", m, err)
		}
		if n := int64(len(rts)); n == 0 || mp.b.recvBytes < 1000*n || mp.a.recvBytes < 1000*n {
			t.Errorf("%v: %d round trips, %d and %d bytes received", m, len(rts), mp.a.recvBytes, mp.b.recvBytes)
		}
	}
}

// TestEmulatedLink checks the virtual-time link against its two limits: the
// window (outstanding bytes per round trip) and the link rate.
func TestEmulatedLink(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode dynproto.Mode
		size int
		link Link
		want float64 // GB/s
	}{
		// 32 outstanding 64 KiB recvs per 48 ms round trip.
		{"window", dynproto.DirectOnly, 64 << 10, Link{48 * time.Millisecond, 10e9}, 32 * 65536 / 0.048 / 1e9},
		// 32 MiB outstanding per 1 ms: the 10 Gbit/s link limits.
		{"link", dynproto.DirectOnly, 1 << 20, Link{time.Millisecond, 10e9}, 1.25},
		{"link-dynamic", dynproto.Dynamic, 1 << 20, Link{time.Millisecond, 10e9}, 1.25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := tc.link
			mp, err := newMemPair(Params{Mode: tc.mode, Size: tc.size, Sends: 32, Recvs: 32, Ring: 4 << 20, Link: &l})
			if err != nil {
				t.Fatal(err)
			}
			r, err := mp.Stream(context.Background(), 500*time.Millisecond, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Virtual || r.Elapsed != 2*time.Second {
				t.Errorf("elapsed %v virtual %v", r.Elapsed, r.Virtual)
			}
			if got := r.GBps(); math.Abs(got-tc.want)/tc.want > 0.03 {
				t.Errorf("%.4f GB/s, want %.4f within 3%%", got, tc.want)
			}
		})
	}
}
