package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/exsgo/exs/cmd/exsperf/internal/measure"
)

// transports are what a command measures on: a transport and the TCP
// anchor (nil if off), with what there is to say of the anchor.
type transports struct {
	tr, tcp measure.Transport
	notes   []string
}

// openTransports opens the transport called name and the TCP anchor called
// which (prepareTCP).
func openTransports(name, which string, cc *string) (*transports, error) {
	tr, err := openTransport(name)
	if err != nil {
		return nil, err
	}
	tcp, notes, err := prepareTCP(which, cc)
	if err != nil {
		tr.Close()
		return nil, err
	}
	return &transports{tr: tr, tcp: tcp, notes: notes}, nil
}

// close closes the anchor and then the transport.
func (ts *transports) close() {
	if ts.tcp != nil {
		ts.tcp.Close()
	}
	ts.tr.Close()
}

// prepareTCP opens the TCP anchor named by which ("off" gives nil) and
// checks that the congestion control can be set, falling back to the
// system's default with a note if not.
func prepareTCP(which string, cc *string) (measure.Transport, []string, error) {
	if which == "off" {
		return nil, nil, nil
	}
	t, err := openTransport(which)
	if err != nil {
		return nil, nil, err
	}
	sys := measure.SystemCongestion()
	var notes []string
	if *cc != "" {
		if err := measure.ProbeCongestion(*cc); err != nil {
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

// openStream checks o and opens its transports and what runs beside them,
// for runCompare and runRate.
func openStream(ctx context.Context, e *env, o *streamOpts) (*transports, *beside, error) {
	if err := o.check(e); err != nil {
		return nil, nil, err
	}
	ts, err := openTransports(o.transport, o.tcp, &o.cc)
	if err != nil {
		return nil, nil, err
	}
	bs, err := openBeside(ctx, o)
	if err != nil {
		ts.close()
		return nil, nil, err
	}
	return ts, bs, nil
}

// closeStream closes what openStream opened.
func closeStream(ts *transports, bs *beside) {
	bs.close()
	ts.close()
}

// params are the report's parameters of a run with o.
func (o *streamOpts) params() map[string]any {
	return map[string]any{"sizes": o.sizes, "sends": o.sends, "recvs": o.recvs, "ring": o.ring,
		"duration": o.duration.String(), "warmup": o.warmup.String(), "warmup_max": o.maxWarmup.String(), "rounds": o.rounds, "seed": o.seed,
		"neighbour": o.neighbour, "reuse": o.reuse}
}

// reuseNote is the report's note on the buffers of a run with --reuse.
const reuseNote = "buffers: one send buffer for every outstanding send and one recv buffer for every outstanding recv (--reuse), as ucx_perftest uses them, in the exs and TCP runs and the copy() anchors; without --reuse each outstanding operation has its own"

// bufferNotes are the report's notes on the buffers.
func (o *streamOpts) bufferNotes() []string {
	if o.reuse {
		return []string{reuseNote}
	}
	return nil
}

func runCompare(ctx context.Context, e *env, o *streamOpts, engineOnly bool) error {
	ts, bs, err := openStream(ctx, e, o)
	if err != nil {
		return err
	}
	defer closeStream(ts, bs)
	tr, tcp := ts.tr, ts.tcp
	params := o.params()
	params["tcp_congestion_control"] = o.cc
	rep := newReport(e, tr, nil, params)
	rep.Notes = append(append(append(ts.notes, measure.CopyNote), bs.notes...), o.bufferNotes()...)
	out := e.stdout
	if o.json == "-" {
		out = io.Discard
	}
	title := "exsperf: direct-only, indirect-only and dynamic against the memory-copy limit, TCP and UCX"
	if engineOnly {
		title = "exsperf engine: the protocol engine alone, against the memory-copy limit"
	}
	fmt.Fprintln(out, title)
	fmt.Fprintf(out, "host: %s\n", rep.Host)
	fmt.Fprintf(out, "transport: %s: %s\n", tr.Name(), tr.Describe())
	rep.Notes = append(rep.Notes, measure.Notes(tr)...)
	fmt.Fprintf(out, "outstanding sends %d, recvs %d; stream buffer %s; %s\n", o.sends, o.recvs, measure.SizeName(o.ring), o.timing())
	for _, n := range rep.Notes {
		fmt.Fprintf(out, "note: %s\n", n)
	}
	fmt.Fprintln(out)
	cols := compareCols{tcp: tcp, ucx: bs.ucx != nil}
	// Print the header now and rows as sizes complete.
	cols.table().write(out)
	points := func(size int) []measure.Point {
		base := measure.Params{Size: size, Sends: o.sends, Recvs: o.recvs, Ring: o.ring, Verify: o.verify, Reuse: o.reuse, Seed: o.seed, CC: o.cc}
		pts := measure.CopyAnchors(base)
		if tcp != nil {
			pts = append(pts, measure.Point{Run: measure.TCPRunName(tcp), Tr: tcp, Params: base})
		}
		pts = append(pts, bs.ucxPoints(base)...)
		return append(pts, measure.ModePoints(tr, o.modes, base)...)
	}
	prog := newProgress(e.stderr, o.quiet, countPoints(o.sizes, points)*o.rounds)
	var warm warmups
	var ul ucxLines
	err = o.schedule(prog).Run(ctx, o.sizes, points, func(size int, pts []measure.Point, rs []measure.Result) {
		for i, pt := range pts {
			warm.add(size, pt, rs[i])
		}
		ul.add(size, pts, rs)
		rows, cells := cols.rows(size, pts, rs)
		rep.Stream = append(rep.Stream, rows...)
		prog.clear()
		for _, c := range cells {
			fmt.Fprintf(out, "| %s |\n", strings.Join(c, " | "))
		}
	})
	prog.done()
	if err != nil {
		return err
	}
	fmt.Fprintln(out)
	var after []string
	if o.steady() {
		after = append(after, warm.line(o.maxWarmup))
	}
	after = append(after, bs.close())
	for _, l := range measure.PathNotes(tr) {
		after = append(after, "path: "+l)
	}
	for _, l := range after {
		if l != "" {
			rep.Notes = append(rep.Notes, l)
			fmt.Fprintln(out, l)
		}
	}
	ul.write(out)
	fmt.Fprintln(out, "GB/s: the median round, range: the lowest and highest round; x copy(), x TCP, x UCX: the median as a multiple of the copy() x1, TCP and UCX tag_bw rows of the same size.")
	fmt.Fprintln(out, "CPU s/GB: CPU seconds per GB received; '-' where a side's time cannot be told apart.")
	if !engineOnly && tr.Name() == "engine" {
		fmt.Fprintln(out, "The socket API (exs over verbs) is not measured yet: this run measures the protocol engine alone.")
	}
	if o.json != "" {
		return writeJSON(o.json, e.stdout, rep)
	}
	return nil
}

// countPoints is the number of points of sizes.
func countPoints(sizes []int, points func(size int) []measure.Point) int {
	n := 0
	for _, s := range sizes {
		n += len(points(s))
	}
	return n
}

// compareCols are the anchors a compare table has columns for.
type compareCols struct {
	tcp measure.Transport // nil: no TCP anchor
	ucx bool              // the UCX anchor ran
}

// table is the table's header.
func (cc compareCols) table() *table {
	t := &table{head: []string{"size", "run", "GB/s", "range", "x copy()"}, align: []bool{true, false, true, true, true}}
	if cc.tcp != nil {
		t.head = append(t.head, "x TCP")
	}
	if cc.ucx {
		t.head = append(t.head, "x UCX")
	}
	t.head = append(t.head, "% direct", "CPU s/GB send", "CPU s/GB recv", "CPU s/GB total")
	for len(t.align) < len(t.head) {
		t.align = append(t.align, true)
	}
	return t
}

// rows are the rows of one size's results and the cells of those in the
// table: each throughput also as a multiple of copy() x1's and, with
// those anchors, of TCP's and of UCX tag_bw's. A latency anchor's row is
// not in the table (see ucxLines).
func (cc compareCols) rows(size int, pts []measure.Point, rs []measure.Result) ([]row, [][]string) {
	var copyRate, tcpRate, ucxRate float64
	for i, pt := range pts {
		switch {
		case pt.Run == measure.RunCopy1:
			copyRate = rs[i].GBps()
		case cc.tcp != nil && pt.Tr == cc.tcp:
			tcpRate = rs[i].GBps()
		case pt.Run == measure.UCXRunName(measure.UCXTagBW):
			ucxRate = rs[i].GBps()
		}
	}
	var rows []row
	var cells [][]string
	for i, pt := range pts {
		rw := makeRow("compare", pt.TransportName(), pt.Run, pt.Params, rs[i])
		rows = append(rows, rw)
		if rs[i].Latency > 0 {
			continue
		}
		c := []string{measure.SizeName(size), pt.Run, sig(rw.GBps), spread(rw), ratio(rw.GBps, copyRate)}
		if cc.tcp != nil {
			c = append(c, ratio(rw.GBps, tcpRate))
		}
		if cc.ucx {
			c = append(c, ratio(rw.GBps, ucxRate))
		}
		cells = append(cells, append(c, num(rw.PctDirect, 0), num(rw.CPUSend, 3), num(rw.CPURecv, 3), num(rw.CPUTotal, 3)))
	}
	return rows, cells
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
	ts, bs, err := openStream(ctx, e, o)
	if err != nil {
		return err
	}
	defer closeStream(ts, bs)
	tr, tcp := ts.tr, ts.tcp
	notes := append(append(ts.notes, bs.notes...), o.bufferNotes()...)
	rep := newReport(e, tr, notes, o.params())
	out := e.stdout
	if o.json == "-" {
		out = io.Discard
	}
	fmt.Fprintln(out, "exsperf rate: message rate")
	fmt.Fprintf(out, "host: %s\ntransport: %s: %s\n", rep.Host, tr.Name(), tr.Describe())
	fmt.Fprintf(out, "outstanding sends %d, recvs %d; %s\n", o.sends, o.recvs, o.timing())
	for _, n := range notes {
		fmt.Fprintf(out, "note: %s\n", n)
	}
	fmt.Fprintln(out)
	t := &table{head: []string{"size", "run", "M msg/s", "GB/s", "% direct", "CPU us/msg total"}, align: []bool{true, false, true, true, true, true}}
	hdr := *t
	hdr.write(out)
	points := func(size int) []measure.Point {
		base := measure.Params{Size: size, Sends: o.sends, Recvs: o.recvs, Ring: o.ring, Verify: o.verify, Reuse: o.reuse, Seed: o.seed, CC: o.cc}
		var pts []measure.Point
		if tcp != nil {
			pts = append(pts, measure.Point{Run: measure.TCPRunName(tcp), Tr: tcp, Params: base})
		}
		pts = append(pts, bs.ucxPoints(base, measure.UCXTagBW)...)
		return append(pts, measure.ModePoints(tr, o.modes, base)...)
	}
	prog := newProgress(e.stderr, o.quiet, countPoints(o.sizes, points)*o.rounds)
	var warm warmups
	var ul ucxLines
	err = o.schedule(prog).Run(ctx, o.sizes, points, func(size int, pts []measure.Point, rs []measure.Result) {
		prog.clear()
		ul.add(size, pts, rs)
		for i, pt := range pts {
			warm.add(size, pt, rs[i])
			rw := makeRow("rate", pt.Tr.Name(), pt.Run, pt.Params, rs[i])
			rep.Stream = append(rep.Stream, rw)
			perMsg := "-"
			if rs[i].CPUTotal >= 0 && rs[i].Msgs > 0 {
				perMsg = sig(float64(rs[i].CPUTotal) / 1e3 / float64(rs[i].Msgs))
			}
			fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s |\n", measure.SizeName(size), pt.Run, sig(rw.MsgsPerS/1e6), sig(rw.GBps), num(rw.PctDirect, 0), perMsg)
		}
	})
	prog.done()
	if err != nil {
		return err
	}
	fmt.Fprintln(out)
	if o.steady() {
		fmt.Fprintln(out, warm.line(o.maxWarmup))
	}
	if l := bs.close(); l != "" {
		fmt.Fprintln(out, l)
	}
	ul.write(out)
	if o.json != "" {
		return writeJSON(o.json, e.stdout, rep)
	}
	return nil
}
