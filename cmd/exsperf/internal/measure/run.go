package measure

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/exsgo/exs/dynproto"
)

// A Point is one measurement of a stream table: a mode on a transport, or
// an anchor.
type Point struct {
	Run    string    // the name of the run, a mode or an anchor
	Tr     Transport // nil for the copy anchors
	Copies int       // 1 or 2 for the copy anchors
	Cross  bool      // the two copies on two CPUs (crossCopyAnchor)
	Params Params
}

// TransportName is the name of the point's transport, "anchor" for the copy
// anchors.
func (pt Point) TransportName() string {
	if pt.Tr == nil {
		return "anchor"
	}
	return pt.Tr.Name()
}

// ModePoints are the points of each of modes on tr, with base's parameters.
func ModePoints(tr Transport, modes []dynproto.Mode, base Params) []Point {
	var pts []Point
	for _, m := range modes {
		p := base
		p.Mode = m
		pts = append(pts, Point{Run: m.String(), Tr: tr, Params: p})
	}
	return pts
}

// Measure runs one point: a stream on a pair it opens for the purpose, or
// an anchor.
func Measure(ctx context.Context, pt Point, warmup, d time.Duration) (Result, error) {
	if pt.Tr == nil {
		win := newWindow(warmup, pt.Params.MaxWarmup, d)
		if pt.Cross {
			return crossCopyAnchor(ctx, pt.Params.Size, pt.Params.Buffers(pt.Params.Sends), pt.Params.Buffers(pt.Params.Recvs), pt.Params.Ring, win)
		}
		return copyAnchor(ctx, pt.Copies, pt.Params.Size, pt.Params.Buffers(pt.Params.Sends), pt.Params.Buffers(pt.Params.Recvs), pt.Params.Ring, win)
	}
	pr, err := pt.Tr.Open(ctx, pt.Params)
	if err != nil {
		return Result{}, err
	}
	r, err := pr.Stream(ctx, warmup, d)
	return r, errors.Join(err, pr.Close())
}

// The names of the anchor runs, in table order.
const (
	RunCopy1  = "copy() x1"
	RunCopy2  = "copy() x2"
	RunCopy2C = "copy() x2, 2 CPUs"
)

// CopyAnchors are the points of the three copy anchors.
func CopyAnchors(base Params) []Point {
	return []Point{{Run: RunCopy1, Copies: 1, Params: base}, {Run: RunCopy2, Copies: 2, Params: base},
		{Run: RunCopy2C, Copies: 2, Cross: true, Params: base}}
}

// CopyNote says what the copy anchors are.
const CopyNote = "copy() x1 and x2: the same send and recv buffers copied once, or twice through a ring of the stream buffer's size, on one thread; copy() x2, 2 CPUs: the two copies made by two threads bound to two CPUs, one into the ring and one out of it, as the two ends of an indirect transfer make them"

// TCPRunName is the name of the runs of a TCP anchor.
func TCPRunName(t Transport) string {
	if t.Name() == "tcp-proc" {
		return "TCP (2 processes)"
	}
	return "TCP"
}

// A Schedule says how the points of a stream table are measured: each for
// Warmup and then Duration, Rounds times, in rounds shuffled with Seed.
// With MaxWarmup above Warmup, each point warms up until its rate is
// steady, for at least Warmup and at most MaxWarmup (Params.MaxWarmup).
type Schedule struct {
	Seed             int64
	Rounds           int
	Warmup, Duration time.Duration
	MaxWarmup        time.Duration
	// Step, if not nil, is told of each point ("SIZE RUN") before it is
	// measured.
	Step func(label string)
}

// Run measures the points of each size in rounds and calls emit with a
// size's results, in the order given, once all of them are measured. Each
// round measures every point once, in an order shuffled with the seed, so
// that drift in the machine's speed spreads over all points; each point's
// result is its median round by throughput, carrying the rounds' range.
func (s Schedule) Run(ctx context.Context, sizes []int, pointsFor func(size int) []Point, emit func(size int, pts []Point, rs []Result)) error {
	rng := rand.New(rand.NewPCG(uint64(s.Seed), 0x657873706572))
	for _, size := range sizes {
		pts := pointsFor(size)
		all := make([][]Result, len(pts))
		for range s.Rounds {
			for _, i := range rng.Perm(len(pts)) {
				if s.Step != nil {
					s.Step(fmt.Sprintf("%s %s", SizeName(size), pts[i].Run))
				}
				pt := pts[i]
				if s.MaxWarmup > 0 {
					pt.Params.MaxWarmup = s.MaxWarmup
				}
				r, err := Measure(ctx, pt, s.Warmup, s.Duration)
				if err != nil {
					return fmt.Errorf("%s %s: %w", SizeName(size), pts[i].Run, err)
				}
				all[i] = append(all[i], r)
			}
		}
		rs := make([]Result, len(pts))
		for i := range pts {
			rs[i] = median(all[i])
		}
		emit(size, pts, rs)
	}
	return nil
}

// median returns the result with the median throughput, with the range of
// all the rounds' throughputs.
func median(rs []Result) Result {
	sorted := slices.Clone(rs)
	slices.SortFunc(sorted, func(a, b Result) int { return cmp.Compare(a.GBps(), b.GBps()) })
	m := sorted[(len(sorted)-1)/2]
	m.Rounds, m.MinGBps, m.MaxGBps = len(rs), sorted[0].GBps(), sorted[len(sorted)-1].GBps()
	m.RoundGBps, m.RoundWarmups, m.UnsteadyRounds = nil, nil, 0
	for _, r := range rs {
		m.RoundGBps = append(m.RoundGBps, r.GBps())
		m.RoundWarmups = append(m.RoundWarmups, r.Warmup)
		if r.Unsteady {
			m.UnsteadyRounds++
		}
	}
	return m
}

// PingPong opens a pair of tr with p and bounces a message over it, waiting
// as w says, for warmup and then d, and returns the round trips of the
// measured interval: at least one.
func PingPong(ctx context.Context, tr Transport, p Params, w WaitMode, warmup, d time.Duration) ([]time.Duration, error) {
	pr, err := tr.Open(ctx, p)
	if err != nil {
		return nil, err
	}
	rts, err := pr.PingPong(ctx, warmup, d, w)
	if err = errors.Join(err, pr.Close()); err != nil {
		return nil, err
	}
	if len(rts) == 0 {
		return nil, errors.New("no round trip completed in the measured interval")
	}
	return rts, nil
}
