package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/exsgo/exs/dynproto"
)

type serverOpts struct {
	listen string
	once   bool
	cc     string
	log    bool
	procs  int
}

func (o *serverOpts) register(fs *flag.FlagSet) {
	o.listen, o.cc = "tcp::"+defaultPort, "cubic"
	fs.StringVar(&o.listen, "listen", o.listen, "address to listen on: tcp:HOST:PORT (plain TCP), shm:PATH (exs over the same-host provider) or exs+tcp:HOST:PORT (exs over the TCP provider)")
	fs.StringVar(&o.listen, "addr", o.listen, "the same as --listen")
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
	if addr, ok := exsAddr(o.listen); ok {
		return runExsServer(ctx, e, addr, o, log, peer)
	}
	listen := o.listen
	if peer {
		listen = "tcp:127.0.0.1:0"
	}
	a, err := parsePeerAddr(listen, true)
	if err != nil {
		return usageError{err}
	}
	if o.cc != "" {
		if err := probeCongestion(o.cc); err != nil {
			fmt.Fprintf(e.stderr, "exsperf server: could not set congestion control %s (%v): using the system's %s\n", o.cc, err, systemCongestion())
			o.cc = ""
		}
	}
	s, err := listenServer(ctx, a, o.cc, log)
	if err != nil {
		return err
	}
	if peer {
		fmt.Fprintf(e.stdout, "listening %s\n", s.addr())
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() { // owner: this function; ends when stdin closes or at exit
			io.Copy(io.Discard, os.Stdin)
			cancel()
		}()
	} else {
		fmt.Fprintf(e.stdout, "exsperf server listening on %s (congestion control %s)\n", s.addr(), ccName(o.cc))
	}
	return s.serve(ctx, o.once)
}

// runExsServer serves exs measurements on addr. As the peer of a parent
// exsperf it serves one control connection and exits when it ends or when
// stdin closes.
func runExsServer(ctx context.Context, e *env, addr string, o *serverOpts, log *zap.Logger, peer bool) error {
	s, err := listenExs(addr, log)
	if err != nil {
		return err
	}
	once := o.once
	if peer {
		fmt.Fprintf(e.stdout, "listening %s\n", s.addr)
		once = true
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() { // owner: this function; ends when stdin closes or at exit
			io.Copy(io.Discard, os.Stdin)
			cancel()
		}()
	} else {
		fmt.Fprintf(e.stdout, "exsperf server listening on %s (exs)\n", s.addr)
	}
	return s.serve(ctx, once)
}

func ccName(cc string) string {
	if cc == "" {
		return systemCongestion() + ", the system's"
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
	waits            []waitMode
	cc               string
	json             string
	seed             int64
	quiet            bool
	verify           bool
}

func (o *clientOpts) register(fs *flag.FlagSet) {
	o.duration, o.warmup, o.sizes, o.sends = time.Second, 200*time.Millisecond, []int{64, 4 << 10, 64 << 10, 1 << 20}, 16
	o.cc, o.seed, o.waits = "cubic", 1, []waitMode{waitBusy, waitBlock}
	registerTiming(fs, &o.duration, &o.warmup)
	fs.Var(sizesFlag{&o.sizes}, "sizes", "message sizes")
	fs.Var(sizesFlag{&o.sizes}, "l", "shorthand for --sizes")
	o.modes, o.recvs, o.ring = append([]dynproto.Mode(nil), modes...), 32, 4<<20
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
	if xa, ok := exsAddr(addr); ok {
		return runExsClient(ctx, e, o, xa)
	}
	if slices.Contains(o.waits, waitAdaptive) {
		return usagef("--wait adaptive: plain TCP has busy and block only")
	}
	a, err := parsePeerAddr(addr, false)
	if err != nil {
		return usageError{err}
	}
	if o.cc != "" {
		if err := probeCongestion(o.cc); err != nil {
			fmt.Fprintf(e.stderr, "exsperf client: could not set congestion control %s (%v): using the system's\n", o.cc, err)
			o.cc = ""
		}
	}
	tr := &netTransport{name: "tcp-net", about: "plain Go TCP to an exsperf server at " + a.host + " (CPU per side: RUSAGE_SELF of each process)", addr: a}
	host := readHost()
	rep := &report{Tool: "exsperf", Command: e.line, Host: host, Transport: tr.Name(), About: tr.Describe(),
		Params: map[string]any{"server": a.host, "sizes": o.sizes, "duration": o.duration.String(), "warmup": o.warmup.String()}}
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
		p := pairParams{Size: size, Sends: o.sends, Recvs: 1, CC: o.cc, Verify: o.verify, Seed: o.seed}
		prog.step(sizeName(size) + " stream")
		r, err := measure(ctx, point{run: "TCP", tr: tr, params: p}, o.warmup, o.duration)
		if err != nil {
			return fmt.Errorf("%s: %w", sizeName(size), err)
		}
		rw := makeRow("client", tr.Name(), "TCP stream", p, r)
		rep.Stream = append(rep.Stream, rw)
		prog.clear()
		fmt.Fprintf(out, "| %s | TCP stream | %s | %s | %s | %s | %s |\n", sizeName(size), sig(rw.GBps*8), sig(rw.GBps), num(rw.CPUSend, 3), num(rw.CPURecv, 3), r.Note)
	}
	if o.lat {
		lt := &table{head: []string{"size", "wait", "round trips", "p50 us", "p99 us", "p99.9 us"}, align: []bool{true, false, true, true, true, true}}
		fmt.Fprintln(out)
		lt.write(out)
		for _, size := range o.sizes {
			for _, w := range o.waits {
				prog.step(fmt.Sprintf("%s ping-pong %v", sizeName(size), w))
				rts, err := pingPong(ctx, latPoint{tr: tr, run: "TCP", wait: w, p: pairParams{Size: size, CC: o.cc}}, o.warmup, o.duration)
				if err != nil {
					return fmt.Errorf("%s ping-pong %v: %w", sizeName(size), w, err)
				}
				r := makeLatRow(tr.Name(), "TCP", w, size, rts)
				rep.Latency = append(rep.Latency, r)
				prog.clear()
				fmt.Fprintf(out, "| %s | %s | %d | %s | %s | %s |\n", sizeName(size), r.Wait, r.Samples, sig(r.P50), sig(r.P99), sig(r.P999))
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
			return usagef("size %s: too large (at most 64 MiB, and 4 GiB of buffers for the outstanding operations)", sizeName(s))
		}
	}
	tr, err := dialExs(ctx, "exs-net", "exs sockets to an exsperf server at "+addr+" (CPU per side: RUSAGE_SELF of each process)", addr)
	if err != nil {
		return err
	}
	defer tr.Close()
	host := readHost()
	rep := &report{Tool: "exsperf", Command: e.line, Host: host, Transport: tr.Name(), About: tr.Describe(),
		Params: map[string]any{"server": addr, "sizes": o.sizes, "sends": o.sends, "recvs": o.recvs, "ring": o.ring,
			"duration": o.duration.String(), "warmup": o.warmup.String()}}
	out := e.stdout
	if o.json == "-" {
		out = io.Discard
	}
	fmt.Fprintf(out, "exsperf client: %s\nhost (client): %s\noutstanding sends %d, recvs %d; stream buffer %s\n\n", tr.Describe(), host, o.sends, o.recvs, sizeName(o.ring))
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
			p := pairParams{Mode: m, Size: size, Sends: o.sends, Recvs: o.recvs, Ring: o.ring, Verify: o.verify, Seed: o.seed}
			prog.step(sizeName(size) + " " + m.String())
			r, err := measure(ctx, point{run: m.String(), tr: tr, params: p}, o.warmup, o.duration)
			if err != nil {
				return fmt.Errorf("%s %v: %w", sizeName(size), m, err)
			}
			rw := makeRow("client", tr.Name(), m.String(), p, r)
			rep.Stream = append(rep.Stream, rw)
			prog.clear()
			fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", sizeName(size), m, sig(rw.GBps*8), sig(rw.GBps),
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
					prog.step(fmt.Sprintf("%s %v ping-pong %v", sizeName(size), m, w))
					p := pairParams{Mode: m, Size: size, Sends: 1, Recvs: 1, Ring: max(o.ring, 2*size), Wait: w}
					rts, err := pingPong(ctx, latPoint{tr: tr, run: m.String(), wait: w, p: p}, o.warmup, o.duration)
					if err != nil {
						return fmt.Errorf("%s %v ping-pong %v: %w", sizeName(size), m, w, err)
					}
					r := makeLatRow(tr.Name(), m.String(), w, size, rts)
					rep.Latency = append(rep.Latency, r)
					prog.clear()
					fmt.Fprintf(out, "| %s | %s | %s | %d | %s | %s | %s |\n", sizeName(size), m, r.Wait, r.Samples, sig(r.P50), sig(r.P99), sig(r.P999))
				}
			}
		}
	}
	prog.done()
	if n := tr.cmaNote(); n != "" {
		rep.Notes = append(rep.Notes, n)
		fmt.Fprintf(out, "\nnote: %s\n", n)
	}
	if o.json != "" {
		return writeJSON(o.json, e.stdout, rep)
	}
	return nil
}

var _ = errors.New
