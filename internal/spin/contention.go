package spin

import (
	"sync"
	"sync/atomic"
	"time"
)

// On a machine whose CPUs are shared with other work, a spin that keeps
// its CPU for the whole spin time takes that time from whatever else the
// kernel would run there, often the very peer the spin waits for, and the
// kernel then preempts the spinner in the middle of its useful work. So
// while the process is being preempted, spins are cut to ContendedSpin: a
// waiter then blocks soon and is woken by the kernel, as a blocking
// socket's reader is. The sign of contention is the kernel's count of the
// process's involuntary context switches (getrusage), sampled by spinning
// goroutines at most once per window.

// ContendedSpin is the longest spin while the process is being preempted.
const ContendedSpin = 5 * time.Microsecond

const (
	// window is the shortest time over which preemptions are counted.
	window = 10 * time.Millisecond
	// contendedRate is the number of involuntary context switches per
	// window from which the process counts as contended: two exs processes
	// streaming small messages on two otherwise idle vCPUs saw 350-430 per
	// second, with a CPU-bound process beside them 1,600-2,000.
	contendedRate = 10
	// hold is how long the process counts as contended after a window
	// with that many.
	hold = 100 * time.Millisecond
)

// epoch is the origin of the detector's times (monotonic).
var epoch = time.Now()

// detector decides from samples of the preemption count whether the
// process is contended. It is shared by the process's spinning goroutines.
type detector struct {
	next  atomic.Int64 // time from which the next sample is due
	until atomic.Int64 // contended before this time
	mu    sync.Mutex   // the sampler; TryLock, so that spinners never wait
	start int64        // the window's start, under mu
	count int64        // the preemption count at start, under mu
	valid bool         // start and count are set, under mu
	n     atomic.Uint64
}

// contended reports whether the process counts as contended at now.
func (d *detector) contended(now int64) bool { return now < d.until.Load() }

// due reports whether a sample is due at now.
func (d *detector) due(now int64) bool { return now >= d.next.Load() }

// observe takes a sample, count preemptions so far at now, if no other
// goroutine is taking one.
func (d *detector) observe(now, count int64) {
	if !d.mu.TryLock() {
		return
	}
	defer d.mu.Unlock()
	if now < d.next.Load() {
		return
	}
	d.next.Store(now + int64(window))
	if d.valid {
		elapsed := now - d.start
		if elapsed <= 0 {
			return
		}
		// Preemptions per window, over however long the samples are apart.
		if (count-d.count)*int64(window) >= contendedRate*elapsed {
			if d.until.Load() <= now {
				d.n.Add(1)
			}
			d.until.Store(now + int64(hold))
		}
	}
	d.start, d.count, d.valid = now, count, true
}

// proc is the process's detector.
var proc detector

// limit is the spin time for a spin of d at now, sampling the preemption
// count if a sample is due.
func limit(d time.Duration, now time.Time) time.Duration {
	t := int64(now.Sub(epoch))
	if proc.due(t) {
		if c, ok := preemptions(); ok {
			proc.observe(t, c)
		}
	}
	if d > ContendedSpin && proc.contended(t) {
		return ContendedSpin
	}
	return d
}

// Contentions is how many times spins were cut since the process started:
// the windows in which it began to count as contended.
func Contentions() uint64 { return proc.n.Load() }
