package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/exsgo/exs/cmd/exsperf/internal/measure"
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
	o.streamOpts.register(fs, streamDefaults{300 * time.Millisecond, 100 * time.Millisecond, 0, 1,
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

// wantAny reports whether any of figs is wanted.
func (o *sweepOpts) wantAny(figs []int) bool { return slices.ContainsFunc(figs, o.want) }

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

// fig1Sends is figure 1's outstanding sends: half the outstanding recvs.
func (o *sweepOpts) fig1Sends() int { return max(1, o.recvs/2) }

func (o *sweepOpts) link() measure.Link { return measure.Link{RTT: o.rtt, Bandwidth: o.bandwidth} }

func sendsRun(sends int) string { return "sends " + strconv.Itoa(sends) }

// check checks the flags and completes them: --dist-sends is
// --dist-outstanding unless set.
func (o *sweepOpts) check(e *env) error {
	if err := o.streamOpts.check(e); err != nil {
		return err
	}
	for _, f := range o.figures {
		if f < 1 || f > 5 {
			return usagef("--figures: no figure %d (want 1-5)", f)
		}
	}
	if o.want(5) {
		if err := o.checkDistance(); err != nil {
			return err
		}
	}
	for _, s := range o.sendsList {
		if s > 4096 {
			return usagef("--sends-list: %d is more than 4096", s)
		}
	}
	return nil
}

// checkDistance checks figure 5's flags.
func (o *sweepOpts) checkDistance() error {
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
	return nil
}

// A sweepStage is a set of runs that figures share: figures 1 and 2 are
// drawn from the runs of stage fig1, figures 3 and 4 from those of fig3.
// Each stage measures its points at every size, in rounds, and reports
// each point as a row labelled with the stage's name.
type sweepStage struct {
	name      string // the rows' figure
	figures   []int  // the stage runs if one of these is wanted
	rounds    int
	warmup, d time.Duration
	points    func(size int) []measure.Point
	row       func(pt measure.Point, r measure.Result) row
}

// stages are the sweep's stages, in the order they run: tr is the
// transport measured, tcp the TCP anchor (nil if off).
func (o *sweepOpts) stages(tr, tcp measure.Transport) []sweepStage {
	link := o.link()
	return []sweepStage{{
		// fig1 and fig2: sends = recvs/2, all modes, with anchors.
		name: "fig1", figures: []int{1, 2}, rounds: o.rounds, warmup: o.warmup, d: o.duration,
		points: func(size int) []measure.Point {
			base := measure.Params{Size: size, Sends: o.fig1Sends(), Recvs: o.recvs, Ring: o.ring, Verify: o.verify, Reuse: o.reuse, Seed: o.seed, CC: o.cc}
			pts := measure.ModePoints(tr, o.modes, base)
			pts = append(pts, measure.CopyAnchors(base)...)
			if tcp != nil {
				pts = append(pts, measure.Point{Run: measure.TCPRunName(tcp), Tr: tcp, Params: base})
			}
			return pts
		},
		row: func(pt measure.Point, r measure.Result) row {
			return makeRow("fig1", pt.TransportName(), pt.Run, pt.Params, r)
		},
	}, {
		// fig3 and fig4: every mode, recvs fixed, sends varied; fig4 shows
		// the dynamic mode's runs.
		name: "fig3", figures: []int{3, 4}, rounds: o.rounds, warmup: o.warmup, d: o.duration,
		points: func(size int) []measure.Point {
			var pts []measure.Point
			for _, m := range o.fig3Modes() {
				for _, s := range o.sendsList {
					pts = append(pts, measure.Point{Run: m.String() + ", " + sendsRun(s), Tr: tr,
						Params: measure.Params{Mode: m, Size: size, Sends: s, Recvs: o.recvs, Ring: o.ring, Verify: o.verify, Reuse: o.reuse, Seed: o.seed}})
				}
			}
			return pts
		},
		row: func(pt measure.Point, r measure.Result) row {
			return makeRow("fig3", pt.Tr.Name(), pt.Params.Mode.String(), pt.Params, r)
		},
	}, {
		// fig5: distance, on the engine over an emulated link, in
		// virtual time: one round.
		name: "fig5", figures: []int{5}, rounds: 1, warmup: o.vwarmup, d: o.vduration,
		points: func(size int) []measure.Point {
			base := measure.Params{Size: size, Sends: o.distSends, Recvs: o.distOut, Ring: o.ring, Link: &link, AdvertsFirst: o.distStart == "adverts-first", Reuse: o.reuse}
			return measure.ModePoints(measure.Engine{}, o.modes, base)
		},
		row: func(pt measure.Point, r measure.Result) row {
			return makeRow("fig5", "engine+link", pt.Run, pt.Params, r)
		},
	}}
}

func runSweep(ctx context.Context, e *env, o *sweepOpts) error {
	if err := o.check(e); err != nil {
		return err
	}
	anchor := o.tcp
	if !o.want(1) && !o.want(2) {
		anchor = "off" // only figures 1 and 2 have anchors
	}
	ts, err := openTransports(o.transport, anchor, &o.cc)
	if err != nil {
		return err
	}
	defer ts.close()
	tr, tcp, notes := ts.tr, ts.tcp, ts.notes
	if o.out != "" {
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			return err
		}
	}
	rep := o.report(e, tr, notes)
	if err := o.measure(ctx, e, o.stages(tr, tcp), rep); err != nil {
		return err
	}
	v := newSweepView(o, rep)
	rep.Targets = sweepTargets(o, v.fig1, v.fig3, v.fig5, v.tcpRun)
	md, figs := renderSweep(o, rep, v)
	return o.write(e, rep, md, figs)
}

// report starts the sweep's report: what is measured, where and how.
func (o *sweepOpts) report(e *env, tr measure.Transport, notes []string) *report {
	return newReport(e, tr, append(notes, o.bufferNotes()...), map[string]any{"sizes": o.sizes, "reuse": o.reuse, "recvs": o.recvs, "fig1_sends": o.fig1Sends(), "fig3_sends": o.sendsList,
		"fig3_modes": modeNames(o.fig3Modes()), "fig3_plotted_sizes": o.fig3Plotted(),
		"ring": o.ring, "duration": o.duration.String(), "warmup": o.warmup.String(), "rounds": o.rounds, "seed": o.seed,
		"tcp_congestion_control": o.cc, "fig5_link": o.link().String(), "fig5_outstanding": o.distOut,
		"fig5_virtual_warmup": o.vwarmup.String(), "fig5_virtual_duration": o.vduration.String(), "fig5_start": o.distStart})
}

// measure runs the stages that the wanted figures need, in order, and
// appends their rows to rep.
func (o *sweepOpts) measure(ctx context.Context, e *env, stages []sweepStage, rep *report) error {
	total := 0
	for _, st := range stages {
		if o.wantAny(st.figures) {
			total += len(o.sizes) * len(st.points(1)) * st.rounds
		}
	}
	prog := newProgress(e.stderr, o.quiet, total)
	defer prog.done()
	for _, st := range stages {
		if !o.wantAny(st.figures) {
			continue
		}
		// The emulated link's warm-up is fixed, in virtual time.
		sched := measure.Schedule{Seed: o.seed, Rounds: st.rounds, Warmup: st.warmup, MaxWarmup: o.maxWarmup, Duration: st.d, Step: prog.step}
		err := sched.Run(ctx, o.sizes, st.points, func(size int, pts []measure.Point, rs []measure.Result) {
			for i, pt := range pts {
				rep.Stream = append(rep.Stream, st.row(pt, rs[i]))
			}
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// write prints the markdown (unless the JSON goes to stdout) and writes
// sweep.md, sweep.json and the figures into --out, and the JSON to --json.
func (o *sweepOpts) write(e *env, rep *report, md string, figs []namedPlot) error {
	out := e.stdout
	if o.json == "-" {
		out = io.Discard
	}
	io.WriteString(out, md)
	if o.out != "" {
		if err := os.WriteFile(filepath.Join(o.out, "sweep.md"), []byte(md), 0o644); err != nil {
			return err
		}
		if err := writeJSON(filepath.Join(o.out, "sweep.json"), e.stdout, rep); err != nil {
			return err
		}
		files := []string{"sweep.md", "sweep.json"}
		for _, f := range figs {
			if err := os.WriteFile(filepath.Join(o.out, f.file), panels(f.ps), 0o644); err != nil {
				return err
			}
			files = append(files, f.file)
		}
		fmt.Fprintf(out, "\nwrote %s: %s\n", o.out, strings.Join(files, ", "))
	}
	if o.json != "" {
		return writeJSON(o.json, e.stdout, rep)
	}
	return nil
}
