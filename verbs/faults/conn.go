package faults

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exsgo/exs/verbs"
)

// rnrRetry is how long a message that met receiver-not-ready waits at most
// before it is handed on again, when no RECV posted through this provider
// wakes it first (a peer in another process).
const rnrRetry = time.Millisecond

// Conn is one end of a connection through the provider: the verbs.Link it
// gives the queue pair, wrapping the inner provider's. Its methods are safe
// for concurrent use.
type Conn struct {
	p     *Provider
	id    uint64
	side  Side
	addr  string
	inner verbs.Link
	ep    *verbs.Endpoint
	kick  chan struct{} // wakes the goroutine

	seq                     atomic.Uint64 // messages given
	deferred, completeLater atomic.Int64
	drops                   atomic.Int64

	mu      sync.Mutex
	cond    *sync.Cond // signalled when busy goes false
	closed  bool
	holding bool       // Hold: every message waits for Release
	queue   []*pending // messages not yet handed on, in order
	acks    []ack      // outcomes to report later
	running bool       // the goroutine runs
	gid     uint64     // the goroutine's id, while it runs
	busy    bool       // the goroutine is handing busyMsg to the inner link
	busyMsg *verbs.Message
	after   []func() // to run once busyMsg has its outcome reported
	// The head message met receiver-not-ready at rnrAt; rnrWoken says a
	// RECV was posted since.
	rnrWait, rnrWoken bool
	rnrAt             time.Time
}

// pending is a message not yet handed on.
type pending struct {
	m    *verbs.Message
	due  time.Time
	hold bool
	f    Fault
}

// ack is an outcome to report later.
type ack struct {
	m   *verbs.Message
	due time.Time
}

// ID numbers the connection ends of the provider in the order they were
// set up, from 1.
func (c *Conn) ID() uint64 { return c.id }

// Side says which end of the connection c is.
func (c *Conn) Side() Side { return c.side }

// Addr returns the listening address of the connection: the one dialed, or
// the one the connection was accepted on.
func (c *Conn) Addr() string { return c.addr }

// Endpoint returns the queue pair's end of the connection.
func (c *Conn) Endpoint() *verbs.Endpoint { return c.ep }

// ConnStats counts what happened on a connection end.
type ConnStats struct {
	Messages      uint64 // given to carry
	Deferred      int64  // held or delayed, and handed on by the end's goroutine
	CompleteLater int64  // outcomes reported late
	Queued        int    // messages not yet handed on, now
	Drops         int64  // Drop calls, and Fault.Drop
}

// Stats returns the end's counters.
func (c *Conn) Stats() ConnStats {
	c.mu.Lock()
	q := len(c.queue)
	c.mu.Unlock()
	return ConnStats{
		Messages:      c.seq.Load(),
		Deferred:      c.deferred.Load(),
		CompleteLater: c.completeLater.Load(),
		Queued:        q,
		Drops:         c.drops.Load(),
	}
}

// Hold holds every message not yet handed on, and every later one, until
// Release.
func (c *Conn) Hold() {
	c.mu.Lock()
	c.holding = true
	c.mu.Unlock()
}

// Release hands on what Hold and Fault.Hold held, in order (later messages
// still wait out their Delay).
func (c *Conn) Release() {
	c.mu.Lock()
	c.holding = false
	for _, h := range c.queue {
		h.hold = false
	}
	c.mu.Unlock()
	c.wake()
}

// Drop ends the connection now with cause (ErrReset if nil), as a
// transport failure at this end would: the queue pair records cause (wrapped
// as the peer's doing: verbs.Endpoint.Terminated), and so, through the
// inner provider, does the peer's. Messages not yet handed on are lost;
// both queue pairs flush their work requests.
func (c *Conn) Drop(cause error) {
	if cause == nil {
		cause = ErrReset
	}
	c.drops.Add(1)
	c.p.stats.drops.Add(1)
	c.ep.Terminated(cause)
}

// Peer returns what the inner link reports, if it reports it.
func (c *Conn) Peer() verbs.Peer {
	if r, ok := c.inner.(verbs.PeerReporter); ok {
		return r.Peer()
	}
	return verbs.Peer{}
}

// Transmit asks Filters.Message about m, then hands m to the inner link at
// once, or queues it for the end's goroutine if it is held or delayed or
// messages before it are.
func (c *Conn) Transmit(m *verbs.Message) (bool, error) {
	seq := c.seq.Add(1) - 1
	c.p.stats.messages.Add(1)
	var f Fault
	if filter := c.p.current().Message; filter != nil {
		f = filter(&Msg{Conn: c, Seq: seq, Op: m.Op, Len: m.Len})
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return true, verbs.ErrClosed
	}
	if f.Drop != nil && !f.DropAfter {
		c.mu.Unlock()
		c.Drop(f.Drop)
		return true, verbs.ErrClosed
	}
	if f.Delay <= 0 && !f.Hold && len(c.queue) == 0 && !c.busy && !c.holding {
		// Nothing before it waits: hand it on now, in the queue pair's
		// send loop, which keeps its work request in flight until we
		// return (a refusal then completes it with its own status).
		c.mu.Unlock()
		done, err := c.inner.Transmit(m)
		switch {
		case f.Drop != nil && (err == nil || !done):
			c.Drop(f.Drop)
			return false, nil // never reported: flushed
		case done && err == nil && f.CompleteAfter > 0:
			c.mu.Lock()
			if !c.closed {
				c.acks = append(c.acks, ack{m: m, due: time.Now().Add(f.CompleteAfter)})
				c.completeLater.Add(1)
				c.p.stats.completeLater.Add(1)
				c.startLocked()
			}
			c.mu.Unlock()
			c.wake()
			return false, nil
		}
		return done, err
	}
	c.queue = append(c.queue, &pending{m: m, due: time.Now().Add(f.Delay), hold: f.Hold || c.holding, f: f})
	c.deferred.Add(1)
	c.p.stats.deferred.Add(1)
	c.startLocked()
	c.mu.Unlock()
	c.wake()
	return false, nil
}

// startLocked starts the end's goroutine unless it runs.
func (c *Conn) startLocked() {
	if !c.running {
		c.running = true
		c.p.wg.Add(1)
		go c.run()
	}
}

// RecvPosted passes the news on, and wakes the ends of this provider whose
// message waits for a RECV (the peer's, if this provider serves it).
func (c *Conn) RecvPosted() {
	c.inner.RecvPosted()
	c.p.recvPosted()
}

// Terminate ends the connection end: messages not yet handed on are
// dropped, the inner link is terminated, and, unless the end's goroutine
// is the caller (a termination caused by the message it hands on), the
// call waits until that goroutine no longer hands a message on, so that no
// message memory is touched once it returns.
//
// When the caller is the goroutine of another end of this provider, in
// the middle of handing a message to this end (this end refused it), the
// inner link's Terminate, which tells that end, is left to that goroutine,
// to call once it has reported the refused message's outcome: the outcome
// must reach the initiator before the termination does.
func (c *Conn) Terminate(cause error) {
	g := goid()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.queue, c.acks, c.rnrWait = nil, nil, false
	mine := c.busy && c.gid == g
	m := c.busyMsg
	c.mu.Unlock()
	c.p.forget(c)
	c.wake()
	if !mine {
		if d := c.p.deliverer(g); d != nil && d != c && d.defer_(func() { c.inner.Terminate(cause) }) {
			c.waitIdle()
			return
		}
	}
	if mine && m != nil {
		// The inner link delivers m in this goroutine, and the
		// connection ends from inside that (the target, not served by
		// this provider, refused m, or the transport failed): report m's
		// outcome now, as far as the cause tells it, before the
		// termination flushes it.
		c.ep.Complete(m, cause)
	}
	c.inner.Terminate(cause)
	if !mine {
		c.waitIdle()
	}
}

// waitIdle waits until the end's goroutine hands no message on.
func (c *Conn) waitIdle() {
	c.mu.Lock()
	for c.busy {
		c.cond.Wait()
	}
	c.mu.Unlock()
}

// defer_ queues f to run after the message being handed on has its
// outcome reported; it reports false if no message is being handed on.
func (c *Conn) defer_(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.busy {
		return false
	}
	c.after = append(c.after, f)
	return true
}

// wake wakes the end's goroutine, if it waits.
func (c *Conn) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// run is the end's goroutine: it hands queued messages on when they are
// due and reports late outcomes, and ends when none is left or the
// connection ended.
func (c *Conn) run() {
	defer c.p.wg.Done()
	id := goid()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var due []ack
	for {
		c.mu.Lock()
		if c.closed || len(c.queue) == 0 && len(c.acks) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.gid = id
		now := time.Now()
		wait := time.Duration(-1) // until woken
		later := func(d time.Duration) {
			if wait < 0 || d < wait {
				wait = d
			}
		}
		due = due[:0]
		keep := c.acks[:0]
		for _, a := range c.acks {
			if a.due.After(now) {
				keep = append(keep, a)
				later(a.due.Sub(now))
			} else {
				due = append(due, a)
			}
		}
		clear(c.acks[len(keep):])
		c.acks = keep
		var next *pending
		if len(c.queue) > 0 {
			h := c.queue[0]
			switch {
			case c.holding || h.hold:
			case c.rnrWait && !c.rnrWoken && now.Sub(c.rnrAt) < rnrRetry:
				later(rnrRetry - now.Sub(c.rnrAt))
			case c.rnrWait:
				c.rnrWait, c.rnrWoken = false, false
				next = h
			case !h.due.After(now):
				next = h
			default:
				later(h.due.Sub(now))
			}
			if next != nil {
				c.queue[0] = nil
				c.queue = c.queue[1:]
				c.busy, c.busyMsg = true, next.m
			}
		}
		c.mu.Unlock()
		for _, a := range due {
			c.ep.Complete(a.m, nil)
		}
		if next != nil {
			c.deliver(next)
			continue
		}
		if len(due) > 0 {
			continue
		}
		if wait < 0 {
			<-c.kick
			continue
		}
		timer.Reset(wait)
		select {
		case <-c.kick:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// deliver hands h to the inner link, reports the outcome, then runs what
// Terminate calls left for after it.
func (c *Conn) deliver(h *pending) {
	c.p.setDeliverer(c.gid, c)
	done, err := c.inner.Transmit(h.m)
	c.p.setDeliverer(c.gid, nil)
	c.mu.Lock()
	c.busy, c.busyMsg = false, nil
	after := c.after
	c.after = nil
	c.cond.Broadcast()
	var complete, drop bool
	switch {
	case c.closed:
		// Ended meanwhile: the work request is flushed, or Terminate
		// reported its outcome.
	case !done:
		// The inner provider reports the outcome itself.
		drop = h.f.Drop != nil
	case errors.Is(err, verbs.ErrNoRecv) && c.ep.RNR() == verbs.RNRWait:
		// Receiver not ready: the message stays at the head, and goes
		// again when the peer posts a RECV (or after rnrRetry).
		h.due, h.hold = time.Time{}, false
		c.queue = append(c.queue, nil)
		copy(c.queue[1:], c.queue)
		c.queue[0] = h
		c.rnrWait, c.rnrWoken, c.rnrAt = true, false, time.Now()
		defer c.p.waitRNR(c)
	case h.f.Drop != nil && err == nil:
		drop = true
	case err == nil && h.f.CompleteAfter > 0:
		c.acks = append(c.acks, ack{m: h.m, due: time.Now().Add(h.f.CompleteAfter)})
		c.completeLater.Add(1)
		c.p.stats.completeLater.Add(1)
	default:
		complete = true
	}
	c.mu.Unlock()
	if complete {
		c.ep.Complete(h.m, err)
	}
	if drop {
		c.Drop(h.f.Drop)
	}
	for _, f := range after {
		f()
	}
}

// recvPosted wakes the end's goroutine if its head message waits for a
// RECV at the peer.
func (c *Conn) recvPosted() {
	c.mu.Lock()
	w := c.rnrWait
	c.rnrWoken = w
	c.mu.Unlock()
	if w {
		c.wake()
	}
}

// goid returns the id of the calling goroutine, from the first line of its
// stack trace ("goroutine 123 [running]:").
func goid() uint64 {
	var buf [40]byte
	n := runtime.Stack(buf[:], false)
	const prefix = "goroutine "
	if n <= len(prefix) {
		return 0
	}
	var id uint64
	for _, ch := range buf[len(prefix):n] {
		if ch < '0' || ch > '9' {
			break
		}
		id = id*10 + uint64(ch-'0')
	}
	return id
}
