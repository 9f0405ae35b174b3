package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/exsgo/exs/cmd/exsperf/internal/measure"
	"github.com/exsgo/exs/dynproto"
)

// usageError is a bad command line: main prints it and exits with status 2.
type usageError struct{ error }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// env is what a command runs with.
type env struct {
	stdout, stderr io.Writer
	args           []string // positional arguments after the flags
	line           string   // the command line, for reports
}

// command is one subcommand: setup registers its flags and returns the
// function that runs it once they are parsed.
type command struct {
	name     string
	synopsis string
	short    string
	long     string
	hidden   bool
	setup    func(fs *flag.FlagSet) func(ctx context.Context, e *env) error
}

func commandList() []command {
	return []command{
		{name: "compare", synopsis: "[flags]", short: "the default: a short comparison on this host, with anchors",
			long: `Streams messages of each size in each mode (direct-only, indirect-only,
dynamic) and, in the same run and on the same buffers, measures the anchors:
copy() once (the memory-copy limit of a direct transfer), copy() twice through
a ring (an indirect transfer's copies), and a plain Go TCP stream over
loopback. Prints throughput, the share of bytes sent directly and CPU seconds
per GB for each side. Runs are taken in a seeded random order within each
size, so that drift in the machine's speed does not favour one of them.

With --transport auto (the default) the other end is a child exsperf process,
started for the run and reached over the same-host provider on an shm:
address in a temporary directory removed at exit; each side's CPU time is its
own process's (getrusage), the child reporting its own, and the last lines
say whether bytes moved by cross-memory attach or through the rings. Where
the child or the provider cannot run (outside Linux, for instance), the run
uses exs over the in-process provider and says so in the header.`,
			setup: func(fs *flag.FlagSet) func(context.Context, *env) error {
				o := &streamOpts{}
				o.register(fs, compareDefaults)
				o.registerBeside(fs)
				return func(ctx context.Context, e *env) error { return runCompare(ctx, e, o, false) }
			}},
		{name: "engine", synopsis: "[flags]", short: "the protocol engine alone over process memory, with copy() anchors",
			long: `Like compare, but always on the engine transport (two dynproto engines driven
by one goroutine over process memory: a direct transfer is one copy, an
indirect transfer two) and without the TCP anchor: what the protocol itself
costs, without threads, queues or wake-ups.`,
			setup: func(fs *flag.FlagSet) func(context.Context, *env) error {
				o := &streamOpts{}
				o.register(fs, engineDefaults)
				return func(ctx context.Context, e *env) error { return runCompare(ctx, e, o, true) }
			}},
		{name: "sweep", synopsis: "[flags]", short: "reproduce the paper's five figures (markdown, JSON, SVG)",
			long: `Reproduces the evaluation of the IPDPS 2014 paper on this host:
  fig1  throughput vs message size, outstanding sends = 1/2 outstanding recvs
  fig2  CPU seconds per GB for the same runs
  fig3  throughput of each of --modes, recvs fixed at 32, sends varied
        (--sends-list): a table row per size and mode; the SVG plots
        throughput against sends, a line per mode, a panel per --fig3-sizes
  fig4  percent of bytes sent directly by the dynamic runs of fig3 (dynamic
        only; it is run for fig4 even if --modes leaves it out)
  fig5  throughput over distance (default 48 ms round trip at 10 Gbit/s,
        sends = recvs = 32) on an emulated link in virtual time
fig1 and fig2 include the anchors (copy() once and twice, TCP loopback).
The markdown starts with the targets computed from the run: dynamic /
max(direct-only, indirect-only) at every point of figures 1, 3 and 5
(target >= 0.95; the minimum and the points below it listed), and at 1 MiB
in figure 1 direct-only / TCP (target >= 2) and indirect-only / copy() x2
(target >= 0.8). sweep.json carries the same under "targets".
Writes sweep.md, sweep.json and fig1..fig5 .svg into --out, prints the
markdown, and shows progress on stderr. Figure 3 measures sizes x modes x
sends points (8 x 3 x 7 by default): with --rounds 3 the default sweep
takes about 4.5 minutes on 2 cores; --sends-list or --sizes shortens it.`,
			setup: func(fs *flag.FlagSet) func(context.Context, *env) error {
				o := &sweepOpts{}
				o.register(fs)
				return func(ctx context.Context, e *env) error { return runSweep(ctx, e, o) }
			}},
		{name: "lat", synopsis: "[flags]", short: "ping-pong latency percentiles (p50, p99, p99.9), busy-poll and blocking",
			long: `Bounces one message back and forth and reports round-trip percentiles for
each size: for the transport in each mode, and for the TCP anchor in each
wait mode (busy-poll spins on non-blocking sockets; blocking sleeps in the
kernel). The engine transport runs both sides in one goroutine, so its wait
mode is "inline": its figure is the protocol's own cost per round trip.`,
			setup: func(fs *flag.FlagSet) func(context.Context, *env) error {
				o := &latOpts{}
				o.register(fs)
				return func(ctx context.Context, e *env) error { return runLat(ctx, e, o) }
			}},
		{name: "rate", synopsis: "[flags]", short: "message rate for small messages",
			long: `Streams small messages with many outstanding and reports millions of
messages per second for each mode and for the TCP anchor (one write per
message).`,
			setup: func(fs *flag.FlagSet) func(context.Context, *env) error {
				o := &streamOpts{}
				o.register(fs, rateDefaults)
				o.registerBeside(fs)
				return func(ctx context.Context, e *env) error { return runRate(ctx, e, o) }
			}},
		{name: "server", synopsis: "[flags]", short: "serve measurements for exsperf client (another process or host)",
			long: `Listens for exsperf clients and serves one measurement at a time: the
receiving side of streams and the echoing side of ping-pongs. The address
names the provider: tcp:HOST:PORT is the plain-TCP anchor; shm:PATH (or
exs+shm:PATH) is exs over the same-host provider, PATH being the Unix socket
it binds (two processes of one Linux host); exs+tcp:HOST:PORT is exs over the
TCP provider (iWARP over TCP, across hosts).

Over exs, the client keeps one control connection to ADDR (an exs stream
socket) and sends each measurement's request on it (a 4-byte big-endian
length, then JSON: test, mode, size, outstanding sends and recvs, stream
buffer, warm-up, duration, wait mode); the server listens on ADDR.N (N
counting its measurements; over TCP, ADDR's host on a port the system
chooses) in that mode, answers with that address, accepts the data
connection, receives (stream) or echoes (ping-pong), and for a stream
replies on the control connection with the bytes, the interval and its own
CPU time over it (getrusage RUSAGE_SELF).`,
			setup: func(fs *flag.FlagSet) func(context.Context, *env) error {
				o := &serverOpts{}
				o.register(fs)
				return func(ctx context.Context, e *env) error { return runServer(ctx, e, o, false) }
			}},
		{name: "client", synopsis: "[flags] ADDR", short: "measure against an exsperf server at ADDR",
			long: `Streams to an exsperf server for each size and prints throughput and each
side's CPU time (RUSAGE_SELF of each process); with --lat, also ping-pong
latency. ADDR (or --addr) is tcp:HOST:PORT, HOST:PORT or HOST (port 5201 by
default): the plain-TCP anchor; or shm:PATH (exs+shm:PATH): exs over the
same-host provider, or exs+tcp:HOST:PORT: exs over the TCP provider, each
size in each of --modes, with the percentage of bytes sent directly (see
"exsperf help server" for the protocol).`,
			setup: func(fs *flag.FlagSet) func(context.Context, *env) error {
				o := &clientOpts{}
				o.register(fs)
				return func(ctx context.Context, e *env) error { return runClient(ctx, e, o) }
			}},
		{name: "peer", hidden: true, synopsis: "[flags]", short: "a server for a parent exsperf (internal)",
			setup: func(fs *flag.FlagSet) func(context.Context, *env) error {
				o := &serverOpts{}
				o.register(fs)
				return func(ctx context.Context, e *env) error { return runServer(ctx, e, o, true) }
			}},
		{name: "neighbour", hidden: true, synopsis: "", short: "a CPU-bound process beside a parent exsperf (internal)",
			setup: func(*flag.FlagSet) func(context.Context, *env) error {
				return func(_ context.Context, e *env) error { return measure.Spin(e.stdout) }
			}},
	}
}

// run is exsperf: it parses args and runs the command they name.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	name := "compare"
	explicit := false
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args, explicit = args[0], args[1:], true
	}
	cmds := commandList()
	if name == "help" {
		if len(args) == 0 {
			usage(stdout, cmds)
			return nil
		}
		name, args, explicit = args[0], []string{"-h"}, true
	}
	var cmd *command
	for i := range cmds {
		if cmds[i].name == name {
			cmd = &cmds[i]
		}
	}
	if cmd == nil {
		return usagef("unknown subcommand %q", name)
	}
	fs := flag.NewFlagSet("exsperf "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	runFn := cmd.setup(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			if explicit {
				commandUsage(stdout, cmd)
			} else {
				usage(stdout, cmds)
			}
			return nil
		}
		return usageError{err}
	}
	line := "exsperf"
	if explicit {
		line += " " + name
	}
	for _, a := range args {
		line += " " + a
	}
	return runFn(ctx, &env{stdout: stdout, stderr: stderr, args: fs.Args(), line: line})
}

func usage(w io.Writer, cmds []command) {
	fmt.Fprint(w, `exsperf measures exs: direct-only, indirect-only and dynamic transfers (IPDPS 2014),
with the memory-copy limit and plain TCP measured in the same run.

Usage:
  exsperf [flags]                 the default: compare, a short comparison on this host
  exsperf <subcommand> [flags]    see below
  exsperf help <subcommand>       one subcommand's help

Flags are written -name or --name. Sizes take binary units (64, 4K, 1MiB) and
ranges (64..1M doubles; 64..1M:4 steps by 4). Exit status: 0 on success, 1 when
a measurement fails, 2 for a bad command line, 130 when interrupted.

Subcommands:
`)
	for _, c := range cmds {
		if !c.hidden {
			fmt.Fprintf(w, "  %-8s %s\n", c.name, c.short)
		}
	}
	for i := range cmds {
		if !cmds[i].hidden {
			fmt.Fprintln(w)
			commandUsage(w, &cmds[i])
		}
	}
	fmt.Fprintf(w, "\nTransports (--transport): auto (%s; exs where the same-host provider cannot run, said in the header), %s.\n", measure.Auto, measure.Names())
	for _, t := range measure.Transports {
		fmt.Fprintf(w, "  %-9s %s\n", t.Name, t.Help)
	}
}

func commandUsage(w io.Writer, c *command) {
	fmt.Fprintf(w, "exsperf %s %s\n  %s\n\n", c.name, c.synopsis, c.short)
	for _, l := range strings.Split(c.long, "\n") {
		fmt.Fprintf(w, "  %s\n", l)
	}
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	c.setup(fs)
	fmt.Fprintln(w, "\n  Flags:")
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// streamOpts are the flags of the stream commands (compare, engine, rate).
type streamOpts struct {
	duration, warmup time.Duration
	maxWarmup        time.Duration
	rounds           int
	sizes            []int
	sends, recvs     int
	ring             int
	modes            []dynproto.Mode
	transport        string
	tcp              string
	cc               string
	json             string
	seed             int64
	verify           bool
	reuse            bool // one buffer for all sends, one for all recvs
	quiet            bool
	ucx              string // the UCX anchor: auto or off
	neighbour        bool   // a CPU-bound process beside the run
}

type streamDefaults struct {
	duration, warmup time.Duration
	maxWarmup        time.Duration
	rounds           int
	sizes            []int
	sends, recvs     int
	transport        string
	tcp              string
}

var (
	compareDefaults = streamDefaults{100 * time.Millisecond, 30 * time.Millisecond, defaultMaxWarmup, 3, []int{64, 4 << 10, 64 << 10, 1 << 20}, 16, 32, "auto", "tcp"}
	engineDefaults  = streamDefaults{100 * time.Millisecond, 30 * time.Millisecond, defaultMaxWarmup, 3, []int{64, 4 << 10, 64 << 10, 1 << 20}, 16, 32, "engine", "off"}
	rateDefaults    = streamDefaults{100 * time.Millisecond, 30 * time.Millisecond, defaultMaxWarmup, 3, []int{8, 64, 512}, 32, 64, "auto", "tcp"}
)

// defaultMaxWarmup is the longest warm-up of a point of the stream
// commands by default: most points' rates are steady well before it.
const defaultMaxWarmup = 300 * time.Millisecond

func (o *streamOpts) register(fs *flag.FlagSet, d streamDefaults) {
	o.duration, o.warmup, o.rounds, o.sizes, o.sends, o.recvs = d.duration, d.warmup, d.rounds, d.sizes, d.sends, d.recvs
	o.maxWarmup = d.maxWarmup
	o.ring, o.modes, o.transport, o.tcp, o.cc, o.seed = 4<<20, append([]dynproto.Mode(nil), measure.Modes...), d.transport, d.tcp, "cubic", 1
	registerTiming(fs, &o.duration, &o.warmup)
	fs.DurationVar(&o.maxWarmup, "warmup-max", o.maxWarmup, "warm each point up past --warmup until its rate holds steady (three 10 ms slices within 10% of each other), for at most this long; at or below --warmup, warm up for --warmup exactly")
	fs.IntVar(&o.rounds, "rounds", o.rounds, "rounds per point, interleaved with the other points; the median is reported")
	fs.Var(sizesFlag{&o.sizes}, "sizes", "message sizes: a list, with ranges (64..1M, 64..1M:4)")
	fs.Var(sizesFlag{&o.sizes}, "l", "shorthand for --sizes (iperf3's length)")
	fs.IntVar(&o.sends, "sends", o.sends, "outstanding sends")
	fs.IntVar(&o.recvs, "recvs", o.recvs, "outstanding recvs")
	fs.Var(sizeFlag{&o.ring}, "ring", "stream buffer (ring) size for indirect transfers")
	fs.Var(modesFlag{&o.modes}, "modes", "modes to run: direct-only, indirect-only, dynamic")
	if d.transport != "engine" {
		fs.StringVar(&o.transport, "transport", o.transport, "what to measure on: auto, "+measure.Names())
		fs.StringVar(&o.tcp, "tcp", o.tcp, "the TCP anchor: tcp (in this process), tcp-proc (to a child process) or off")
		registerTCP(fs, &o.cc)
	}
	registerOutput(fs, &o.json, &o.seed, &o.quiet)
	fs.BoolVar(&o.verify, "verify", false, "check every received byte against the sent stream (slower)")
	fs.BoolVar(&o.reuse, "reuse", false, "one buffer for every outstanding send and one for every outstanding recv, as ucx_perftest uses, instead of a buffer each (copy() anchors and TCP too); not with --verify")
}

// registerBeside registers the flags of what runs beside the measurements:
// the UCX anchor and a busy neighbour.
func (o *streamOpts) registerBeside(fs *flag.FlagSet) {
	o.ucx = "auto"
	fs.StringVar(&o.ucx, "ucx", o.ucx, "the UCX anchor: auto (ucx_perftest tag_bw and ucp_put_bw at each size, tag_lat at 64 B, over shared memory and cross-memory attach, when ucx_perftest is on PATH) or off")
	fs.BoolVar(&o.neighbour, "neighbour", false, "start one CPU-bound process (a loop on one thread) beside the run, as on a machine shared with other work")
}

// schedule is the measuring schedule, telling prog of each point.
func (o *streamOpts) schedule(prog *progress) measure.Schedule {
	return measure.Schedule{Seed: o.seed, Rounds: o.rounds, Warmup: o.warmup, MaxWarmup: o.maxWarmup, Duration: o.duration, Step: prog.step}
}

// openTransport opens the transport called name; an unknown name is a
// usage error.
func openTransport(name string) (measure.Transport, error) {
	t, err := measure.Open(name)
	if errors.Is(err, measure.ErrUnknownTransport) {
		return nil, usageError{err}
	}
	return t, err
}

// steady reports whether each point warms up until its rate is steady.
func (o *streamOpts) steady() bool { return o.maxWarmup > o.warmup }

// timing describes the measuring schedule.
func (o *streamOpts) timing() string {
	r := ""
	if o.rounds > 1 {
		r = fmt.Sprintf(", median of %d rounds", o.rounds)
	}
	if o.steady() {
		return fmt.Sprintf("%v per point after a warm-up until its rate is steady (at least %v, at most %v)%s; run order seed %d", o.duration, o.warmup, o.maxWarmup, r, o.seed)
	}
	return fmt.Sprintf("%v per point after %v warm-up%s; run order seed %d", o.duration, o.warmup, r, o.seed)
}

func registerTiming(fs *flag.FlagSet, duration, warmup *time.Duration) {
	fs.DurationVar(duration, "duration", *duration, "how long to measure each point")
	fs.DurationVar(duration, "t", *duration, "shorthand for --duration (iperf3's time)")
	fs.DurationVar(warmup, "warmup", *warmup, "how long to run each point before measuring")
	fs.DurationVar(warmup, "w", *warmup, "shorthand for --warmup")
}

func registerTCP(fs *flag.FlagSet, cc *string) {
	fs.StringVar(cc, "cc", *cc, "TCP congestion control set per socket (TCP_CONGESTION); '' keeps the system's")
	fs.StringVar(cc, "C", *cc, "shorthand for --cc (iperf3's)")
}

func registerOutput(fs *flag.FlagSet, json *string, seed *int64, quiet *bool) {
	fs.StringVar(json, "json", "", "also write the results as JSON to this file ('-' for stdout, instead of the table)")
	fs.Int64Var(seed, "seed", *seed, "seed for the order of runs and the payload pattern")
	fs.BoolVar(quiet, "quiet", false, "no progress display on stderr")
	fs.BoolVar(quiet, "q", false, "shorthand for --quiet")
}

// checkTiming checks that a command has no arguments after its flags, and
// its timing.
func checkTiming(e *env, duration, warmup time.Duration) error {
	if len(e.args) > 0 {
		return usagef("unexpected argument %q", e.args[0])
	}
	if err := durationOK("duration", duration, false); err != nil {
		return usageError{err}
	}
	if err := durationOK("warmup", warmup, true); err != nil {
		return usageError{err}
	}
	return nil
}

// checkTCP checks the choice of TCP anchor.
func checkTCP(tcp string) error {
	switch tcp {
	case "tcp", "tcp-proc", "off":
		return nil
	}
	return usagef("--tcp %q: want tcp, tcp-proc or off", tcp)
}

func (o *streamOpts) check(e *env) error {
	if err := checkTiming(e, o.duration, o.warmup); err != nil {
		return err
	}
	if err := durationOK("warmup-max", o.maxWarmup, true); err != nil {
		return usageError{err}
	}
	if o.rounds < 1 || o.rounds > 1000 {
		return usagef("--rounds must be between 1 and 1000")
	}
	if o.sends < 1 || o.recvs < 1 || o.sends > 4096 || o.recvs > 4096 {
		return usagef("--sends and --recvs must be between 1 and 4096")
	}
	if len(o.modes) == 0 || len(o.sizes) == 0 {
		return usagef("no modes or no sizes")
	}
	if o.reuse && o.verify {
		return usagef("--reuse with --verify: the outstanding recvs share one buffer, so their bytes cannot be checked")
	}
	if err := checkTCP(o.tcp); err != nil {
		return err
	}
	if o.ucx != "" && o.ucx != "auto" && o.ucx != "off" {
		return usagef("--ucx %q: want auto or off", o.ucx)
	}
	for _, s := range o.sizes {
		if s > 64<<20 {
			return usagef("size %s: at most 64 MiB (buffers for every outstanding operation are allocated)", measure.SizeName(s))
		}
		if mem := int64(s) * int64(o.sends+o.recvs); mem > 4<<30 {
			return usagef("size %s with %d sends and %d recvs needs %d MiB of buffers: too much", measure.SizeName(s), o.sends, o.recvs, mem>>20)
		}
	}
	return nil
}
