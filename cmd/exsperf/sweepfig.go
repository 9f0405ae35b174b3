package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/exsgo/exs/cmd/exsperf/internal/measure"
	"github.com/exsgo/exs/dynproto"
)

// sweepView is a sweep's rows arranged for its figures and targets, by
// stage: a grid is nil (or, for figure 3, empty) where its stage did not
// run.
type sweepView struct {
	o      *sweepOpts
	tr     string     // the transport measured
	fig1   *grid      // figures 1 and 2: by size and run
	fig3   *sendsGrid // figure 3: by size, mode and outstanding sends
	fig4   *grid      // figure 3's dynamic runs, by size and outstanding sends
	fig5   *grid      // by size and mode
	tcpRun string     // the TCP anchor's run in figure 1, or ""
}

// newSweepView arranges the rows of rep, a report of a sweep with the
// flags o, by figure. Figure 1's runs are in the order of its rows.
func newSweepView(o *sweepOpts, rep *report) *sweepView {
	v := &sweepView{o: o, tr: rep.Transport, fig3: newSendsGrid(o.sizes)}
	if o.want(1) || o.want(2) {
		v.fig1 = newGrid(o.sizes, nil)
	}
	if o.want(3) || o.want(4) {
		var runs []string
		for _, s := range o.sendsList {
			runs = append(runs, sendsRun(s))
		}
		v.fig4 = newGrid(o.sizes, runs)
	}
	if o.want(5) {
		v.fig5 = newGrid(o.sizes, modeNames(o.modes))
		v.fig5.extra = []extraCol{{"window bound", o.windowBound}}
	}
	for _, r := range rep.Stream {
		switch r.Figure {
		case "fig1":
			if !slices.Contains(v.fig1.runs, r.Run) {
				v.fig1.runs = append(v.fig1.runs, r.Run)
			}
			if isTCPRun(r.Run) {
				v.tcpRun = r.Run
			}
			v.fig1.set(r.Size, r.Run, r)
		case "fig3":
			v.fig3.set(r.Size, r.Run, r.Sends, r)
			if r.Run == dynproto.Dynamic.String() {
				v.fig4.set(r.Size, sendsRun(r.Sends), r)
			}
		case "fig5":
			v.fig5.set(r.Size, r.Run, r)
		}
	}
	return v
}

// sweepFigures are the figures of a sweep, in the order of sweep.md: each
// writes its section of the markdown and returns its plots.
var sweepFigures = []struct {
	n    int
	file string
	draw func(v *sweepView, md io.Writer) []*plot
}{
	{1, "fig1-throughput.svg", (*sweepView).throughput},
	{2, "fig2-cpu.svg", (*sweepView).cpu},
	{3, "fig3-sends.svg", (*sweepView).sends},
	{4, "fig4-direct.svg", (*sweepView).direct},
	{5, "fig5-distance.svg", (*sweepView).distance},
}

// namedPlot is an SVG file of one plot or of panels stacked.
type namedPlot struct {
	file string
	ps   []*plot
}

// renderSweep writes the markdown of a sweep and draws its figures, from
// its report (with the targets computed) arranged as v.
func renderSweep(o *sweepOpts, rep *report, v *sweepView) (string, []namedPlot) {
	var md strings.Builder
	fmt.Fprintf(&md, "# exsperf sweep\n\n`%s`\n\nhost: %s\n\ntransport: %s: %s\n\n", rep.Command, rep.Host, rep.Transport, rep.About)
	fmt.Fprintf(&md, "stream buffer %s; %s\n\n", measure.SizeName(o.ring), o.timing())
	for _, n := range rep.Notes {
		fmt.Fprintf(&md, "note: %s\n\n", n)
	}
	rep.Targets.write(&md)
	var figs []namedPlot
	for _, f := range sweepFigures {
		if o.want(f.n) {
			figs = append(figs, namedPlot{f.file, f.draw(v, &md)})
		}
	}
	fmt.Fprintf(&md, "CPU s/GB: CPU seconds per GB received. %% direct: share of payload bytes sent by direct transfers.\n")
	if rep.Transport == "engine" {
		fmt.Fprintf(&md, "The socket API (exs over verbs) is not measured yet: figures 1-4 measure the protocol engine alone.\n")
	}
	return md.String(), figs
}

// fig1Sub is the subtitle of figures 1 and 2.
func (v *sweepView) fig1Sub() string {
	return fmt.Sprintf("outstanding sends %d = 1/2 outstanding recvs %d", v.o.fig1Sends(), v.o.recvs)
}

// throughput is figure 1: throughput against message size, with anchors.
func (v *sweepView) throughput(md io.Writer) []*plot {
	sub := v.fig1Sub()
	fmt.Fprintf(md, "## Figure 1: throughput (GB/s), %s\n\n", sub)
	v.fig1.table(md, func(r row) string { return sig(r.GBps) })
	return []*plot{v.fig1.plot("Throughput vs message size", sub+"; "+v.tr, "GB/s", func(r row) float64 { return r.GBps }, v.fig1.runs)}
}

// cpu is figure 2: the CPU time of figure 1's runs.
func (v *sweepView) cpu(md io.Writer) []*plot {
	sub := v.fig1Sub()
	fmt.Fprintf(md, "## Figure 2: CPU seconds per GB, sender / receiver, %s\n\n", sub)
	v.fig1.table(md, func(r row) string {
		if r.CPUSend == nil && r.CPURecv == nil {
			return num(r.CPUTotal, 3) + " total"
		}
		return num(r.CPUSend, 3) + " / " + num(r.CPURecv, 3)
	})
	return []*plot{v.fig1.cpuPlot(sub+"; "+v.tr, v.fig1.runs)}
}

// sends is figure 3: throughput against outstanding sends, a panel per
// plotted size.
func (v *sweepView) sends(md io.Writer) []*plot {
	o := v.o
	sub := fmt.Sprintf("outstanding recvs fixed at %d", o.recvs)
	fmt.Fprintf(md, "## Figure 3: throughput (GB/s), %s, outstanding sends varied\n\n", sub)
	v.fig3.table(md, o.fig3Modes(), o.sendsList)
	var ps []*plot
	for _, size := range o.fig3Plotted() {
		ps = append(ps, v.fig3.plot(size, o.fig3Modes(), o.sendsList, sub+"; "+v.tr))
	}
	return ps
}

// direct is figure 4: the share of bytes figure 3's dynamic runs sent
// directly.
func (v *sweepView) direct(md io.Writer) []*plot {
	sub := fmt.Sprintf("dynamic only; outstanding recvs fixed at %d", v.o.recvs)
	fmt.Fprintf(md, "## Figure 4: percent of bytes sent directly, %s\n\n", sub)
	fmt.Fprintf(md, "The dynamic mode's runs of figure 3: direct-only sends every byte directly and indirect-only none.\n\n")
	v.fig4.table(md, func(r row) string { return num(r.PctDirect, 1) })
	p := v.fig4.plot("Percent of bytes sent directly (dynamic)", sub+"; "+v.tr, "% direct",
		func(r row) float64 {
			if r.PctDirect == nil {
				return math.NaN()
			}
			return *r.PctDirect
		}, v.fig4.runs)
	p.yMax = 100
	return []*plot{p}
}

// windowBound is figure 5's bound on throughput at a message size, in
// Mbit/s: the link's rate, or the outstanding bytes per round trip.
func (o *sweepOpts) windowBound(size int) float64 {
	b := math.Inf(1)
	if o.rtt > 0 {
		b = float64(min(o.distOut, o.distSends)*size) * 8 / o.rtt.Seconds() / 1e6
	}
	if o.bandwidth > 0 {
		b = math.Min(b, o.bandwidth/1e6)
	}
	return b
}

// distance is figure 5: throughput over an emulated link, against the
// window bound.
func (v *sweepView) distance(md io.Writer) []*plot {
	o := v.o
	sub := fmt.Sprintf("%s; outstanding sends %d, recvs %d; stream buffer %s", o.link(), o.distSends, o.distOut, measure.SizeName(o.ring))
	fmt.Fprintf(md, "## Figure 5: throughput over distance (Mbit/s), %s\n\n", sub)
	fmt.Fprintf(md, "The engine transport over an emulated link in virtual time (%v warm-up, %v measured; the sender starts %s); the window bound min(link, %d x size / RTT) for reference.\n\n",
		o.vwarmup, o.vduration, map[string]string{"together": "together with the receiver", "adverts-first": "once the first ADVERTs have arrived"}[o.distStart], min(o.distOut, o.distSends))
	mbit := func(r row) float64 { return r.GBps * 8e3 }
	v.fig5.table(md, func(r row) string { return sig(mbit(r)) })
	p := v.fig5.plot("Throughput over distance", sub, "Mbit/s", mbit, v.fig5.runs)
	p.logY = true
	var xs, ys []float64
	for _, s := range o.sizes {
		if b := o.windowBound(s); !math.IsInf(b, 0) {
			xs, ys = append(xs, float64(s)), append(ys, b)
		}
	}
	p.series = append(p.series, series{name: "window bound", xs: xs, ys: ys, color: "#777", dash: "6 4"})
	return []*plot{p}
}

// grid holds one figure's rows by size and run.
type grid struct {
	sizes []int
	runs  []string
	cells map[int]map[string]row
	extra []extraCol
}

type extraCol struct {
	name string
	f    func(size int) float64
}

func newGrid(sizes []int, runs []string) *grid {
	return &grid{sizes: sizes, runs: runs, cells: make(map[int]map[string]row)}
}

func (g *grid) set(size int, run string, r row) {
	if g.cells[size] == nil {
		g.cells[size] = make(map[string]row)
	}
	g.cells[size][run] = r
}

func (g *grid) table(w io.Writer, cell func(row) string) {
	t := &table{head: append([]string{"size"}, g.runs...)}
	for _, x := range g.extra {
		t.head = append(t.head, x.name)
	}
	for range t.head {
		t.align = append(t.align, true)
	}
	for _, s := range g.sizes {
		cells := []string{measure.SizeName(s)}
		for _, r := range g.runs {
			rw, ok := g.cells[s][r]
			if !ok {
				cells = append(cells, "-")
				continue
			}
			cells = append(cells, cell(rw))
		}
		for _, x := range g.extra {
			cells = append(cells, sig(x.f(s)))
		}
		t.add(cells...)
	}
	t.write(w)
	fmt.Fprintln(w)
}

// isTCPRun reports whether run is the TCP anchor's.
func isTCPRun(run string) bool { return strings.HasPrefix(run, "TCP") }

func runStyle(run string) (color, dash string) {
	switch {
	case run == measure.RunCopy1:
		return "#000", "2 3"
	case run == measure.RunCopy2:
		return "#888", "2 3"
	case run == measure.RunCopy2C:
		return "#555", "6 3"
	case isTCPRun(run):
		return "#d62728", "8 3"
	}
	return modeColors[run], ""
}

func (g *grid) plot(title, note, ylabel string, val func(row) float64, runs []string) *plot {
	p := &plot{title: title, note: note, xlabel: "message size (bytes)", ylabel: ylabel, logX: true, xSizes: true}
	for _, r := range runs {
		s := series{name: r}
		s.color, s.dash = runStyle(r)
		for _, size := range g.sizes {
			rw, ok := g.cells[size][r]
			y := math.NaN()
			if ok {
				y = val(rw)
			}
			s.xs, s.ys = append(s.xs, float64(size)), append(s.ys, y)
		}
		p.series = append(p.series, s)
	}
	return p
}

// cpuPlot draws each run's sender CPU (dashed) and receiver CPU (solid), or
// its total where the sides cannot be told apart.
func (g *grid) cpuPlot(note string, runs []string) *plot {
	p := &plot{title: "CPU seconds per GB received", note: note, xlabel: "message size (bytes)", ylabel: "CPU s/GB (log scale)", logX: true, logY: true, xSizes: true}
	pick := func(f func(row) *float64) func(row) float64 {
		return func(r row) float64 {
			if v := f(r); v != nil {
				return *v
			}
			return math.NaN()
		}
	}
	for _, r := range runs {
		color, _ := runStyle(r)
		split := false
		for _, size := range g.sizes {
			if rw, ok := g.cells[size][r]; ok && rw.CPUSend != nil {
				split = true
			}
		}
		if !split {
			s := g.plot("", "", "", pick(func(r row) *float64 { return r.CPUTotal }), []string{r}).series[0]
			s.name, s.color, s.dash = r+" (total)", color, "2 3"
			p.series = append(p.series, s)
			continue
		}
		snd := g.plot("", "", "", pick(func(r row) *float64 { return r.CPUSend }), []string{r}).series[0]
		snd.name, snd.color, snd.dash = r+" send", color, "6 3"
		rcv := g.plot("", "", "", pick(func(r row) *float64 { return r.CPURecv }), []string{r}).series[0]
		rcv.name, rcv.color, rcv.dash = r+" recv", color, ""
		p.series = append(p.series, snd, rcv)
	}
	return p
}

func modeNames(ms []dynproto.Mode) []string {
	var v []string
	for _, m := range ms {
		v = append(v, m.String())
	}
	return v
}

// sendsGrid holds figure 3's rows by size, mode and outstanding sends.
type sendsGrid struct {
	sizes []int
	cells map[int]map[string]map[int]row
}

func newSendsGrid(sizes []int) *sendsGrid {
	return &sendsGrid{sizes: sizes, cells: make(map[int]map[string]map[int]row)}
}

func (g *sendsGrid) set(size int, mode string, sends int, r row) {
	if g.cells[size] == nil {
		g.cells[size] = make(map[string]map[int]row)
	}
	if g.cells[size][mode] == nil {
		g.cells[size][mode] = make(map[int]row)
	}
	g.cells[size][mode][sends] = r
}

func (g *sendsGrid) get(size int, mode string, sends int) (row, bool) {
	r, ok := g.cells[size][mode][sends]
	return r, ok
}

// table writes a row of throughputs per size and mode, a column per sends.
func (g *sendsGrid) table(w io.Writer, ms []dynproto.Mode, sendsList []int) {
	t := &table{head: []string{"size", "mode"}, align: []bool{true, false}}
	for _, s := range sendsList {
		t.head, t.align = append(t.head, sendsRun(s)), append(t.align, true)
	}
	for _, size := range g.sizes {
		for _, m := range ms {
			cells := []string{measure.SizeName(size), m.String()}
			for _, s := range sendsList {
				cell := "-"
				if r, ok := g.get(size, m.String(), s); ok {
					cell = sig(r.GBps)
				}
				cells = append(cells, cell)
			}
			t.add(cells...)
		}
	}
	t.write(w)
	fmt.Fprintln(w)
}

// plot draws throughput against outstanding sends at one size, a line per
// mode, as the paper's figure 3.
func (g *sendsGrid) plot(size int, ms []dynproto.Mode, sendsList []int, note string) *plot {
	p := &plot{title: "Throughput vs outstanding sends, " + measure.SizeName(size) + " messages", note: note,
		xlabel: "outstanding sends", ylabel: "GB/s", logX: true}
	sendsList = slices.Sorted(slices.Values(sendsList))
	for _, m := range ms {
		s := series{name: m.String()}
		s.color, s.dash = runStyle(m.String())
		for _, n := range sendsList {
			y := math.NaN()
			if r, ok := g.get(size, m.String(), n); ok {
				y = r.GBps
			}
			s.xs, s.ys = append(s.xs, float64(n)), append(s.ys, y)
		}
		p.series = append(p.series, s)
	}
	return p
}
