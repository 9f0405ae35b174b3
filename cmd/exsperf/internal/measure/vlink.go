package measure

import (
	"container/heap"
	"fmt"
	"math"
	"time"

	"github.com/exsgo/exs/dynproto"
)

// Link describes an emulated link: a round-trip time and a bandwidth.
type Link struct {
	RTT       time.Duration
	Bandwidth float64 // bits per second; 0 means unlimited
}

func (l Link) String() string {
	return fmt.Sprintf("%v round trip at %s", l.RTT, BitRate(l.Bandwidth))
}

// vlink emulates distance for an engine pair in virtual time, as a
// discrete-event simulation. Each direction is a FIFO link: a frame or write
// of n bytes leaves when the link is free, occupies it for n*8/Bandwidth, and
// arrives RTT/2 later. A write completes at its sender RTT/2 after it arrived
// (the acknowledgement of a reliable connection; the acknowledgement itself
// is not charged for bandwidth). Frames are charged dynproto.FrameSize bytes,
// writes their payload; no header overhead is added. The engines and the
// application take no time, and no bytes are copied: the result is the
// protocol's behaviour on the link, independent of this machine's speed and
// load, and reproducible run to run.
//
// Virtual time rather than real timers: a 48 ms round trip needs seconds of
// run time per point with timers, and timers on a loaded two-CPU machine add
// their own delays; the simulation runs many emulated seconds per real one.
type vlink struct {
	now       int64 // picoseconds
	oneWay    int64
	psPerByte float64
	free      [2]int64 // when each direction's link is next free
	events    eventHeap
	seq       uint64
}

type vevent struct {
	t    int64
	seq  uint64
	to   *memEnd
	done bool // a write completion; otherwise a frame arrival
	f    dynproto.Frame
}

func newVlink(l Link) *vlink {
	v := &vlink{oneWay: int64(l.RTT) * 1000 / 2}
	if l.Bandwidth > 0 {
		v.psPerByte = 8e12 / l.Bandwidth
	}
	return v
}

func (v *vlink) virtual() time.Duration { return time.Duration(v.now / 1000) }

// send occupies from's direction for n bytes and returns the arrival time.
func (v *vlink) send(from *memEnd, n int) int64 {
	depart := max(v.now, v.free[from.id]) + int64(math.Round(float64(n)*v.psPerByte))
	v.free[from.id] = depart
	return depart + v.oneWay
}

func (v *vlink) push(e vevent) {
	e.seq = v.seq
	v.seq++
	heap.Push(&v.events, e)
}

func (v *vlink) frame(from *memEnd, f dynproto.Frame) {
	v.push(vevent{t: v.send(from, dynproto.FrameSize), to: from.peer, f: f})
}

func (v *vlink) write(from *memEnd, n int) {
	v.push(vevent{t: v.send(from, n) + v.oneWay, to: from, done: true})
}

// next removes the earliest event and advances the clock to it.
func (v *vlink) next() (vevent, bool) {
	if len(v.events) == 0 {
		return vevent{}, false
	}
	e := heap.Pop(&v.events).(vevent)
	v.now = e.t
	return e, true
}

// apply hands an event to its end and lets the end act on it.
func (v *vlink) apply(e vevent) error {
	end := e.to
	if e.done {
		var err error
		if end.acts, err = end.eng.WriteDone(end.acts); err != nil {
			return err
		}
		_, err = end.run()
		return err
	}
	end.inbox.push(e.f)
	_, err := end.step()
	return err
}

type eventHeap []vevent

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].t != h[j].t {
		return h[i].t < h[j].t
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(vevent)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
