package spin

import (
	"sync"
	"sync/atomic"
	"time"
)

// A goroutine waiting in the Go runtime's network poller (a socket read
// that found nothing) is woken only when a processor polls the network,
// which the scheduler does when it has nothing else to run, or its monitor
// every 10 ms: while goroutines spin, yielding with runtime.Gosched, the
// scheduler always has something to run. With one P, a spinning waiter
// then delays every socket's input for its whole spin (a busy-polling
// socket over TCP made 10 ms round trips). So sockets read through the
// poller are watched (Watch): while one of them has input and its reader
// is parked, spins end, so that the processors fall idle and the runtime
// polls the network. The spin whose probe sees such input ends at once
// (the goroutine it waits for is often that input's reader, as in a round
// trip between two sockets of one process); input seen twice, probeEvery
// apart, ends every spin for a while (once: an idle processor would have
// taken it in between).

// Input is a descriptor whose reader waits in the network poller. Its
// reader sets Parked before it parks and clears it when it runs again.
type Input struct {
	fd     atomic.Int64 // -1 until set
	parked atomic.Bool
}

// NewInput returns an Input with no descriptor yet.
func NewInput() *Input {
	in := &Input{}
	in.fd.Store(-1)
	return in
}

// SetFD sets the descriptor.
func (in *Input) SetFD(fd uintptr) { in.fd.Store(int64(fd)) }

// Park says whether the reader is parked in the poller (true) or running
// (false).
func (in *Input) Park(parked bool) { in.parked.Store(parked) }

const (
	// probeEvery is how often, at most, spinners look at the watched
	// inputs (one poll(2) for all of them).
	probeEvery = 5 * time.Microsecond
	// endFor is how long spins end at once after input was seen waiting
	// twice: long enough for every spinner to see it at its next check.
	endFor = 20 * time.Microsecond
)

var inputs struct {
	n     atomic.Int32             // inputs watched
	snap  atomic.Pointer[[]*Input] // the inputs watched, for the prober
	mu    sync.Mutex               // Watch and its undoing
	set   map[*Input]struct{}      // under mu
	probe sync.Mutex               // the prober; TryLock
	next  atomic.Int64             // time from which a probe is due
	until atomic.Int64             // spins end before this time
	seen  int64                    // time input was first seen waiting, 0: none; under probe
	fds   []pollFD                 // under probe
}

// Watch adds in to the inputs spins look at and returns the function that
// removes it: call it once its reader no longer reads.
func Watch(in *Input) (unwatch func()) {
	inputs.mu.Lock()
	defer inputs.mu.Unlock()
	if inputs.set == nil {
		inputs.set = make(map[*Input]struct{})
	}
	inputs.set[in] = struct{}{}
	publishLocked()
	var once sync.Once
	return func() {
		once.Do(func() {
			inputs.mu.Lock()
			defer inputs.mu.Unlock()
			delete(inputs.set, in)
			publishLocked()
		})
	}
}

// publishLocked publishes the set's snapshot. inputs.mu is held.
func publishLocked() {
	s := make([]*Input, 0, len(inputs.set))
	for in := range inputs.set {
		s = append(s, in)
	}
	inputs.snap.Store(&s)
	inputs.n.Store(int32(len(s)))
}

// inputWaiting reports whether spins should end at now (nanoseconds
// since epoch) for the runtime to poll the network, probing the watched
// inputs if a probe is due.
func inputWaiting(now int64) bool {
	if inputs.n.Load() == 0 {
		return false
	}
	if now < inputs.until.Load() {
		return true
	}
	if now < inputs.next.Load() || !inputs.probe.TryLock() {
		return false
	}
	defer inputs.probe.Unlock()
	if now < inputs.next.Load() {
		return false
	}
	inputs.next.Store(now + int64(probeEvery))
	inputs.fds = inputs.fds[:0]
	for _, in := range *inputs.snap.Load() {
		if fd := in.fd.Load(); fd >= 0 && in.parked.Load() {
			inputs.fds = append(inputs.fds, newPollFD(fd))
		}
	}
	if len(inputs.fds) == 0 || !readable(inputs.fds) {
		inputs.seen = 0
		return false
	}
	if inputs.seen == 0 {
		inputs.seen = now
		return true // this spin only
	}
	inputs.seen = 0
	inputs.until.Store(now + int64(endFor))
	return true
}
