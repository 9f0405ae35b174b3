package shm

import "time"

// SetSleepCap sets the longest futex sleep of every receiver.
func SetSleepCap(d time.Duration) { sleepCap = d }

// mustNew is New for the package's tests, whose options are constants: an
// error is a bug of the test, and it panics.
func mustNew(opts ...Option) *Provider {
	p, err := New(opts...)
	if err != nil {
		panic(err)
	}
	return p
}
