package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/exsgo/exs/cmd/exsperf/internal/measure"
	"github.com/exsgo/exs/dynproto"
)

// The targets a sweep checks: the dynamic mode within 5% of the better of
// direct-only and indirect-only at every point of figures 1, 3 and 5; and at
// 1 MiB in figure 1, direct transfers at least twice TCP and indirect ones at
// least 0.8 of the two-copy limit.
const (
	wantDynamic  = 0.95
	wantOverTCP  = 2
	wantOverCopy = 0.8
	anchorSize   = 1 << 20
)

// ratioPoint is dynamic / max(direct-only, indirect-only) at one point:
// where the three runs have the same rounds, the median over the rounds of
// the ratio within each round (the three runs of a round are measured
// within a few seconds of each other, so that a change in the machine's
// speed between rounds does not enter the ratio), else the ratio of the
// medians.
type ratioPoint struct {
	Figure      string    `json:"figure"`
	Size        int       `json:"size"`
	Sends       int       `json:"sends,omitempty"` // figure 3's outstanding sends
	Dynamic     float64   `json:"dynamic_gb_per_s"`
	Best        float64   `json:"best_gb_per_s"`
	BestRun     string    `json:"best_run"`
	Ratio       float64   `json:"ratio"`
	RoundRatios []float64 `json:"round_ratios,omitempty"`
	// SameAs names the baseline whose transfers dynamic made: the one
	// that sends as dynamic did, all its bytes directly or none (at most
	// samePathSlack percent the other way), or "" if neither; VsSame is
	// dynamic / that baseline, taken as Ratio is: a run against its like.
	SameAs string  `json:"same_as,omitempty"`
	VsSame float64 `json:"vs_same,omitempty"`
}

// samePathSlack is the percentage of bytes dynamic may send the other way
// and still count as making a baseline's transfers.
const samePathSlack = 0.1

// samePath sums up dynamic / the baseline whose transfers it made: how far
// apart two runs of one path fall on this machine, the resolution of the
// dynamic target, whose max() of two such runs favours the luckier.
type samePath struct {
	Points int     `json:"points"`
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
	Below  int     `json:"below_target"`
}

func (p ratioPoint) where() string {
	if p.Sends > 0 {
		return fmt.Sprintf("%s sends %d", measure.SizeName(p.Size), p.Sends)
	}
	return measure.SizeName(p.Size)
}

// figureTarget sums up one figure's ratios.
type figureTarget struct {
	Figure string       `json:"figure"`
	Points int          `json:"points"`
	Min    *ratioPoint  `json:"min"`   // null if no point could be checked
	Below  []ratioPoint `json:"below"` // the points under the target
	Met    *bool        `json:"met"`   // null if not checked
}

// anchorTarget is a run against an anchor at one size.
type anchorTarget struct {
	Name       string  `json:"name"`
	Size       int     `json:"size"`
	Run        string  `json:"run"`
	Anchor     string  `json:"anchor"`
	GBps       float64 `json:"gb_per_s"`
	AnchorGBps float64 `json:"anchor_gb_per_s"`
	Ratio      float64 `json:"ratio"`
	Want       float64 `json:"want_at_least"`
	Met        bool    `json:"met"`
}

// targets are the sweep's targets computed from its own runs.
type targets struct {
	WantDynamic float64        `json:"dynamic_vs_best_at_least"`
	Points      []ratioPoint   `json:"dynamic_vs_best"`
	SamePath    *samePath      `json:"same_path,omitempty"`
	Figures     []figureTarget `json:"figures"`
	Anchors     []anchorTarget `json:"anchors"`
	Missing     []string       `json:"not_checked,omitempty"`

	sizes     []int
	sendsList []int
}

// ratio returns dynamic / max(direct-only, indirect-only) from get, which
// returns a mode's row.
func dynamicRatio(fig string, size, sends int, get func(mode string) (row, bool)) (ratioPoint, bool) {
	d, ok1 := get(dynproto.Dynamic.String())
	a, ok2 := get(dynproto.DirectOnly.String())
	b, ok3 := get(dynproto.IndirectOnly.String())
	if !ok1 || !ok2 || !ok3 {
		return ratioPoint{}, false
	}
	best := a
	if b.GBps > a.GBps {
		best = b
	}
	if !(best.GBps > 0) {
		return ratioPoint{}, false
	}
	p := ratioPoint{Figure: fig, Size: size, Sends: sends, Dynamic: d.GBps, Best: best.GBps, BestRun: best.Run, Ratio: d.GBps / best.GBps}
	var same row
	switch {
	case d.PctDirect == nil:
	case *d.PctDirect <= samePathSlack:
		same = b
	case *d.PctDirect >= 100-samePathSlack:
		same = a
	}
	if same.GBps > 0 {
		p.SameAs, p.VsSame = same.Run, d.GBps/same.GBps
	}
	if n := len(d.RoundGBps); n > 1 && len(a.RoundGBps) == n && len(b.RoundGBps) == n {
		var vs []float64
		for k := range n {
			m := max(a.RoundGBps[k], b.RoundGBps[k])
			if !(m > 0) {
				return p, true
			}
			p.RoundRatios = append(p.RoundRatios, d.RoundGBps[k]/m)
			if p.SameAs != "" && same.RoundGBps[k] > 0 {
				vs = append(vs, d.RoundGBps[k]/same.RoundGBps[k])
			}
		}
		p.Ratio = medianOf(p.RoundRatios)
		if len(vs) == n {
			p.VsSame = medianOf(vs)
		}
	}
	return p, true
}

// medianOf returns the median of v (the mean of the middle two for an
// even count).
func medianOf(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	n := len(s)
	if n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[n/2]
}

// sweepTargets computes the targets from the figures that ran (nil grids,
// or an empty figure 3, did not).
func sweepTargets(o *sweepOpts, fig1 *grid, fig3 *sendsGrid, fig5 *grid, tcpRun string) *targets {
	t := &targets{WantDynamic: wantDynamic, Points: []ratioPoint{}, Figures: []figureTarget{}, Anchors: []anchorTarget{},
		sizes: o.sizes, sendsList: o.sendsList}
	if fig1 != nil {
		t.figure("fig1", gridRatios("fig1", o.sizes, fig1), len(o.sizes))
	}
	if len(fig3.cells) > 0 {
		var pts []ratioPoint
		for _, size := range o.sizes {
			for _, s := range o.sendsList {
				if p, ok := dynamicRatio("fig3", size, s, func(m string) (row, bool) { return fig3.get(size, m, s) }); ok {
					pts = append(pts, p)
				}
			}
		}
		t.figure("fig3", pts, len(o.sizes)*len(o.sendsList))
	}
	if fig5 != nil {
		t.figure("fig5", gridRatios("fig5", o.sizes, fig5), len(o.sizes))
	}
	if fig1 != nil {
		if tcpRun == "" {
			t.Missing = append(t.Missing, "direct-only / TCP: the TCP anchor is off")
		} else {
			t.anchor(fig1, "direct-only / TCP", dynproto.DirectOnly.String(), tcpRun, wantOverTCP)
		}
		t.anchor(fig1, "indirect-only / copy() x2", dynproto.IndirectOnly.String(), measure.RunCopy2, wantOverCopy)
		t.anchor(fig1, "indirect-only / copy() x2, 2 CPUs", dynproto.IndirectOnly.String(), measure.RunCopy2C, wantOverCopy)
	}
	t.SamePath = samePathOf(t.Points)
	return t
}

// gridRatios are the ratios of a figure of one point per size.
func gridRatios(name string, sizes []int, g *grid) []ratioPoint {
	var pts []ratioPoint
	for _, size := range sizes {
		if p, ok := dynamicRatio(name, size, 0, func(m string) (row, bool) { r, ok := g.cells[size][m]; return r, ok }); ok {
			pts = append(pts, p)
		}
	}
	return pts
}

// figure adds a figure's ratios, of the expected number of points, and
// sums them up.
func (t *targets) figure(name string, pts []ratioPoint, expected int) {
	ft := figureTarget{Figure: name, Points: len(pts), Below: []ratioPoint{}}
	for i, p := range pts {
		if ft.Min == nil || p.Ratio < ft.Min.Ratio {
			ft.Min = &pts[i]
		}
		if p.Ratio < wantDynamic {
			ft.Below = append(ft.Below, p)
		}
	}
	if len(pts) > 0 {
		met := len(ft.Below) == 0
		ft.Met = &met
	}
	if len(pts) < expected {
		t.Missing = append(t.Missing, fmt.Sprintf("%s: %d of %d points (each needs direct-only, indirect-only and dynamic, and a baseline above zero)", name, len(pts), expected))
	}
	t.Points = append(t.Points, pts...)
	t.Figures = append(t.Figures, ft)
}

// anchor adds the target of run against the anchor anc at anchorSize in
// figure 1.
func (t *targets) anchor(fig1 *grid, name, run, anc string, want float64) {
	r, ok1 := fig1.cells[anchorSize][run]
	a, ok2 := fig1.cells[anchorSize][anc]
	if !ok1 || !ok2 || !(a.GBps > 0) {
		t.Missing = append(t.Missing, fmt.Sprintf("%s: %s or %s not measured at %s", name, run, anc, measure.SizeName(anchorSize)))
		return
	}
	q := r.GBps / a.GBps
	t.Anchors = append(t.Anchors, anchorTarget{Name: name, Size: anchorSize, Run: run, Anchor: anc,
		GBps: r.GBps, AnchorGBps: a.GBps, Ratio: q, Want: want, Met: q >= want})
}

// samePathOf sums up the points where dynamic made a baseline's transfers,
// of figures 1 and 3 (in wall time: figure 5's emulated link has no
// noise), or returns nil if there are none.
func samePathOf(pts []ratioPoint) *samePath {
	var same []float64
	for _, p := range pts {
		if p.SameAs != "" && p.Figure != "fig5" {
			same = append(same, p.VsSame)
		}
	}
	if len(same) == 0 {
		return nil
	}
	sp := &samePath{Points: len(same), Min: slices.Min(same), Median: medianOf(same), Max: slices.Max(same)}
	for _, v := range same {
		if v < wantDynamic {
			sp.Below++
		}
	}
	return sp
}

var figureNames = map[string]string{"fig1": "figure 1", "fig3": "figure 3", "fig5": "figure 5"}

// fmtRatio gives two decimals, or more where two would round a ratio below
// want up to it.
func fmtRatio(r, want float64) string {
	s := fmt.Sprintf("%.2f", r)
	for prec := 3; prec <= 6 && r < want; prec++ {
		if v, _ := strconv.ParseFloat(s, 64); v < want {
			break
		}
		s = fmt.Sprintf("%.*f", prec, r)
	}
	return s
}

// write writes the targets as markdown: a table of the ratio at every point
// and a summary table.
func (t *targets) write(w io.Writer) {
	if len(t.Figures) == 0 && len(t.Anchors) == 0 && len(t.Missing) == 0 {
		return
	}
	fmt.Fprintf(w, "## Targets, from this run\n\n")
	yes := map[bool]string{true: "yes", false: "no"}
	if len(t.Points) > 0 {
		fmt.Fprintf(w, "dynamic / max(direct-only, indirect-only) at every point of figures 1, 3 and 5 (target >= %.2f; **bold** below it); with several rounds, the median over the rounds of the ratio within each round:\n\n", t.WantDynamic)
		type col struct {
			head  string
			fig   string
			sends int
		}
		var cols []col
		for _, f := range t.Figures {
			if f.Points == 0 {
				continue
			}
			if f.Figure != "fig3" {
				cols = append(cols, col{head: "fig. " + strings.TrimPrefix(f.Figure, "fig"), fig: f.Figure})
				continue
			}
			for _, s := range t.sendsList {
				cols = append(cols, col{head: "fig. 3, sends " + fmt.Sprint(s), fig: f.Figure, sends: s})
			}
		}
		tb := &table{head: []string{"size"}, align: []bool{true}}
		for _, c := range cols {
			tb.head, tb.align = append(tb.head, c.head), append(tb.align, true)
		}
		for _, size := range t.sizes {
			cells := []string{measure.SizeName(size)}
			for _, c := range cols {
				i := slices.IndexFunc(t.Points, func(p ratioPoint) bool { return p.Figure == c.fig && p.Size == size && p.Sends == c.sends })
				switch {
				case i < 0:
					cells = append(cells, "-")
				case t.Points[i].Ratio < t.WantDynamic:
					cells = append(cells, "**"+fmtRatio(t.Points[i].Ratio, t.WantDynamic)+"**")
				default:
					cells = append(cells, fmtRatio(t.Points[i].Ratio, t.WantDynamic))
				}
			}
			tb.add(cells...)
		}
		tb.write(w)
		fmt.Fprintln(w)
	}
	tb := &table{head: []string{"target", "measured", "ratio", "met"}, align: []bool{false, false, true, false}}
	for _, f := range t.Figures {
		name := fmt.Sprintf("dynamic >= %.2fx max(direct-only, indirect-only), %s", t.WantDynamic, figureNames[f.Figure])
		if f.Min == nil {
			tb.add(name, "not measured", "-", "-")
			continue
		}
		measured := fmt.Sprintf("%d points, none below %.2f", f.Points, t.WantDynamic)
		if len(f.Below) > 0 {
			var b []string
			for _, p := range f.Below {
				b = append(b, p.where()+" "+fmtRatio(p.Ratio, t.WantDynamic))
			}
			measured = fmt.Sprintf("%d of %d points below %.2f: %s", len(f.Below), f.Points, t.WantDynamic, strings.Join(b, ", "))
		}
		tb.add(name, measured, fmt.Sprintf("min %s (%s)", fmtRatio(f.Min.Ratio, t.WantDynamic), f.Min.where()), yes[*f.Met])
	}
	for _, a := range t.Anchors {
		tb.add(fmt.Sprintf("%s at %s >= %g", a.Name, measure.SizeName(a.Size), a.Want),
			fmt.Sprintf("%s GB/s vs %s GB/s", sig(a.GBps), sig(a.AnchorGBps)), fmtRatio(a.Ratio, a.Want), yes[a.Met])
	}
	tb.write(w)
	fmt.Fprintln(w)
	if sp := t.SamePath; sp != nil {
		fmt.Fprintf(w, "The resolution of the dynamic target: at the %d points of figures 1 and 3 where dynamic made a baseline's transfers (no byte directly, as indirect-only, or all of them, as direct-only; at most %g%% the other way), dynamic / that baseline ranged from %.2f to %.2f (median %.2f), %d of them below %.2f; the target's max() of two runs of about the same speed favours the luckier round.\n\n",
			sp.Points, samePathSlack, sp.Min, sp.Max, sp.Median, sp.Below, t.WantDynamic)
	}
	for _, m := range t.Missing {
		fmt.Fprintf(w, "not checked: %s\n\n", m)
	}
}
