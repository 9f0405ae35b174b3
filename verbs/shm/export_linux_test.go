package shm

import "time"

// SetSleepCap sets the longest futex sleep of every receiver.
func SetSleepCap(d time.Duration) { sleepCap = d }

// SetParkLease sets how long a receiver goroutine parks for a poller
// before it looks again, and returns the previous value.
func SetParkLease(d time.Duration) time.Duration {
	return time.Duration(parkLease.Swap(int64(d)))
}

// Unpolls returns how many times pollers of p's connections said they stop
// polling (Unpoll, before a CQ wait blocks).
func Unpolls(p *Provider) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var n uint64
	for l := range p.links {
		n += l.unpolls.Load()
	}
	return n
}

// mustNew is New for the package's tests, whose options are constants: an
// error is a bug of the test, and it panics.
func mustNew(opts ...Option) *Provider {
	p, err := New(opts...)
	if err != nil {
		panic(err)
	}
	return p
}
