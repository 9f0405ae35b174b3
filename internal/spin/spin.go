// Package spin paces the module's waits that spin before they block: a
// Dequeue on an event queue (eventq), a socket's progress goroutine with
// nothing to do (exs), a same-host connection's receiver with empty rings
// (verbs/shm). Each checks its own condition and blocks in its own way;
// this package decides, between two checks, how to yield the processor and
// when the spin is over, so that the three spin alike and are tuned in one
// place. While more threads are runnable than there are CPUs (CPUs shared
// with other work; the process's own running goroutines beyond one do not
// count), bounded spins are cut to ContendedSpin (contention.go).
//
// A spin yields with runtime.Gosched between checks, so that the other
// goroutines of its P run: with one P per process, the goroutines a wait
// is waiting for often run on the same P. It reads the clock on every
// eighth check only (a reading costs about as much as a check and a
// yield), and it also ends after a number of checks that bounds it where
// the clock does not move while goroutines run (testing/synctest).
package spin

import (
	"runtime"
	"time"
)

// clockEvery is how many checks pass between readings of the clock.
const clockEvery = 8

// iterCost is the assumed least cost of one check and yield: a spin of
// duration d makes at most d/iterCost checks.
const iterCost = 20 * time.Nanosecond

// Verdict is what a spin should do after a check that found nothing.
type Verdict uint8

const (
	// Again: check again (the processor has been yielded).
	Again Verdict = iota
	// Block: the spin time is used up; block.
	Block
	// Expired: the deadline has passed.
	Expired
)

// Spin is the state of one spinning wait, owned by the waiting goroutine.
// The zero Spin spins until its deadline, if it has one (busy polling);
// For returns one that spins for a time.
type Spin struct {
	bounded     bool          // limit applies
	limit       time.Duration // how long to spin, if bounded
	maxIter     int
	deadline    time.Time
	hasDeadline bool
	start       time.Time
	i           int
}

// For returns a spin that ends, with Block, once it has spun for d, or at
// its first Next if d <= 0.
func For(d time.Duration) Spin {
	d = max(d, 0)
	return Spin{bounded: true, limit: d, maxIter: int(d / iterCost)}
}

// SetDeadline makes the spin end, with Expired, once t has passed.
func (s *Spin) SetDeadline(t time.Time) { s.deadline, s.hasDeadline = t, true }

// Reset starts the spin again, as after a check that found work.
func (s *Spin) Reset() { s.i = 0 }

// Next is called after a check that found nothing. It yields the processor
// and returns Again, or, reading the clock on every eighth call (the first
// included), returns Expired once the deadline has passed and Block once
// the spin time is used up, or, for any spin, while a watched socket's
// input waits for the runtime to poll the network (Watch).
func (s *Spin) Next() Verdict {
	i := s.i
	s.i++
	if i%clockEvery != 0 {
		runtime.Gosched()
		return Again
	}
	if s.bounded && s.limit == 0 {
		return Block
	}
	watched := inputs.n.Load() != 0
	if !s.bounded && !s.hasDeadline && !watched {
		runtime.Gosched()
		return Again
	}
	now := time.Now()
	if watched && inputWaiting(int64(now.Sub(epoch))) {
		return Block // for the runtime to poll the network (input.go)
	}
	if !s.bounded && !s.hasDeadline {
		runtime.Gosched()
		return Again
	}
	if i == 0 {
		s.start = now
	}
	if s.hasDeadline && !now.Before(s.deadline) {
		return Expired
	}
	if s.bounded && i > 0 && (i >= s.maxIter || now.Sub(s.start) >= limit(s.limit, now)) {
		return Block
	}
	runtime.Gosched()
	return Again
}
