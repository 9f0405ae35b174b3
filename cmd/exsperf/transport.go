package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/exsgo/exs/dynproto"
)

// A transport connects pairs of endpoints for measurements: the seam between
// what exsperf measures (the paper's experiments and the anchors) and what it
// measures it on. Each measurement opens a fresh pair.
type transport interface {
	// Name is the short name used by --transport and in reports.
	Name() string
	// Describe says in one line what a pair is and how CPU is attributed.
	Describe() string
	// HasModes reports whether pairs run the protocol engine, so that
	// pairParams.Mode and the percentage of direct bytes mean something.
	HasModes() bool
	// Open connects a pair. The pair is used by one goroutine at a time.
	Open(ctx context.Context, p pairParams) (pair, error)
	// Close releases what the transport holds across pairs (a child
	// process, a listener). Pairs must be closed first.
	Close() error
}

// A pair is two connected endpoints: one sends n-byte messages, the other
// receives them.
type pair interface {
	// Stream keeps Sends sends and Recvs recvs of Size bytes outstanding
	// for warmup and then for d, and reports what happened during d.
	Stream(ctx context.Context, warmup, d time.Duration) (result, error)
	// PingPong bounces one Size-byte message back and forth for warmup and
	// then for d, and returns the round-trip times measured during d.
	PingPong(ctx context.Context, warmup, d time.Duration, w waitMode) ([]time.Duration, error)
	// Close disconnects the pair; nothing is in flight between calls.
	Close() error
}

// pairParams sets up a pair.
type pairParams struct {
	Mode  dynproto.Mode // ignored when !HasModes
	Size  int           // message size in bytes
	Sends int           // outstanding sends
	Recvs int           // outstanding recvs
	Ring  int           // stream buffer bytes
	Link  *linkParams   // emulated distance; nil for none
	// AdvertsFirst (with Link) starts the sender once the receiver's first
	// ADVERTs have arrived, instead of together with the receiver.
	AdvertsFirst bool
	Verify       bool   // check every received byte
	Seed         int64  // payload pattern
	CC           string // TCP congestion control ("" for the system's)
	// Wait is how the sides of a transport with threads wait (0: the
	// transport's default); PingPong must be asked for the same.
	Wait waitMode
}

// result is what a stream measurement saw during its measured interval.
// CPU figures are -1 when unknown.
type result struct {
	Bytes   int64         // payload bytes received
	Msgs    int64         // sends completed
	Elapsed time.Duration // the measured interval
	Virtual bool          // Elapsed is emulated time, not wall time

	HasDirect     bool // the following four mean something
	BytesDirect   uint64
	BytesIndirect uint64
	XfersDirect   uint64
	XfersIndirect uint64

	CPUSend  time.Duration // the sending side
	CPURecv  time.Duration // the receiving side
	CPUTotal time.Duration // both sides (whole processes)

	Note string // e.g. the congestion control a TCP run used

	Rounds           int       // rounds this median was taken from (0: one)
	MinGBps, MaxGBps float64   // the range of the rounds' throughputs
	RoundGBps        []float64 // each round's throughput, in the order of the rounds
}

func (r result) gbps() float64 { return float64(r.Bytes) / r.Elapsed.Seconds() / 1e9 }

func (r result) msgRate() float64 { return float64(r.Msgs) / r.Elapsed.Seconds() }

// pctDirect is the percentage of payload bytes sent directly, or -1.
func (r result) pctDirect() float64 {
	t := r.BytesDirect + r.BytesIndirect
	if !r.HasDirect || t == 0 {
		return -1
	}
	return 100 * float64(r.BytesDirect) / float64(t)
}

// cpuPerGB converts a CPU time to seconds per GB received, or -1.
func (r result) cpuPerGB(c time.Duration) float64 {
	if c < 0 || r.Bytes == 0 {
		return -1
	}
	return c.Seconds() / (float64(r.Bytes) / 1e9)
}

// waitMode says how a side waits for its peer.
type waitMode uint8

const (
	waitBlock    waitMode = iota + 1 // sleep in the kernel or the Go scheduler
	waitBusy                         // spin
	waitInline                       // nothing to wait for: one goroutine runs both sides
	waitAdaptive                     // spin briefly, then block (exs's default)
)

func (w waitMode) String() string {
	switch w {
	case waitBlock:
		return "blocking"
	case waitBusy:
		return "busy-poll"
	case waitInline:
		return "inline"
	case waitAdaptive:
		return "adaptive"
	}
	return fmt.Sprintf("waitMode(%d)", uint8(w))
}

var modes = []dynproto.Mode{dynproto.DirectOnly, dynproto.IndirectOnly, dynproto.Dynamic}

func parseModes(s string) ([]dynproto.Mode, error) {
	var out []dynproto.Mode
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		found := false
		for _, m := range modes {
			if f == m.String() || (f == "direct" && m == dynproto.DirectOnly) || (f == "indirect" && m == dynproto.IndirectOnly) {
				out, found = append(out, m), true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown mode %q (want direct-only, indirect-only or dynamic)", f)
		}
	}
	return out, nil
}

// transports lists what --transport accepts, in order of preference for
// "auto". A constructor returns errUnavailable when the transport cannot run
// in this build or on this host yet.
var transports = []struct {
	name string
	help string
	make func() (transport, error)
}{
	{"exs-shm", "exs sockets to a child exsperf process over the same-host provider (shm:, Linux)", func() (transport, error) { return startExsProc(context.Background()) }},
	{"exs-tcp", "exs sockets to a child exsperf process over the TCP provider on loopback (tcp:, Linux)", func() (transport, error) { return startExsTCP(context.Background()) }},
	{"exs-tcp-netns", "exs sockets to a child exsperf process in another network namespace, over the TCP provider and a veth pair (Linux, root, iproute2)", func() (transport, error) { return startExsTCPNetns(context.Background()) }},
	{"exs", "exs sockets over the in-process verbs provider, both sides in this process", func() (transport, error) { return exsTransport{}, nil }},
	{"engine", "dynproto engines over process memory, one goroutine (protocol cost only)", func() (transport, error) { return engineTransport{}, nil }},
	{"tcp", "plain Go TCP over loopback, two goroutines in this process (anchor)", func() (transport, error) { return &tcpTransport{}, nil }},
	{"tcp-proc", "plain Go TCP over loopback to a child exsperf process (anchor)", func() (transport, error) { return newProcTransport("tcp") }},
}

// errUnavailable marks a transport that cannot run here (yet).
var errUnavailable = fmt.Errorf("transport not available")

func transportNames() string {
	var b strings.Builder
	for i, t := range transports {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(t.name)
	}
	return b.String()
}

// openTransport returns the transport called name: an unknown name is a
// usageError, a transport that fails to start a plain error. "auto" is exs-shm (a
// child process as the peer over the same-host provider) or, when that
// cannot run here, exs over the in-process provider, with a note that says
// why (transportNotes).
func openTransport(name string) (transport, error) {
	if name == "auto" {
		t, err := startExsProc(context.Background())
		if err == nil {
			return t, nil
		}
		return fallbackTransport{exsTransport{}, fmt.Sprintf("the same-host provider could not run here (%v): measured instead with exs over the in-process provider, both sides in this process", err)}, nil
	}
	for _, t := range transports {
		if t.name == name {
			return t.make()
		}
	}
	return nil, usagef("unknown transport %q (want auto, %s)", name, transportNames())
}

// autoTransport is what "auto" means where the same-host provider runs.
var autoTransport = "exs-shm"

// window finds the edges of a measured interval: the first check at or after
// warmup starts it, and the first check at least d after that start ends it,
// so that the interval is never shorter than d, however long a step takes.
// The zero value with warmup and d set is ready to use.
type window struct {
	warmup, d time.Duration
	start     time.Duration
	phase     int // 0 warming up, 1 measuring, 2 done
}

// Edges check reports.
const (
	edgeNone  = 0
	edgeStart = 1
	edgeEnd   = 2
)

// check takes the time elapsed since the run began and reports whether it
// is an edge of the interval.
func (w *window) check(el time.Duration) int {
	switch w.phase {
	case 0:
		if el >= w.warmup {
			w.phase, w.start = 1, el
			return edgeStart
		}
	case 1:
		if el-w.start >= w.d {
			w.phase = 2
			return edgeEnd
		}
	}
	return edgeNone
}
