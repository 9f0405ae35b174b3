package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/exsgo/exs/cmd/exsperf/internal/measure"
	"github.com/exsgo/exs/dynproto"
)

type latOpts struct {
	duration, warmup time.Duration
	sizes            []int
	modes            []dynproto.Mode
	waits            []measure.WaitMode
	transport        string
	tcp              string
	cc               string
	json             string
	seed             int64
	quiet            bool
}

func (o *latOpts) register(fs *flag.FlagSet) {
	o.duration, o.warmup, o.sizes = 300*time.Millisecond, 100*time.Millisecond, []int{64, 4 << 10, 64 << 10}
	o.modes, o.waits = append([]dynproto.Mode(nil), measure.Modes...), []measure.WaitMode{measure.WaitBusy, measure.WaitBlock, measure.WaitAdaptive}
	o.transport, o.tcp, o.cc, o.seed = "auto", "tcp", "cubic", 1
	registerTiming(fs, &o.duration, &o.warmup)
	fs.Var(sizesFlag{&o.sizes}, "sizes", "message sizes")
	fs.Var(sizesFlag{&o.sizes}, "l", "shorthand for --sizes")
	fs.Var(modesFlag{&o.modes}, "modes", "modes to run")
	fs.Var(waitsFlag{&o.waits}, "wait", "wait modes: busy, block, adaptive (spin, then block; exs only), where the transport has threads to wait")
	fs.StringVar(&o.transport, "transport", o.transport, "what to measure on: auto, "+measure.Names())
	fs.StringVar(&o.tcp, "tcp", o.tcp, "the TCP anchor: tcp, tcp-proc or off")
	registerTCP(fs, &o.cc)
	registerOutput(fs, &o.json, &o.seed, &o.quiet)
}

// latPoint is one latency measurement.
type latPoint struct {
	tr   measure.Transport
	run  string
	wait measure.WaitMode
	p    measure.Params
}

// check checks the flags.
func (o *latOpts) check(e *env) error {
	if err := checkTiming(e, o.duration, o.warmup); err != nil {
		return err
	}
	return checkTCP(o.tcp)
}

// points are the latency measurements: each size in each mode on tr in
// each wait mode (or inline, on the engine), and on the TCP anchor tcp (if
// not nil) in each of its wait modes.
func (o *latOpts) points(tr, tcp measure.Transport) []latPoint {
	var pts []latPoint
	for _, size := range o.sizes {
		base := measure.Params{Size: size, Sends: 1, Recvs: 1, Ring: max(4<<20, 2*size), CC: o.cc, Seed: o.seed}
		for _, m := range o.modes {
			p := base
			p.Mode = m
			if tr.Name() == "engine" {
				p.Wait = measure.WaitInline
				pts = append(pts, latPoint{tr, m.String(), measure.WaitInline, p})
				continue
			}
			for _, w := range o.waits {
				p.Wait = w
				pts = append(pts, latPoint{tr, m.String(), w, p})
			}
		}
		if tcp != nil {
			for _, w := range o.waits {
				if w == measure.WaitAdaptive || w == measure.WaitBusy && !measure.BusyPollSupported {
					continue // TCP has no adaptive wait of its own
				}
				p := base
				p.Wait = w
				pts = append(pts, latPoint{tcp, measure.TCPRunName(tcp), w, p})
			}
		}
	}
	return pts
}

func runLat(ctx context.Context, e *env, o *latOpts) error {
	if err := o.check(e); err != nil {
		return err
	}
	ts, err := openTransports(o.transport, o.tcp, &o.cc)
	if err != nil {
		return err
	}
	defer ts.close()
	tr, tcp, notes := ts.tr, ts.tcp, ts.notes
	rep := newReport(e, tr, notes, map[string]any{"sizes": o.sizes, "duration": o.duration.String(), "warmup": o.warmup.String()})
	host := rep.Host
	out := e.stdout
	if o.json == "-" {
		out = io.Discard
	}
	fmt.Fprintln(out, "exsperf lat: ping-pong round trips (one message in flight)")
	fmt.Fprintf(out, "host: %s\ntransport: %s: %s\n", host, tr.Name(), tr.Describe())
	fmt.Fprintf(out, "%v per point after %v warm-up\n", o.duration, o.warmup)
	if slices.Contains(o.waits, measure.WaitBusy) && host.load1() > float64(host.CPUs)-2 {
		notes = append(notes, fmt.Sprintf("busy-poll needs a CPU for each spinning side, but the load average is %.1f on %d CPUs: expect its round trips to include scheduler time slices", host.load1(), host.CPUs))
		rep.Notes = notes
	}
	for _, n := range notes {
		fmt.Fprintf(out, "note: %s\n", n)
	}
	fmt.Fprintln(out)
	pts := o.points(tr, tcp)
	t := &table{head: []string{"size", "run", "wait", "round trips", "min us", "p50 us", "p99 us", "p99.9 us", "mean us"},
		align: []bool{true, false, false, true, true, true, true, true, true}}
	hdr := *t
	hdr.write(out)
	prog := newProgress(e.stderr, o.quiet, len(pts))
	for _, pt := range pts {
		prog.step(fmt.Sprintf("%s %s %v", measure.SizeName(pt.p.Size), pt.run, pt.wait))
		rts, err := measure.PingPong(ctx, pt.tr, pt.p, pt.wait, o.warmup, o.duration)
		if err != nil {
			prog.done()
			return fmt.Errorf("%s %s %v: %w", measure.SizeName(pt.p.Size), pt.run, pt.wait, err)
		}
		r := makeLatRow(pt.tr.Name(), pt.run, pt.wait, pt.p.Size, rts)
		rep.Latency = append(rep.Latency, r)
		prog.clear()
		fmt.Fprintf(out, "| %s | %s | %s | %d | %s | %s | %s | %s | %s |\n", measure.SizeName(r.Size), r.Run, r.Wait, r.Samples,
			sig(r.Min), sig(r.P50), sig(r.P99), sig(r.P999), sig(r.Mean))
	}
	prog.done()
	fmt.Fprintln(out, "\nOne-way latency is about half a round trip. p99.9 needs 1000 round trips or more to mean anything.")
	if o.json != "" {
		return writeJSON(o.json, e.stdout, rep)
	}
	return nil
}
