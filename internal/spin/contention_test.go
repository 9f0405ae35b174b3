package spin

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDetector(t *testing.T) {
	ms := int64(time.Millisecond)
	type sample struct{ at, count int64 } // at in ms
	for _, tc := range []struct {
		name    string
		samples []sample
		// contended at these times (ms) after the samples
		probe []int64
		want  []bool
		n     uint64
	}{
		{"no samples", nil, []int64{0, 50}, []bool{false, false}, 0},
		{"one sample sets the origin only", []sample{{0, 1000}}, []int64{1}, []bool{false}, 0},
		{"quiet: 9 per window", []sample{{0, 0}, {10, 9}, {20, 18}}, []int64{21}, []bool{false}, 0},
		{"contended: 10 per window, held 100 ms", []sample{{0, 0}, {10, 10}}, []int64{11, 109, 110, 200}, []bool{true, true, false, false}, 1},
		{"a long gap dilutes", []sample{{0, 0}, {1000, 500}}, []int64{1001}, []bool{false}, 0},
		{"a long gap at a high rate", []sample{{0, 0}, {1000, 1000}}, []int64{1001}, []bool{true}, 1},
		{"samples within a window are skipped", []sample{{0, 0}, {5, 100}, {10, 5}}, []int64{11}, []bool{false}, 0},
		{"renewed while contended counts once", []sample{{0, 0}, {10, 20}, {20, 40}, {30, 60}}, []int64{129, 131}, []bool{true, false}, 1},
		{"contended again after a quiet spell", []sample{{0, 0}, {10, 20}, {200, 21}, {210, 40}}, []int64{211}, []bool{true}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d detector
			for _, s := range tc.samples {
				if d.due(s.at * ms) {
					d.observe(s.at*ms, s.count)
				}
			}
			var got []bool
			for _, p := range tc.probe {
				got = append(got, d.contended(p*ms))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("contended at %v ms (-want +got):\n%s", tc.probe, diff)
			}
			if n := d.n.Load(); n != tc.n {
				t.Errorf("%d contentions, want %d", n, tc.n)
			}
		})
	}
}

// TestLimitCut checks that a contended process cuts long spins only.
func TestLimitCut(t *testing.T) {
	saved := proc.until.Load()
	defer proc.until.Store(saved)
	now := time.Now()
	proc.until.Store(int64(now.Sub(epoch)) + int64(time.Hour))
	for _, tc := range []struct{ d, want time.Duration }{
		{50 * time.Microsecond, ContendedSpin},
		{ContendedSpin, ContendedSpin},
		{time.Microsecond, time.Microsecond},
		{0, 0},
	} {
		if got := limit(tc.d, now); got != tc.want {
			t.Errorf("contended: limit(%v) = %v, want %v", tc.d, got, tc.want)
		}
	}
	proc.until.Store(0)
	if got := limit(50*time.Microsecond, now); got != 50*time.Microsecond && !proc.contended(int64(now.Sub(epoch))) {
		t.Errorf("not contended: limit(50us) = %v", got)
	}
}

// TestPreemptions checks that the count can be read here and does not go
// backwards.
func TestPreemptions(t *testing.T) {
	a, ok := preemptions()
	if !ok {
		t.Skip("no preemption count on this system")
	}
	b, _ := preemptions()
	if a < 0 || b < a {
		t.Errorf("preemption counts %d then %d", a, b)
	}
}
