package spin

import (
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// On a machine whose CPUs are shared with other work, a spin that keeps
// its CPU for the whole spin time takes that time from whatever else the
// kernel would run there, often the very peer the spin waits for, and the
// kernel then preempts the spinner in the middle of its useful work. So
// while more threads are runnable than there are CPUs, spins are cut to
// ContendedSpin: a waiter then blocks soon and is woken by the kernel, as
// a blocking socket's reader is. The count of runnable threads is the
// kernel's (the fourth field of /proc/loadavg, the sampler included),
// sampled by spinning goroutines at most once per window and smoothed.
// It is the whole system's, compared with the CPUs this process may use
// (runtime.NumCPU): in a container given a few of a large host's CPUs, the
// host's other threads count too and spins are cut more often than they
// need be; under a CPU quota alone, less often.
//
// The process's own threads beyond one do not count (the goroutines
// running in it at the sample, the sampler included, less one): with more
// than one P, cutting the spins for the process's own threads makes it
// block where it would have gone on, and while one of its Ps is idle every
// runtime.Gosched of its other spinning goroutines, and every wake-up of
// one of them, wakes a thread for that P (runtime.wakep, a futex call).
// Two exs processes streaming 64-byte messages with Go's default
// GOMAXPROCS on 2 vCPUs ran at 0.33-0.61 M msgs/s counting their own
// threads and 0.42-0.72 without them; not cutting at all with more than
// one P gave 0.93-1.16 there, but lost to the cut beside another process
// using a CPU (0.16-0.23 against 0.25-0.34) (docs/performance.md, "64 B
// message rate at Go's default GOMAXPROCS").

// ContendedSpin is the longest spin while the CPUs are contended.
const ContendedSpin = 5 * time.Microsecond

const (
	// window is the shortest time between two samples.
	window = 10 * time.Millisecond
	// hold is how long the CPUs count as contended after a sample that
	// found them so.
	hold = 100 * time.Millisecond
	// smooth is the weight of the past in the running average: each
	// sample counts for 1/smooth.
	smooth = 4
	// fixed is the running average's scale (fixed point).
	fixed = 16
)

// limitRunnable is the running average of runnable threads (sampler
// included, times fixed) above which the CPUs count as contended: one and
// a half more than there are CPUs. Two exs processes streaming 64-byte
// messages on an otherwise idle 2-vCPU machine averaged 2.9 (samples of
// 1-5), with a CPU-bound process beside them 4.5 (4-6).
var limitRunnable = int64(runtime.NumCPU())*fixed + fixed*3/2

// epoch is the origin of the detector's times (monotonic).
var epoch = time.Now()

// detector decides from samples of the runnable count whether the CPUs
// are contended. It is shared by the process's spinning goroutines.
type detector struct {
	next  atomic.Int64 // time from which the next sample is due
	until atomic.Int64 // contended before this time
	n     atomic.Uint64
	mu    sync.Mutex // the sampler; TryLock, so that spinners never wait
	// own returns how many goroutines of this process run now, the
	// sampler included (ownRunning if nil), under mu.
	own     func() int64
	running [1]metrics.Sample // ownRunning's, under mu
	avg     int64             // running average of the samples, times fixed, under mu
	valid   bool              // avg holds a sample, under mu
}

// contended reports whether the CPUs count as contended at now.
func (d *detector) contended(now int64) bool { return now < d.until.Load() }

// due reports whether a sample is due at now.
func (d *detector) due(now int64) bool { return now >= d.next.Load() }

// sample takes a sample at now with read, unless another goroutine is
// taking one or it is not due: one goroutine reads at a time.
func (d *detector) sample(now int64, read func() (int64, bool)) {
	if !d.mu.TryLock() {
		return
	}
	defer d.mu.Unlock()
	if now < d.next.Load() {
		return
	}
	d.next.Store(now + int64(window))
	if r, ok := read(); ok {
		own := d.own
		if own == nil {
			own = d.ownRunning
		}
		d.observeLocked(now, max(r-max(own()-1, 0), 0))
	}
}

// observeLocked takes runnable, the runnable threads at now, into the
// average. d.mu is held.
func (d *detector) observeLocked(now, runnable int64) {
	if !d.valid {
		d.avg, d.valid = runnable*fixed, true
	} else {
		d.avg = (d.avg*(smooth-1) + runnable*fixed) / smooth
	}
	if d.avg > limitRunnable {
		if d.until.Load() <= now {
			d.n.Add(1)
		}
		d.until.Store(now + int64(hold))
	}
}

// ownRunning returns how many goroutines of this process run now, the
// caller included: the Ps running Go code. d.mu is held.
func (d *detector) ownRunning() int64 {
	s := d.running[:]
	s[0].Name = "/sched/goroutines/running:goroutines"
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 1
	}
	return int64(s[0].Value.Uint64())
}

// proc is the process's detector.
var proc detector

// limit is the spin time for a spin of d at now, sampling the runnable
// count if a sample is due.
func limit(d time.Duration, now time.Time) time.Duration {
	t := int64(now.Sub(epoch))
	if proc.due(t) {
		proc.sample(t, runnable)
	}
	if d > ContendedSpin && proc.contended(t) {
		return ContendedSpin
	}
	return d
}

// Contentions is how many times spins began to be cut since the process
// started.
func Contentions() uint64 { return proc.n.Load() }
