package main

import (
	"context"
	"fmt"
	"io"
	"slices"
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

func runCompare(ctx context.Context, e *env, o *streamOpts, engineOnly bool) error {
	if err := o.check(e); err != nil {
		return err
	}
	ts, err := openTransports(o.transport, o.tcp, &o.cc)
	if err != nil {
		return err
	}
	defer ts.close()
	tr, tcp, notes := ts.tr, ts.tcp, ts.notes
	rep := newReport(e, tr, nil, map[string]any{"sizes": o.sizes, "sends": o.sends, "recvs": o.recvs, "ring": o.ring,
		"duration": o.duration.String(), "warmup": o.warmup.String(), "rounds": o.rounds, "seed": o.seed, "tcp_congestion_control": o.cc})
	host := rep.Host
	rep.Notes = append(notes, measure.CopyNote)
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
	rep.Notes = append(rep.Notes, measure.Notes(tr)...)
	fmt.Fprintf(out, "outstanding sends %d, recvs %d; stream buffer %s; %s\n", o.sends, o.recvs, measure.SizeName(o.ring), o.timing())
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
	t.write(out)
	points := func(size int) []measure.Point {
		base := measure.Params{Size: size, Sends: o.sends, Recvs: o.recvs, Ring: o.ring, Verify: o.verify, Seed: o.seed, CC: o.cc}
		pts := measure.CopyAnchors(base)
		if tcp != nil {
			pts = append(pts, measure.Point{Run: measure.TCPRunName(tcp), Tr: tcp, Params: base})
		}
		return append(pts, measure.ModePoints(tr, o.modes, base)...)
	}
	nPoints := len(points(1))
	prog := newProgress(e.stderr, o.quiet, len(o.sizes)*nPoints*o.rounds)
	err = o.schedule(prog).Run(ctx, o.sizes, points, func(size int, pts []measure.Point, rs []measure.Result) {
		rows, cells := compareRows(size, pts, rs, tcp)
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
	if n := measure.PathNotes(tr); len(n) > 0 {
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

// compareRows are the rows of one size's results and their cells in the
// table: each throughput also as a multiple of copy() x1's and, with a TCP
// anchor, of TCP's.
func compareRows(size int, pts []measure.Point, rs []measure.Result, tcp measure.Transport) ([]row, [][]string) {
	var copyRate, tcpRate float64
	for i, pt := range pts {
		if pt.Run == measure.RunCopy1 {
			copyRate = rs[i].GBps()
		}
		if tcp != nil && pt.Tr == tcp {
			tcpRate = rs[i].GBps()
		}
	}
	var rows []row
	var cells [][]string
	for i, pt := range pts {
		rw := makeRow("compare", pt.TransportName(), pt.Run, pt.Params, rs[i])
		rows = append(rows, rw)
		c := []string{measure.SizeName(size), pt.Run, sig(rw.GBps), spread(rw), ratio(rw.GBps, copyRate)}
		if tcp != nil {
			c = append(c, ratio(rw.GBps, tcpRate))
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
	if err := o.check(e); err != nil {
		return err
	}
	ts, err := openTransports(o.transport, o.tcp, &o.cc)
	if err != nil {
		return err
	}
	defer ts.close()
	tr, tcp, notes := ts.tr, ts.tcp, ts.notes
	rep := newReport(e, tr, notes, map[string]any{"sizes": o.sizes, "sends": o.sends, "recvs": o.recvs, "ring": o.ring,
		"duration": o.duration.String(), "warmup": o.warmup.String(), "rounds": o.rounds, "seed": o.seed})
	host := rep.Host
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
	points := func(size int) []measure.Point {
		base := measure.Params{Size: size, Sends: o.sends, Recvs: o.recvs, Ring: o.ring, Verify: o.verify, Seed: o.seed, CC: o.cc}
		var pts []measure.Point
		if tcp != nil {
			pts = append(pts, measure.Point{Run: measure.TCPRunName(tcp), Tr: tcp, Params: base})
		}
		return append(pts, measure.ModePoints(tr, o.modes, base)...)
	}
	prog := newProgress(e.stderr, o.quiet, len(o.sizes)*len(points(1))*o.rounds)
	err = o.schedule(prog).Run(ctx, o.sizes, points, func(size int, pts []measure.Point, rs []measure.Result) {
		prog.clear()
		for i, pt := range pts {
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
	if o.json != "" {
		return writeJSON(o.json, e.stdout, rep)
	}
	return nil
}
