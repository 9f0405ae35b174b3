// Package measure is what exsperf measures, apart from how it reports it:
// the transports that connect pairs of endpoints (exs sockets to a child
// process over the same-host provider or within this process, the protocol
// engine over process memory or an emulated link, plain TCP), the anchors
// measured beside them (copy() once, twice and on two CPUs), the rounds in
// which points are measured, and the servers and clients that measure
// between processes or hosts.
//
// A Transport opens a Pair per measurement; a Pair streams (Stream) or
// bounces a message (PingPong) for a warm-up and then a measured interval,
// and returns what happened in that interval as a Result. Everything here
// runs on one goroutine at a time unless a type says otherwise.
package measure

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/exsgo/exs/dynproto"
)

// A Transport connects pairs of endpoints for measurements: the seam between
// what exsperf measures (the paper's experiments and the anchors) and what it
// measures it on. Each measurement opens a fresh pair.
type Transport interface {
	// Name is the short name used by --transport and in reports.
	Name() string
	// Describe says in one line what a pair is and how CPU is attributed.
	Describe() string
	// Open connects a pair. The pair is used by one goroutine at a time.
	Open(ctx context.Context, p Params) (Pair, error)
	// Close releases what the transport holds across pairs (a child
	// process, a listener). Pairs must be closed first.
	Close() error
}

// A Pair is two connected endpoints: one sends n-byte messages, the other
// receives them.
type Pair interface {
	// Stream keeps Sends sends and Recvs recvs of Size bytes outstanding
	// for warmup and then for d, and reports what happened during d.
	Stream(ctx context.Context, warmup, d time.Duration) (Result, error)
	// PingPong bounces one Size-byte message back and forth for warmup and
	// then for d, and returns the round-trip times measured during d.
	PingPong(ctx context.Context, warmup, d time.Duration, w WaitMode) ([]time.Duration, error)
	// Close disconnects the pair; nothing is in flight between calls.
	Close() error
}

// Params sets up a pair.
type Params struct {
	Mode  dynproto.Mode // ignored by the TCP transports
	Size  int           // message size in bytes
	Sends int           // outstanding sends
	Recvs int           // outstanding recvs
	Ring  int           // stream buffer bytes
	Link  *Link         // emulated distance; nil for none
	// AdvertsFirst (with Link) starts the sender once the receiver's first
	// ADVERTs have arrived, instead of together with the receiver.
	AdvertsFirst bool
	Verify       bool // check every received byte
	// Reuse gives every outstanding send one buffer and every outstanding
	// recv one buffer, as ucx_perftest does, instead of a buffer each: the
	// memory a stream touches then fits in the caches. Not with Verify.
	Reuse bool
	Seed  int64  // payload pattern
	CC    string // TCP congestion control ("" for the system's)
	// Wait is how the sides of a transport with threads wait (0: the
	// transport's default); PingPong must be asked for the same.
	Wait WaitMode
	// MaxWarmup, above the warm-up a stream is given, makes that warm-up a
	// minimum: the stream warms up until its rate is steady (window), for
	// at most MaxWarmup.
	MaxWarmup time.Duration
}

// Buffers is how many distinct buffers n outstanding operations use: n,
// or 1 with Reuse.
func (p Params) Buffers(n int) int {
	if p.Reuse {
		return min(n, 1)
	}
	return n
}

// Result is what a stream measurement saw during its measured interval.
// CPU figures are -1 when unknown.
type Result struct {
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

	Latency time.Duration // a latency anchor's one-way latency (UCX tag_lat), else 0

	Warmup   time.Duration // the warm-up this stream took
	Unsteady bool          // it stopped at Params.MaxWarmup without a steady rate

	Rounds           int       // rounds this median was taken from (0: one)
	MinGBps, MaxGBps float64   // the range of the rounds' throughputs
	RoundGBps        []float64 // each round's throughput, in the order of the rounds
	RoundWarmups     []time.Duration
	UnsteadyRounds   int // rounds whose warm-up stopped without a steady rate
}

// GBps is the throughput in GB/s (10^9 bytes per second).
func (r Result) GBps() float64 { return float64(r.Bytes) / r.Elapsed.Seconds() / 1e9 }

// MsgRate is the rate of completed sends per second.
func (r Result) MsgRate() float64 { return float64(r.Msgs) / r.Elapsed.Seconds() }

// PctDirect is the percentage of payload bytes sent directly, or -1.
func (r Result) PctDirect() float64 {
	t := r.BytesDirect + r.BytesIndirect
	if !r.HasDirect || t == 0 {
		return -1
	}
	return 100 * float64(r.BytesDirect) / float64(t)
}

// CPUPerGB converts a CPU time to seconds per GB received, or -1.
func (r Result) CPUPerGB(c time.Duration) float64 {
	if c < 0 || r.Bytes == 0 {
		return -1
	}
	return c.Seconds() / (float64(r.Bytes) / 1e9)
}

// WaitMode says how a side waits for its peer.
type WaitMode uint8

const (
	WaitBlock    WaitMode = iota + 1 // sleep in the kernel or the Go scheduler
	WaitBusy                         // spin
	WaitInline                       // nothing to wait for: one goroutine runs both sides
	WaitAdaptive                     // spin briefly, then block (exs's default)
)

func (w WaitMode) String() string {
	switch w {
	case WaitBlock:
		return "blocking"
	case WaitBusy:
		return "busy-poll"
	case WaitInline:
		return "inline"
	case WaitAdaptive:
		return "adaptive"
	}
	return fmt.Sprintf("waitMode(%d)", uint8(w))
}

// Modes are the protocol's modes, in table order.
var Modes = []dynproto.Mode{dynproto.DirectOnly, dynproto.IndirectOnly, dynproto.Dynamic}

// ParseModes parses a comma-separated list of modes: direct-only (or
// direct), indirect-only (or indirect), dynamic.
func ParseModes(s string) ([]dynproto.Mode, error) {
	var out []dynproto.Mode
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		found := false
		for _, m := range Modes {
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

// ParseWait parses a wait mode: busy (busy-poll, poll), block (blocking,
// notify) or adaptive.
func ParseWait(s string) (WaitMode, error) {
	switch strings.TrimSpace(s) {
	case "busy", "busy-poll", "poll":
		return WaitBusy, nil
	case "block", "blocking", "notify":
		return WaitBlock, nil
	case "adaptive":
		return WaitAdaptive, nil
	}
	return 0, fmt.Errorf("bad wait mode %q (want busy, block or adaptive)", s)
}

// window finds the edges of a measured interval: the first check at or after
// the warm-up starts it, and the first check at least d after that start ends
// it, so that the interval is never shorter than d, however long a step takes.
//
// With max above warmup the warm-up is a minimum: it goes on until the rate
// holds steady (the rates of the last steadySlices slices of at least
// steadySlice each lie within steadyTol of one another), and stops at max
// regardless, noting that the rate was not steady. The rate is the bytes
// the caller passes to check per unit of elapsed time, so the same logic
// runs on a fake clock in the tests. The zero value with warmup and d set
// is a fixed warm-up, ready to use.
type window struct {
	warmup, d time.Duration
	max       time.Duration // the longest warm-up; at or below warmup: exactly warmup
	start     time.Duration // the elapsed time at the start edge: the warm-up taken
	startB    int64         // the bytes moved at the start edge
	phase     int           // 0 warming up, 1 measuring, 2 done
	unsteady  bool          // the warm-up reached max without a steady rate

	// The slices of the warm-up: where the current one began, and the
	// rates of the last ones, newest first.
	sliceAt    time.Duration
	sliceBytes int64
	rates      [steadySlices]float64
	nrates     int
}

// The steady-rate warm-up: slices of at least steadySlice, the last
// steadySlices of them within steadyTol (highest / lowest - 1).
const (
	steadySlice  = 10 * time.Millisecond
	steadySlices = 3
	steadyTol    = 0.10
)

// newWindow returns a window with a warm-up of at least warmup that goes on
// until the rate is steady, up to most (with most <= warmup: exactly
// warmup), and a measured interval of d.
func newWindow(warmup, most, d time.Duration) window {
	return window{warmup: warmup, max: most, d: d}
}

// Edges check reports.
const (
	edgeNone  = 0
	edgeStart = 1
	edgeEnd   = 2
)

// check takes the time elapsed since the run began and the bytes moved so
// far, and reports whether it is an edge of the interval.
func (w *window) check(el time.Duration, bytes int64) int {
	switch w.phase {
	case 0:
		if w.warm(el, bytes) {
			w.phase, w.start, w.startB = 1, el, bytes
			return edgeStart
		}
	case 1:
		// An interval in which nothing moved yet goes on until something
		// does, up to starvedStretch times its length: on a loaded machine
		// a short interval can pass while the run's goroutines wait for a
		// CPU, and its rate would read 0.
		if span := el - w.start; span >= w.d && (bytes > w.startB || span >= starvedStretch*w.d) {
			w.phase = 2
			return edgeEnd
		}
	}
	return edgeNone
}

// starvedStretch bounds how far an interval in which nothing moved is
// stretched.
const starvedStretch = 10

// warm reports whether the warm-up is over at el, with bytes moved.
func (w *window) warm(el time.Duration, bytes int64) bool {
	if w.max <= w.warmup {
		return el >= w.warmup
	}
	if span := el - w.sliceAt; span >= steadySlice {
		copy(w.rates[1:], w.rates[:steadySlices-1])
		w.rates[0] = float64(bytes-w.sliceBytes) / span.Seconds()
		w.nrates++
		w.sliceAt, w.sliceBytes = el, bytes
	}
	switch {
	case el >= w.max:
		w.unsteady = !w.steady()
		return true
	case el >= w.warmup:
		return w.steady()
	}
	return false
}

// steady reports whether the last steadySlices slices' rates lie within
// steadyTol of one another.
func (w *window) steady() bool {
	if w.nrates < steadySlices {
		return false
	}
	lo, hi := w.rates[0], w.rates[0]
	for _, r := range w.rates[1:] {
		lo, hi = min(lo, r), max(hi, r)
	}
	return lo > 0 && hi <= lo*(1+steadyTol)
}
