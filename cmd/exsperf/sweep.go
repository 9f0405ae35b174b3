package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/exsgo/exs/dynproto"
)

type sweepOpts struct {
	streamOpts
	out       string
	figures   []int
	sendsList []int
	fig3Sizes []int
	rtt       time.Duration
	bandwidth float64
	vwarmup   time.Duration
	vduration time.Duration
	distOut   int
	distStart string
	distSends int
}

func (o *sweepOpts) register(fs *flag.FlagSet) {
	o.streamOpts.register(fs, streamDefaults{300 * time.Millisecond, 100 * time.Millisecond, 1,
		mustSizes("64..1M:4"), 16, 32, "auto", "tcp"})
	o.out, o.figures, o.sendsList = "exsperf-sweep", []int{1, 2, 3, 4, 5}, []int{1, 2, 4, 8, 16, 32, 64}
	o.fig3Sizes = []int{64 << 10, 1 << 20}
	o.rtt, o.bandwidth, o.vwarmup, o.vduration, o.distOut = 48*time.Millisecond, 10e9, time.Second, 4*time.Second, 32
	fs.StringVar(&o.out, "out", o.out, "directory for sweep.md, sweep.json and the SVG figures ('' writes none)")
	fs.Var(intsFlag{&o.figures}, "figures", "which figures to produce (1-5; figures 1 and 2 share their runs, as do 3 and 4)")
	fs.Var(intsFlag{&o.sendsList}, "sends-list", "fig3/fig4: outstanding sends to try, with --recvs fixed")
	fs.Var(sizesFlag{&o.fig3Sizes}, "fig3-sizes", "fig3: the message sizes plotted against outstanding sends, one panel each (those in --sizes; the tables cover every size)")
	fs.DurationVar(&o.rtt, "rtt", o.rtt, "fig5: emulated round-trip time")
	fs.Var(bandwidthFlag{&o.bandwidth}, "bandwidth", "fig5: emulated link rate, decimal units (10G = 10 Gbit/s; 0 unlimited)")
	fs.DurationVar(&o.vwarmup, "vwarmup", o.vwarmup, "fig5: warm-up in emulated time")
	fs.DurationVar(&o.vduration, "vduration", o.vduration, "fig5: measured interval in emulated time")
	fs.IntVar(&o.distOut, "dist-outstanding", o.distOut, "fig5: outstanding sends and recvs")
	fs.IntVar(&o.distSends, "dist-sends", 0, "fig5: outstanding sends if not --dist-outstanding")
	fs.StringVar(&o.distStart, "dist-start", "together", "fig5: the sender starts together with the receiver (its ADVERTs still in flight) or adverts-first")
}

func mustSizes(s string) []int {
	v, err := parseSizes(s)
	if err != nil {
		panic(err)
	}
	return v
}

func (o *sweepOpts) want(fig int) bool { return slices.Contains(o.figures, fig) }

// fig3Modes are the modes figures 3 and 4 run: --modes, and dynamic for
// figure 4 if --modes leaves it out.
func (o *sweepOpts) fig3Modes() []dynproto.Mode {
	ms := slices.Clone(o.modes)
	if o.want(4) && !slices.Contains(ms, dynproto.Dynamic) {
		ms = append(ms, dynproto.Dynamic)
	}
	return ms
}

// fig3Plotted are the sizes of figure 3's panels: those of --fig3-sizes that
// are measured, or else the largest size measured.
func (o *sweepOpts) fig3Plotted() []int {
	var v []int
	for _, s := range o.fig3Sizes {
		if slices.Contains(o.sizes, s) && !slices.Contains(v, s) {
			v = append(v, s)
		}
	}
	if len(v) == 0 {
		v = append(v, slices.Max(o.sizes))
	}
	return v
}

func sendsRun(sends int) string { return "sends " + strconv.Itoa(sends) }

func runSweep(ctx context.Context, e *env, o *sweepOpts) error {
	if err := o.streamOpts.check(e); err != nil {
		return err
	}
	for _, f := range o.figures {
		if f < 1 || f > 5 {
			return usagef("--figures: no figure %d (want 1-5)", f)
		}
	}
	if o.want(5) {
		if err := durationOK("rtt", o.rtt, true); err != nil {
			return usageError{err}
		}
		if err := durationOK("vduration", o.vduration, false); err != nil {
			return usageError{err}
		}
		if o.distOut < 1 || o.distOut > 4096 || o.distSends < 0 || o.distSends > 4096 {
			return usagef("--dist-outstanding and --dist-sends must be between 1 and 4096")
		}
		if o.distStart != "together" && o.distStart != "adverts-first" {
			return usagef("--dist-start %q: want together or adverts-first", o.distStart)
		}
		if o.distSends == 0 {
			o.distSends = o.distOut
		}
	}
	for _, s := range o.sendsList {
		if s > 4096 {
			return usagef("--sends-list: %d is more than 4096", s)
		}
	}
	tr, err := openTransport(o.transport)
	if err != nil {
		return err
	}
	defer tr.Close()
	var tcp transport
	var notes []string
	if o.want(1) || o.want(2) {
		if tcp, notes, err = prepareTCP(o.tcp, &o.cc); err != nil {
			return err
		}
		if tcp != nil {
			defer tcp.Close()
		}
	}
	if o.out != "" {
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			return err
		}
	}
	host := readHost()
	link := linkParams{RTT: o.rtt, Bandwidth: o.bandwidth}
	rep := &report{Tool: "exsperf", Command: e.line, Host: host, Transport: tr.Name(), About: tr.Describe(), Notes: notes,
		Params: map[string]any{"sizes": o.sizes, "recvs": o.recvs, "fig1_sends": max(1, o.recvs/2), "fig3_sends": o.sendsList,
			"fig3_modes": modeNames(o.fig3Modes()), "fig3_plotted_sizes": o.fig3Plotted(),
			"ring": o.ring, "duration": o.duration.String(), "warmup": o.warmup.String(), "rounds": o.rounds, "seed": o.seed,
			"tcp_congestion_control": o.cc, "fig5_link": link.String(), "fig5_outstanding": o.distOut,
			"fig5_virtual_warmup": o.vwarmup.String(), "fig5_virtual_duration": o.vduration.String(), "fig5_start": o.distStart}}

	total := 0
	nAnchors := 2
	if tcp != nil {
		nAnchors++
	}
	if o.want(1) || o.want(2) {
		total += len(o.sizes) * (len(o.modes) + nAnchors) * o.rounds
	}
	if o.want(3) || o.want(4) {
		total += len(o.sizes) * len(o.fig3Modes()) * len(o.sendsList) * o.rounds
	}
	if o.want(5) {
		total += len(o.sizes) * len(o.modes)
	}
	prog := newProgress(e.stderr, o.quiet, total)
	defer prog.done()

	var md strings.Builder
	fmt.Fprintf(&md, "# exsperf sweep\n\n`%s`\n\nhost: %s\n\ntransport: %s: %s\n\n", e.line, host, tr.Name(), tr.Describe())
	fmt.Fprintf(&md, "stream buffer %s; %s\n\n", sizeName(o.ring), o.timing())
	for _, n := range notes {
		fmt.Fprintf(&md, "note: %s\n\n", n)
	}
	var figs []namedPlot
	var fmd strings.Builder // the figures, after the targets
	var fig1, fig5 *grid
	fig3 := newSendsGrid(o.sizes)

	// fig1 and fig2: sends = recvs/2, all modes, with anchors.
	if o.want(1) || o.want(2) {
		sends := max(1, o.recvs/2)
		var runs []string
		points := func(size int) []point {
			base := pairParams{Size: size, Sends: sends, Recvs: o.recvs, Ring: o.ring, Verify: o.verify, Seed: o.seed, CC: o.cc}
			var pts []point
			for _, m := range o.modes {
				p := base
				p.Mode = m
				pts = append(pts, point{run: m.String(), tr: tr, params: p})
			}
			pts = append(pts, copyAnchors(base)...)
			if tcp != nil {
				pts = append(pts, point{run: tcpRunName(tcp), tr: tcp, params: base})
			}
			return pts
		}
		for _, pt := range points(1) {
			runs = append(runs, pt.run)
		}
		fig1 = newGrid(o.sizes, runs)
		err := runStreams(ctx, prog, o.seed, o.rounds, o.warmup, o.duration, o.sizes, points, func(size int, pts []point, rs []result) {
			for i, pt := range pts {
				trName := "anchor"
				if pt.tr != nil {
					trName = pt.tr.Name()
				}
				rw := makeRow("fig1", trName, pt.run, pt.params, rs[i])
				rep.Stream = append(rep.Stream, rw)
				fig1.set(size, pt.run, rw)
			}
		})
		if err != nil {
			return err
		}
		sub := fmt.Sprintf("outstanding sends %d = 1/2 outstanding recvs %d", sends, o.recvs)
		if o.want(1) {
			fmt.Fprintf(&fmd, "## Figure 1: throughput (GB/s), %s\n\n", sub)
			fig1.table(&fmd, func(r row) string { return sig(r.GBps) })
			figs = append(figs, namedPlot{"fig1-throughput.svg", []*plot{fig1.plot("Throughput vs message size", sub+"; "+tr.Name(), "GB/s",
				func(r row) float64 { return r.GBps }, runs)}})
		}
		if o.want(2) {
			fmt.Fprintf(&fmd, "## Figure 2: CPU seconds per GB, sender / receiver, %s\n\n", sub)
			fig1.table(&fmd, func(r row) string {
				if r.CPUSend == nil && r.CPURecv == nil {
					return num(r.CPUTotal, 3) + " total"
				}
				return num(r.CPUSend, 3) + " / " + num(r.CPURecv, 3)
			})
			figs = append(figs, namedPlot{"fig2-cpu.svg", []*plot{fig1.cpuPlot(sub+"; "+tr.Name(), runs)}})
		}
	}

	// fig3 and fig4: every mode, recvs fixed, sends varied; fig4 shows the
	// dynamic mode's runs.
	if o.want(3) || o.want(4) {
		f3modes := o.fig3Modes()
		points := func(size int) []point {
			var pts []point
			for _, m := range f3modes {
				for _, s := range o.sendsList {
					pts = append(pts, point{run: m.String() + ", " + sendsRun(s), tr: tr,
						params: pairParams{Mode: m, Size: size, Sends: s, Recvs: o.recvs, Ring: o.ring, Verify: o.verify, Seed: o.seed}})
				}
			}
			return pts
		}
		var runs []string
		for _, s := range o.sendsList {
			runs = append(runs, sendsRun(s))
		}
		direct := newGrid(o.sizes, runs) // fig4: the dynamic runs by sends
		err := runStreams(ctx, prog, o.seed, o.rounds, o.warmup, o.duration, o.sizes, points, func(size int, pts []point, rs []result) {
			for i, pt := range pts {
				rw := makeRow("fig3", pt.tr.Name(), pt.params.Mode.String(), pt.params, rs[i])
				rep.Stream = append(rep.Stream, rw)
				fig3.set(size, pt.params.Mode.String(), pt.params.Sends, rw)
				if pt.params.Mode == dynproto.Dynamic {
					direct.set(size, sendsRun(pt.params.Sends), rw)
				}
			}
		})
		if err != nil {
			return err
		}
		if o.want(3) {
			sub := fmt.Sprintf("outstanding recvs fixed at %d", o.recvs)
			fmt.Fprintf(&fmd, "## Figure 3: throughput (GB/s), %s, outstanding sends varied\n\n", sub)
			fig3.table(&fmd, f3modes, o.sendsList)
			var ps []*plot
			for _, size := range o.fig3Plotted() {
				ps = append(ps, fig3.plot(size, f3modes, o.sendsList, sub+"; "+tr.Name()))
			}
			figs = append(figs, namedPlot{"fig3-sends.svg", ps})
		}
		if o.want(4) {
			sub := fmt.Sprintf("dynamic only; outstanding recvs fixed at %d", o.recvs)
			fmt.Fprintf(&fmd, "## Figure 4: percent of bytes sent directly, %s\n\n", sub)
			fmt.Fprintf(&fmd, "The dynamic mode's runs of figure 3: direct-only sends every byte directly and indirect-only none.\n\n")
			direct.table(&fmd, func(r row) string { return num(r.PctDirect, 1) })
			p := direct.plot("Percent of bytes sent directly (dynamic)", sub+"; "+tr.Name(), "% direct",
				func(r row) float64 {
					if r.PctDirect == nil {
						return math.NaN()
					}
					return *r.PctDirect
				}, runs)
			p.yMax = 100
			figs = append(figs, namedPlot{"fig4-direct.svg", []*plot{p}})
		}
	}

	// fig5: distance, on the engine over an emulated link.
	if o.want(5) {
		dist := engineTransport{}
		var runs []string
		for _, m := range o.modes {
			runs = append(runs, m.String())
		}
		points := func(size int) []point {
			var pts []point
			for _, m := range o.modes {
				pts = append(pts, point{run: m.String(), tr: dist,
					params: pairParams{Mode: m, Size: size, Sends: o.distSends, Recvs: o.distOut, Ring: o.ring, Link: &link, AdvertsFirst: o.distStart == "adverts-first"}})
			}
			return pts
		}
		fig5 = newGrid(o.sizes, runs)
		err := runStreams(ctx, prog, o.seed, 1, o.vwarmup, o.vduration, o.sizes, points, func(size int, pts []point, rs []result) {
			for i, pt := range pts {
				rw := makeRow("fig5", "engine+link", pt.run, pt.params, rs[i])
				rep.Stream = append(rep.Stream, rw)
				fig5.set(size, pt.run, rw)
			}
		})
		if err != nil {
			return err
		}
		sub := fmt.Sprintf("%s; outstanding sends %d, recvs %d; stream buffer %s", link, o.distSends, o.distOut, sizeName(o.ring))
		fmt.Fprintf(&fmd, "## Figure 5: throughput over distance (Mbit/s), %s\n\n", sub)
		fmt.Fprintf(&fmd, "The engine transport over an emulated link in virtual time (%v warm-up, %v measured; the sender starts %s); the window bound min(link, %d x size / RTT) for reference.\n\n",
			o.vwarmup, o.vduration, map[string]string{"together": "together with the receiver", "adverts-first": "once the first ADVERTs have arrived"}[o.distStart], min(o.distOut, o.distSends))
		bound := func(size int) float64 {
			b := math.Inf(1)
			if o.rtt > 0 {
				b = float64(min(o.distOut, o.distSends)*size) * 8 / o.rtt.Seconds() / 1e6
			}
			if o.bandwidth > 0 {
				b = math.Min(b, o.bandwidth/1e6)
			}
			return b
		}
		fig5.extra = append(fig5.extra, extraCol{"window bound", bound})
		mbit := func(r row) float64 { return r.GBps * 8e3 }
		fig5.table(&fmd, func(r row) string { return sig(mbit(r)) })
		p := fig5.plot("Throughput over distance", sub, "Mbit/s", mbit, runs)
		p.logY = true
		var xs, ys []float64
		for _, s := range o.sizes {
			if b := bound(s); !math.IsInf(b, 0) {
				xs, ys = append(xs, float64(s)), append(ys, b)
			}
		}
		p.series = append(p.series, series{name: "window bound", xs: xs, ys: ys, color: "#777", dash: "6 4"})
		figs = append(figs, namedPlot{"fig5-distance.svg", []*plot{p}})
	}
	prog.done()

	tcpRun := ""
	if tcp != nil {
		tcpRun = tcpRunName(tcp)
	}
	rep.Targets = sweepTargets(o, fig1, fig3, fig5, tcpRun)
	rep.Targets.write(&md)
	md.WriteString(fmd.String())
	fmt.Fprintf(&md, "CPU s/GB: CPU seconds per GB received. %% direct: share of payload bytes sent by direct transfers.\n")
	if tr.Name() == "engine" {
		fmt.Fprintf(&md, "The socket API (exs over verbs) is not measured yet: figures 1-4 measure the protocol engine alone.\n")
	}
	out := e.stdout
	if o.json == "-" {
		out = io.Discard
	}
	io.WriteString(out, md.String())
	if o.out != "" {
		if err := os.WriteFile(filepath.Join(o.out, "sweep.md"), []byte(md.String()), 0o644); err != nil {
			return err
		}
		if err := writeJSON(filepath.Join(o.out, "sweep.json"), e.stdout, rep); err != nil {
			return err
		}
		for _, f := range figs {
			if err := os.WriteFile(filepath.Join(o.out, f.file), panels(f.ps), 0o644); err != nil {
				return err
			}
		}
		fmt.Fprintf(out, "\nwrote %s: sweep.md, sweep.json", o.out)
		for _, f := range figs {
			fmt.Fprintf(out, ", %s", f.file)
		}
		fmt.Fprintln(out)
	}
	if o.json != "" {
		return writeJSON(o.json, e.stdout, rep)
	}
	return nil
}

// namedPlot is an SVG file of one plot or of panels stacked.
type namedPlot struct {
	file string
	ps   []*plot
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
		cells := []string{sizeName(s)}
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

func runStyle(run string) (color, dash string) {
	switch {
	case run == runCopy1:
		return "#000", "2 3"
	case run == runCopy2:
		return "#888", "2 3"
	case run == runCopy2C:
		return "#555", "6 3"
	case strings.HasPrefix(run, "TCP"):
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
			cells := []string{sizeName(size), m.String()}
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
	p := &plot{title: "Throughput vs outstanding sends, " + sizeName(size) + " messages", note: note,
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
