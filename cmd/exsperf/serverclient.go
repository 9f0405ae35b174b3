package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/exsgo/exs/cmd/exsperf/internal/measure"
	"github.com/exsgo/exs/dynproto"
)

type serverOpts struct {
	addr  string
	once  bool
	cc    string
	log   bool
	procs int
}

func (o *serverOpts) register(fs *flag.FlagSet) {
	o.addr, o.cc = "tcp::"+measure.DefaultPort, "cubic"
	fs.StringVar(&o.addr, "listen", o.addr, "address to listen on: tcp:HOST:PORT (plain TCP), shm:PATH (exs over the same-host provider) or exs+tcp:HOST:PORT (exs over the TCP provider)")
	fs.StringVar(&o.addr, "addr", o.addr, "the same as --listen")
	fs.BoolVar(&o.once, "once", false, "exit after one measurement (iperf3's -1)")
	fs.StringVar(&o.cc, "cc", o.cc, "TCP congestion control for accepted connections (TCP_CONGESTION); '' keeps the system's")
	fs.BoolVar(&o.log, "log", false, "log sessions to stderr (zap production config)")
	fs.IntVar(&o.procs, "procs", 0, "GOMAXPROCS while serving (0 keeps Go's default)")
}

// runServer serves until ctx is done. As the hidden "peer" subcommand it
// listens on a loopback port of its own choosing, announces it on stdout, and
// also exits when its stdin closes (its parent is gone).
func runServer(ctx context.Context, e *env, o *serverOpts, peer bool) error {
	if len(e.args) > 0 {
		return usagef("unexpected argument %q", e.args[0])
	}
	if o.procs < 0 {
		return usagef("--procs %d: must be 0 or more", o.procs)
	}
	if o.procs > 0 {
		runtime.GOMAXPROCS(o.procs)
	}
	log := zap.NewNop()
	if o.log {
		l, err := zap.NewProduction()
		if err != nil {
			return err
		}
		defer l.Sync()
		log = l
	}
	s, about, err := o.listen(ctx, e, log, peer)
	if err != nil {
		return err
	}
	if peer {
		// The peer of a parent exsperf serves one control connection over
		// exs; over TCP, one connection per measurement.
		_, isExs := s.(*measure.ExsServer)
		return measure.ServeAsPeer(ctx, s, o.once || isExs, e.stdout)
	}
	fmt.Fprintf(e.stdout, "exsperf server listening on %s (%s)\n", s.Addr(), about)
	return s.Serve(ctx, o.once)
}

// listen opens the server that --listen names (as a peer, over TCP, on a
// loopback port of its own choosing) and says what it serves.
func (o *serverOpts) listen(ctx context.Context, e *env, log *zap.Logger, peer bool) (measure.Server, string, error) {
	if addr, ok := measure.ExsAddr(o.addr); ok {
		s, err := measure.ListenExs(addr, log)
		if strings.HasPrefix(addr, "shm:") {
			return s, "exs over the same-host provider", err
		}
		return s, "exs over the TCP provider", err
	}
	listen := o.addr
	if peer {
		listen = "tcp:127.0.0.1:0"
	}
	a, err := measure.ParseTCPAddr(listen, true)
	if err != nil {
		return nil, "", usageError{err}
	}
	if o.cc != "" {
		if err := measure.ProbeCongestion(o.cc); err != nil {
			fmt.Fprintf(e.stderr, "exsperf server: could not set congestion control %s (%v): using the system's %s\n", o.cc, err, measure.SystemCongestion())
			o.cc = ""
		}
	}
	s, err := measure.ListenTCP(ctx, a, o.cc, log)
	return s, "congestion control " + ccName(o.cc), err
}

func ccName(cc string) string {
	if cc == "" {
		return measure.SystemCongestion() + ", the system's"
	}
	return cc
}

type clientOpts struct {
	addr             string
	modes            []dynproto.Mode
	recvs, ring      int
	duration, warmup time.Duration
	sizes            []int
	sends            int
	lat              bool
	waits            []measure.WaitMode
	cc               string
	json             string
	seed             int64
	quiet            bool
	verify           bool
}

func (o *clientOpts) register(fs *flag.FlagSet) {
	o.duration, o.warmup, o.sizes, o.sends = time.Second, 200*time.Millisecond, []int{64, 4 << 10, 64 << 10, 1 << 20}, 16
	o.cc, o.seed, o.waits = "cubic", 1, []measure.WaitMode{measure.WaitBusy, measure.WaitBlock}
	registerTiming(fs, &o.duration, &o.warmup)
	fs.Var(sizesFlag{&o.sizes}, "sizes", "message sizes")
	fs.Var(sizesFlag{&o.sizes}, "l", "shorthand for --sizes")
	o.modes, o.recvs, o.ring = append([]dynproto.Mode(nil), measure.Modes...), 32, 4<<20
	fs.StringVar(&o.addr, "addr", "", "the server's address, instead of the ADDR argument")
	fs.IntVar(&o.sends, "sends", o.sends, "send buffers the writer cycles through (exs: outstanding sends)")
	fs.IntVar(&o.recvs, "recvs", o.recvs, "outstanding recvs of the server")
	fs.Var(sizeFlag{&o.ring}, "ring", "stream buffer (ring) size for indirect transfers")
	fs.Var(modesFlag{&o.modes}, "modes", "modes to run: direct-only, indirect-only, dynamic")
	fs.BoolVar(&o.lat, "lat", false, "also measure ping-pong latency")
	fs.Var(waitsFlag{&o.waits}, "wait", "wait modes for --lat: busy, block (and adaptive, exs only)")
	registerTCP(fs, &o.cc)
	registerOutput(fs, &o.json, &o.seed, &o.quiet)
	fs.BoolVar(&o.verify, "verify", false, "have the server check every byte")
}

func runClient(ctx context.Context, e *env, o *clientOpts) error {
	addr := o.addr
	switch {
	case addr == "" && len(e.args) == 1:
		addr = e.args[0]
	case addr == "" || len(e.args) != 0:
		return usagef("client needs one address (tcp:HOST:PORT or shm:PATH), as ADDR or --addr")
	}
	if err := durationOK("duration", o.duration, false); err != nil {
		return usageError{err}
	}
	if o.sends < 1 || o.recvs < 1 || o.sends > 4096 || o.recvs > 4096 {
		return usagef("--sends and --recvs must be between 1 and 4096")
	}
	if xa, ok := measure.ExsAddr(addr); ok {
		return runExsClient(ctx, e, o, xa)
	}
	if slices.Contains(o.waits, measure.WaitAdaptive) {
		return usagef("--wait adaptive: plain TCP has busy and block only")
	}
	a, err := measure.ParseTCPAddr(addr, false)
	if err != nil {
		return usageError{err}
	}
	if o.cc != "" {
		if err := measure.ProbeCongestion(o.cc); err != nil {
			fmt.Fprintf(e.stderr, "exsperf client: could not set congestion control %s (%v): using the system's\n", o.cc, err)
			o.cc = ""
		}
	}
	tr := measure.NewTCPClient(a)
	rep := newReport(e, tr, nil, map[string]any{"server": a.Host, "sizes": o.sizes, "duration": o.duration.String(), "warmup": o.warmup.String()})
	host := rep.Host
	out := e.stdout
	if o.json == "-" {
		out = io.Discard
	}
	fmt.Fprintf(out, "exsperf client: %s\nhost (client): %s\n\n", tr.Describe(), host)
	t := &table{head: []string{"size", "run", "Gbit/s", "GB/s", "CPU s/GB send (client)", "CPU s/GB recv (server)", "note"},
		align: []bool{true, false, true, true, true, true, false}}
	hdr := *t
	hdr.write(out)
	n := len(o.sizes)
	if o.lat {
		n += len(o.sizes) * len(o.waits)
	}
	prog := newProgress(e.stderr, o.quiet, n)
	defer prog.done()
	for _, size := range o.sizes {
		p := measure.Params{Size: size, Sends: o.sends, Recvs: 1, CC: o.cc, Verify: o.verify, Seed: o.seed}
		prog.step(measure.SizeName(size) + " stream")
		r, err := measure.Measure(ctx, measure.Point{Run: "TCP", Tr: tr, Params: p}, o.warmup, o.duration)
		if err != nil {
			return fmt.Errorf("%s: %w", measure.SizeName(size), err)
		}
		rw := makeRow("client", tr.Name(), "TCP stream", p, r)
		rep.Stream = append(rep.Stream, rw)
		prog.clear()
		fmt.Fprintf(out, "| %s | TCP stream | %s | %s | %s | %s | %s |\n", measure.SizeName(size), sig(rw.GBps*8), sig(rw.GBps), num(rw.CPUSend, 3), num(rw.CPURecv, 3), r.Note)
	}
	if o.lat {
		lt := &table{head: []string{"size", "wait", "round trips", "p50 us", "p99 us", "p99.9 us"}, align: []bool{true, false, true, true, true, true}}
		fmt.Fprintln(out)
		lt.write(out)
		for _, size := range o.sizes {
			for _, w := range o.waits {
				prog.step(fmt.Sprintf("%s ping-pong %v", measure.SizeName(size), w))
				rts, err := measure.PingPong(ctx, tr, measure.Params{Size: size, CC: o.cc}, w, o.warmup, o.duration)
				if err != nil {
					return fmt.Errorf("%s ping-pong %v: %w", measure.SizeName(size), w, err)
				}
				r := makeLatRow(tr.Name(), "TCP", w, size, rts)
				rep.Latency = append(rep.Latency, r)
				prog.clear()
				fmt.Fprintf(out, "| %s | %s | %d | %s | %s | %s |\n", measure.SizeName(size), r.Wait, r.Samples, sig(r.P50), sig(r.P99), sig(r.P999))
			}
		}
	}
	prog.done()
	if o.json != "" {
		return writeJSON(o.json, e.stdout, rep)
	}
	return nil
}

// runExsClient measures exs against the server at addr: streams of each
// size in each mode, and with --lat ping-pongs.
func runExsClient(ctx context.Context, e *env, o *clientOpts, addr string) error {
	for _, s := range o.sizes {
		if s > 64<<20 || int64(s)*int64(o.sends+o.recvs) > 4<<30 {
			return usagef("size %s: too large (at most 64 MiB, and 4 GiB of buffers for the outstanding operations)", measure.SizeName(s))
		}
	}
	tr, err := measure.DialExs(ctx, addr)
	if err != nil {
		return err
	}
	defer tr.Close()
	rep := newReport(e, tr, nil, map[string]any{"server": addr, "sizes": o.sizes, "sends": o.sends, "recvs": o.recvs, "ring": o.ring,
		"duration": o.duration.String(), "warmup": o.warmup.String()})
	host := rep.Host
	out := e.stdout
	if o.json == "-" {
		out = io.Discard
	}
	fmt.Fprintf(out, "exsperf client: %s\nhost (client): %s\noutstanding sends %d, recvs %d; stream buffer %s\n\n", tr.Describe(), host, o.sends, o.recvs, measure.SizeName(o.ring))
	t := &table{head: []string{"size", "run", "Gbit/s", "GB/s", "% direct", "CPU s/GB send (client)", "CPU s/GB recv (server)", "CPU s/GB total"},
		align: []bool{true, false, true, true, true, true, true, true}}
	hdr := *t
	hdr.write(out)
	n := len(o.sizes) * len(o.modes)
	if o.lat {
		n *= 1 + len(o.waits)
	}
	prog := newProgress(e.stderr, o.quiet, n)
	defer prog.done()
	for _, size := range o.sizes {
		for _, m := range o.modes {
			p := measure.Params{Mode: m, Size: size, Sends: o.sends, Recvs: o.recvs, Ring: o.ring, Verify: o.verify, Seed: o.seed}
			prog.step(measure.SizeName(size) + " " + m.String())
			r, err := measure.Measure(ctx, measure.Point{Run: m.String(), Tr: tr, Params: p}, o.warmup, o.duration)
			if err != nil {
				return fmt.Errorf("%s %v: %w", measure.SizeName(size), m, err)
			}
			rw := makeRow("client", tr.Name(), m.String(), p, r)
			rep.Stream = append(rep.Stream, rw)
			prog.clear()
			fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", measure.SizeName(size), m, sig(rw.GBps*8), sig(rw.GBps),
				num(rw.PctDirect, 0), num(rw.CPUSend, 3), num(rw.CPURecv, 3), num(rw.CPUTotal, 3))
		}
	}
	if o.lat {
		lt := &table{head: []string{"size", "run", "wait", "round trips", "p50 us", "p99 us", "p99.9 us"}, align: []bool{true, false, false, true, true, true, true}}
		fmt.Fprintln(out)
		lt.write(out)
		for _, size := range o.sizes {
			for _, m := range o.modes {
				for _, w := range o.waits {
					prog.step(fmt.Sprintf("%s %v ping-pong %v", measure.SizeName(size), m, w))
					p := measure.Params{Mode: m, Size: size, Sends: 1, Recvs: 1, Ring: max(o.ring, 2*size), Wait: w}
					rts, err := measure.PingPong(ctx, tr, p, w, o.warmup, o.duration)
					if err != nil {
						return fmt.Errorf("%s %v ping-pong %v: %w", measure.SizeName(size), m, w, err)
					}
					r := makeLatRow(tr.Name(), m.String(), w, size, rts)
					rep.Latency = append(rep.Latency, r)
					prog.clear()
					fmt.Fprintf(out, "| %s | %s | %s | %d | %s | %s | %s |\n", measure.SizeName(size), m, r.Wait, r.Samples, sig(r.P50), sig(r.P99), sig(r.P999))
				}
			}
		}
	}
	prog.done()
	if n := tr.CMANote(); n != "" {
		rep.Notes = append(rep.Notes, n)
		fmt.Fprintf(out, "\nnote: %s\n", n)
	}
	if o.json != "" {
		return writeJSON(o.json, e.stdout, rep)
	}
	return nil
}

var _ = errors.New
