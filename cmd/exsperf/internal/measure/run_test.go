package measure

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestMedian(t *testing.T) {
	r := func(bytes int64) Result { return Result{Bytes: bytes, Elapsed: time.Second, Note: fmt.Sprint(bytes)} }
	for _, c := range []struct {
		rounds []Result
		want   string    // the median round's note
		rate   []float64 // the rounds' GB/s, in order
	}{
		{[]Result{r(2e9)}, "2000000000", []float64{2}},
		{[]Result{r(3e9), r(1e9), r(2e9)}, "2000000000", []float64{3, 1, 2}},
		// An even count takes the lower of the middle two.
		{[]Result{r(4e9), r(1e9), r(3e9), r(2e9)}, "2000000000", []float64{4, 1, 3, 2}},
	} {
		m := median(c.rounds)
		if m.Note != c.want || m.Rounds != len(c.rounds) || m.MinGBps != slices.Min(c.rate) || m.MaxGBps != slices.Max(c.rate) {
			t.Errorf("median of %v: %+v", c.rate, m)
		}
		if diff := cmp.Diff(c.rate, m.RoundGBps); diff != "" {
			t.Errorf("rounds (-want +got):\n%s", diff)
		}
	}
}

// TestScheduleRun measures the copy anchors at two sizes in three rounds:
// every point once a round, the sizes in order, a size's results in the
// order of its points, each the median of its rounds; the order within a
// round is shuffled by the seed alone.
func TestScheduleRun(t *testing.T) {
	points := func(size int) []Point {
		base := Params{Size: size, Sends: 2, Recvs: 3, Ring: 4096}
		return []Point{{Run: RunCopy1, Copies: 1, Params: base}, {Run: RunCopy2, Copies: 2, Params: base}}
	}
	run := func(seed int64) (labels []string, sizes []int) {
		s := Schedule{Seed: seed, Rounds: 3, Warmup: 0, Duration: time.Millisecond, Step: func(l string) { labels = append(labels, l) }}
		err := s.Run(context.Background(), []int{64, 1000}, points, func(size int, pts []Point, rs []Result) {
			sizes = append(sizes, size)
			if len(pts) != 2 || pts[0].Run != RunCopy1 || pts[1].Run != RunCopy2 || len(rs) != 2 {
				t.Errorf("size %d: points %v, %d results", size, pts, len(rs))
			}
			for i, r := range rs {
				if r.Rounds != 3 || len(r.RoundGBps) != 3 || !(r.Bytes > 0) || r.Bytes%int64(size) != 0 {
					t.Errorf("size %d, %s: %+v", size, pts[i].Run, r)
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		return labels, sizes
	}
	labels, sizes := run(1)
	if diff := cmp.Diff([]int{64, 1000}, sizes); diff != "" {
		t.Errorf("sizes (-want +got):\n%s", diff)
	}
	want := map[string]int{"64 B " + RunCopy1: 3, "64 B " + RunCopy2: 3, "1000 B " + RunCopy1: 3, "1000 B " + RunCopy2: 3}
	got := map[string]int{}
	for _, l := range labels {
		got[l]++
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	if again, _ := run(1); !slices.Equal(labels, again) {
		t.Errorf("the same seed measured in another order:\n%q\n%q", labels, again)
	}
	// A failing point names its size and run.
	err := Schedule{Rounds: 1, Duration: time.Millisecond}.Run(context.Background(), []int{64}, func(int) []Point {
		return []Point{{Run: "broken", Tr: Engine{}, Params: Params{Size: 64}}}
	}, func(int, []Point, []Result) { t.Error("emit after a failure") })
	if err == nil || err.Error() != "64 B broken: size 64, sends 0, recvs 0: all must be positive" {
		t.Errorf("error %v", err)
	}
}

// TestCopyAnchors checks that the anchors move every byte they count, and
// that the two-CPU anchor moves bytes at all: one of its threads can be
// kept off its CPU for a whole short interval on a loaded machine, so it is
// given a few tries.
func TestCopyAnchors(t *testing.T) {
	ctx := context.Background()
	for _, pt := range CopyAnchors(Params{Size: 5000, Sends: 3, Recvs: 4, Ring: 8192}) {
		t.Run(pt.Run, func(t *testing.T) {
			var r Result
			for try := 0; try < 5 && r.Bytes == 0; try++ {
				var err error
				if r, err = Measure(ctx, pt, time.Millisecond, 5*time.Millisecond); err != nil {
					t.Fatal(err)
				}
			}
			if !(r.Bytes > 0) || r.Bytes != r.Msgs*5000 && !pt.Cross || r.Elapsed < 5*time.Millisecond/2 || pt.TransportName() != "anchor" {
				t.Errorf("%+v", r)
			}
			if r.CPUTotal < 0 && CPUAccounting != "unavailable on this platform" {
				t.Errorf("no CPU time: %+v", r)
			}
		})
	}
}
