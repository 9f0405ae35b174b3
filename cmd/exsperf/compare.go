package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/exsgo/exs/dynproto"
)

// A point is one measurement of a stream table: a mode on the transport, or
// an anchor.
type point struct {
	run    string
	tr     transport // nil for the copy anchors
	copies int       // 1 or 2 for the copy anchors
	cross  bool      // the two copies on two CPUs (crossCopyAnchor)
	params pairParams
}

// measure runs one point.
func measure(ctx context.Context, pt point, warmup, d time.Duration) (result, error) {
	if pt.tr == nil {
		if pt.cross {
			return crossCopyAnchor(ctx, pt.params.Size, pt.params.Sends, pt.params.Recvs, pt.params.Ring, warmup, d)
		}
		return copyAnchor(ctx, pt.copies, pt.params.Size, pt.params.Sends, pt.params.Recvs, pt.params.Ring, warmup, d)
	}
	pr, err := pt.tr.Open(ctx, pt.params)
	if err != nil {
		return result{}, err
	}
	r, err := pr.Stream(ctx, warmup, d)
	return r, errors.Join(err, pr.Close())
}

// anchors are the names of the anchor runs, in table order.
const (
	runCopy1  = "copy() x1"
	runCopy2  = "copy() x2"
	runCopy2C = "copy() x2, 2 CPUs"
)

// copyAnchors are the points of the three copy anchors.
func copyAnchors(base pairParams) []point {
	return []point{{run: runCopy1, copies: 1, params: base}, {run: runCopy2, copies: 2, params: base},
		{run: runCopy2C, copies: 2, cross: true, params: base}}
}

// copyNote says what the copy anchors are.
const copyNote = "copy() x1 and x2: the same send and recv buffers copied once, or twice through a ring of the stream buffer's size, on one thread; copy() x2, 2 CPUs: the two copies made by two threads bound to two CPUs, one into the ring and one out of it, as the two ends of an indirect transfer make them"

func tcpRunName(t transport) string {
	if t.Name() == "tcp-proc" {
		return "TCP (2 processes)"
	}
	return "TCP"
}

// prepareTCP opens the TCP anchor named by which ("off" gives nil) and
// checks that the congestion control can be set, falling back to the
// system's default with a note if not.
func prepareTCP(which string, cc *string) (transport, []string, error) {
	if which == "off" {
		return nil, nil, nil
	}
	t, err := openTransport(which)
	if err != nil {
		return nil, nil, err
	}
	sys := systemCongestion()
	var notes []string
	if *cc != "" {
		if err := probeCongestion(*cc); err != nil {
			notes = append(notes, fmt.Sprintf("could not set TCP congestion control %s (%v): using the system default %s", *cc, err, sys))
			*cc = ""
		}
	}
	if *cc != "" {
		notes = append(notes, fmt.Sprintf("TCP over loopback with congestion control %s, set per socket with TCP_CONGESTION (system default: %s)", *cc, sys))
	} else {
		notes = append(notes, fmt.Sprintf("TCP over loopback with the system's congestion control %s", sys))
	}
	return t, notes, nil
}

func probeCongestion(cc string) error {
	lc := net.ListenConfig{Control: congestionControl(cc)}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	return ln.Close()
}

// runStreams measures the points of each size in rounds and calls emit with
// a size's results, in the order given, once all of them are measured. Each
// round measures every point once, in an order shuffled with seed, so that
// drift in the machine's speed spreads over all points; each point's result
// is its median round by throughput, carrying the rounds' range.
func runStreams(ctx context.Context, prog *progress, seed int64, rounds int, warmup, d time.Duration, sizes []int, pointsFor func(size int) []point, emit func(size int, pts []point, rs []result)) error {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x657873706572))
	for _, size := range sizes {
		pts := pointsFor(size)
		all := make([][]result, len(pts))
		for range rounds {
			for _, i := range rng.Perm(len(pts)) {
				prog.step(fmt.Sprintf("%s %s", sizeName(size), pts[i].run))
				r, err := measure(ctx, pts[i], warmup, d)
				if err != nil {
					return fmt.Errorf("%s %s: %w", sizeName(size), pts[i].run, err)
				}
				all[i] = append(all[i], r)
			}
		}
		rs := make([]result, len(pts))
		for i := range pts {
			rs[i] = median(all[i])
		}
		emit(size, pts, rs)
	}
	return nil
}

// median returns the result with the median throughput, with the range of
// all the rounds' throughputs.
func median(rs []result) result {
	sorted := slices.Clone(rs)
	slices.SortFunc(sorted, func(a, b result) int { return cmp.Compare(a.gbps(), b.gbps()) })
	m := sorted[(len(sorted)-1)/2]
	m.Rounds, m.MinGBps, m.MaxGBps = len(rs), sorted[0].gbps(), sorted[len(sorted)-1].gbps()
	m.RoundGBps = nil
	for _, r := range rs {
		m.RoundGBps = append(m.RoundGBps, r.gbps())
	}
	return m
}

func runCompare(ctx context.Context, e *env, o *streamOpts, engineOnly bool) error {
	if err := o.check(e); err != nil {
		return err
	}
	tr, err := openTransport(o.transport)
	if err != nil {
		return err
	}
	defer tr.Close()
	tcp, notes, err := prepareTCP(o.tcp, &o.cc)
	if err != nil {
		return err
	}
	if tcp != nil {
		defer tcp.Close()
	}
	host := readHost()
	rep := &report{Tool: "exsperf", Command: e.line, Host: host, Transport: tr.Name(), About: tr.Describe(),
		Params: map[string]any{"sizes": o.sizes, "sends": o.sends, "recvs": o.recvs, "ring": o.ring,
			"duration": o.duration.String(), "warmup": o.warmup.String(), "rounds": o.rounds, "seed": o.seed, "tcp_congestion_control": o.cc}}
	rep.Notes = append(notes, copyNote)
	out := e.stdout
	if o.json == "-" {
		out = io.Discard
	}
	title := "exsperf: direct-only, indirect-only and dynamic against the memory-copy limit and TCP"
	if engineOnly {
		title = "exsperf engine: the protocol engine alone, against the memory-copy limit"
	}
	fmt.Fprintln(out, title)
	fmt.Fprintf(out, "host: %s\n", host)
	fmt.Fprintf(out, "transport: %s: %s\n", tr.Name(), tr.Describe())
	rep.Notes = append(rep.Notes, transportNotes(tr)...)
	fmt.Fprintf(out, "outstanding sends %d, recvs %d; stream buffer %s; %s\n", o.sends, o.recvs, sizeName(o.ring), o.timing())
	for _, n := range rep.Notes {
		fmt.Fprintf(out, "note: %s\n", n)
	}
	fmt.Fprintln(out)
	t := &table{
		head:  []string{"size", "run", "GB/s", "range", "x copy()", "x TCP", "% direct", "CPU s/GB send", "CPU s/GB recv", "CPU s/GB total"},
		align: []bool{true, false, true, true, true, true, true, true, true, true},
	}
	if tcp == nil {
		t.head = slices.Delete(t.head, 5, 6)
		t.align = t.align[:len(t.head)]
	}
	// Print the header now and rows as sizes complete.
	hdr := *t
	hdr.write(out)
	points := func(size int) []point {
		base := pairParams{Size: size, Sends: o.sends, Recvs: o.recvs, Ring: o.ring, Verify: o.verify, Seed: o.seed, CC: o.cc}
		pts := copyAnchors(base)
		if tcp != nil {
			pts = append(pts, point{run: tcpRunName(tcp), tr: tcp, params: base})
		}
		for _, m := range o.modes {
			p := base
			p.Mode = m
			pts = append(pts, point{run: m.String(), tr: tr, params: p})
		}
		return pts
	}
	nPoints := len(points(1))
	prog := newProgress(e.stderr, o.quiet, len(o.sizes)*nPoints*o.rounds)
	err = runStreams(ctx, prog, o.seed, o.rounds, o.warmup, o.duration, o.sizes, points, func(size int, pts []point, rs []result) {
		var copyRate, tcpRate float64
		for i, pt := range pts {
			if pt.run == runCopy1 {
				copyRate = rs[i].gbps()
			}
			if tcp != nil && pt.tr == tcp {
				tcpRate = rs[i].gbps()
			}
		}
		t.rows = nil
		for i, pt := range pts {
			trName := "anchor"
			if pt.tr != nil {
				trName = pt.tr.Name()
			}
			rw := makeRow("compare", trName, pt.run, pt.params, rs[i])
			rep.Stream = append(rep.Stream, rw)
			cells := []string{sizeName(size), pt.run, sig(rw.GBps), spread(rw), ratio(rw.GBps, copyRate)}
			if tcp != nil {
				cells = append(cells, ratio(rw.GBps, tcpRate))
			}
			cells = append(cells, num(rw.PctDirect, 0), num(rw.CPUSend, 3), num(rw.CPURecv, 3), num(rw.CPUTotal, 3))
			t.add(cells...)
		}
		prog.clear()
		for _, r := range t.rows {
			fmt.Fprintf(out, "| %s |\n", strings.Join(r, " | "))
		}
	})
	prog.done()
	if err != nil {
		return err
	}
	fmt.Fprintln(out)
	if n := pathNotes(tr); len(n) > 0 {
		rep.Notes = append(rep.Notes, n...)
		for _, l := range n {
			fmt.Fprintf(out, "path: %s\n", l)
		}
	}
	fmt.Fprintln(out, "GB/s: the median round, range: the lowest and highest round; x copy(), x TCP: the median as a multiple of the copy() x1 and TCP rows of the same size.")
	fmt.Fprintln(out, "CPU s/GB: CPU seconds per GB received; '-' where a side's time cannot be told apart.")
	if !engineOnly && tr.Name() == "engine" {
		fmt.Fprintln(out, "The socket API (exs over verbs) is not measured yet: this run measures the protocol engine alone.")
	}
	if o.json != "" {
		return writeJSON(o.json, e.stdout, rep)
	}
	return nil
}

// pathNotes says, after the measurements, how a transport that crosses
// processes moved the bytes (from its provider's statistics).
func pathNotes(t transport) []string {
	if p, ok := t.(*exsProcTransport); ok {
		return p.notes()
	}
	return nil
}

func spread(r row) string {
	if r.Rounds < 2 {
		return "-"
	}
	return sig(r.MinGBps) + ".." + sig(r.MaxGBps)
}

func ratio(v, base float64) string {
	if base <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v/base)
}

func runRate(ctx context.Context, e *env, o *streamOpts) error {
	if err := o.check(e); err != nil {
		return err
	}
	tr, err := openTransport(o.transport)
	if err != nil {
		return err
	}
	defer tr.Close()
	tcp, notes, err := prepareTCP(o.tcp, &o.cc)
	if err != nil {
		return err
	}
	if tcp != nil {
		defer tcp.Close()
	}
	host := readHost()
	rep := &report{Tool: "exsperf", Command: e.line, Host: host, Transport: tr.Name(), About: tr.Describe(), Notes: notes,
		Params: map[string]any{"sizes": o.sizes, "sends": o.sends, "recvs": o.recvs, "ring": o.ring,
			"duration": o.duration.String(), "warmup": o.warmup.String(), "rounds": o.rounds, "seed": o.seed}}
	out := e.stdout
	if o.json == "-" {
		out = io.Discard
	}
	fmt.Fprintln(out, "exsperf rate: message rate")
	fmt.Fprintf(out, "host: %s\ntransport: %s: %s\n", host, tr.Name(), tr.Describe())
	fmt.Fprintf(out, "outstanding sends %d, recvs %d; %s\n", o.sends, o.recvs, o.timing())
	for _, n := range notes {
		fmt.Fprintf(out, "note: %s\n", n)
	}
	fmt.Fprintln(out)
	t := &table{head: []string{"size", "run", "M msg/s", "GB/s", "% direct", "CPU us/msg total"}, align: []bool{true, false, true, true, true, true}}
	hdr := *t
	hdr.write(out)
	points := func(size int) []point {
		base := pairParams{Size: size, Sends: o.sends, Recvs: o.recvs, Ring: o.ring, Verify: o.verify, Seed: o.seed, CC: o.cc}
		var pts []point
		if tcp != nil {
			pts = append(pts, point{run: tcpRunName(tcp), tr: tcp, params: base})
		}
		for _, m := range o.modes {
			p := base
			p.Mode = m
			pts = append(pts, point{run: m.String(), tr: tr, params: p})
		}
		return pts
	}
	prog := newProgress(e.stderr, o.quiet, len(o.sizes)*len(points(1))*o.rounds)
	err = runStreams(ctx, prog, o.seed, o.rounds, o.warmup, o.duration, o.sizes, points, func(size int, pts []point, rs []result) {
		prog.clear()
		for i, pt := range pts {
			rw := makeRow("rate", pt.tr.Name(), pt.run, pt.params, rs[i])
			rep.Stream = append(rep.Stream, rw)
			perMsg := "-"
			if rs[i].CPUTotal >= 0 && rs[i].Msgs > 0 {
				perMsg = sig(float64(rs[i].CPUTotal) / 1e3 / float64(rs[i].Msgs))
			}
			fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s |\n", sizeName(size), pt.run, sig(rw.MsgsPerS/1e6), sig(rw.GBps), num(rw.PctDirect, 0), perMsg)
		}
	})
	prog.done()
	if err != nil {
		return err
	}
	if o.json != "" {
		return writeJSON(o.json, e.stdout, rep)
	}
	return nil
}

var _ = dynproto.Dynamic

// trName is the name of the point's transport, "anchor" for the copy
// anchors.
func (pt point) trName() string {
	if pt.tr == nil {
		return "anchor"
	}
	return pt.tr.Name()
}
