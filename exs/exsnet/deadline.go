package exsnet

import (
	"context"
	"sync"
	"time"
)

// deadline is one direction's deadline: a channel that is closed when the
// deadline passes or the connection closes, on which the blocking waits
// of that direction select (as the waits of gVisor's gonet do). Setting a
// new deadline after the old one passed opens a new channel; one timer,
// made on first use, serves every deadline. The zero deadline has no
// channel; call init first. It is safe for concurrent use.
type deadline struct {
	mu     sync.Mutex
	at     time.Time // zero: no deadline
	timer  *time.Timer
	cur    *doneCtx
	closed bool
}

func (d *deadline) init() { d.cur = newDoneCtx() }

// set sets the deadline to t (zero: none); it applies to waits already
// under way too.
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	if d.timer != nil {
		d.timer.Stop()
	}
	if d.cur.done() {
		d.cur = newDoneCtx()
	}
	d.at = t
	if t.IsZero() {
		return
	}
	dur := time.Until(t)
	if dur <= 0 {
		d.cur.close()
		return
	}
	if d.timer == nil {
		d.timer = time.AfterFunc(dur, d.fire)
	} else {
		d.timer.Reset(dur)
	}
}

// fire runs on the timer: it ends the current wait if the deadline has
// passed (a timer stopped too late for a later deadline finds it has not).
func (d *deadline) fire() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || d.at.IsZero() || time.Now().Before(d.at) {
		return
	}
	d.cur.close()
}

// close ends every wait for good: the connection is closed.
func (d *deadline) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	d.closed = true
	if d.timer != nil {
		d.timer.Stop()
	}
	d.cur.close()
}

// wait returns the context a wait selects on now.
func (d *deadline) wait() *doneCtx {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cur
}

// expired reports whether the deadline has passed (and the connection is
// not closed: check that first).
func (d *deadline) expired() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.closed && d.cur.done()
}

// doneCtx is a context that only ends: the form in which exs's
// DequeueContext takes a channel to select on. Made once per deadline
// that passes, never per wait.
type doneCtx struct {
	ch chan struct{}
}

var _ context.Context = (*doneCtx)(nil)

func newDoneCtx() *doneCtx { return &doneCtx{ch: make(chan struct{})} }

func (c *doneCtx) close() {
	if !c.done() {
		close(c.ch)
	}
}

func (c *doneCtx) done() bool {
	select {
	case <-c.ch:
		return true
	default:
		return false
	}
}

func (c *doneCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *doneCtx) Done() <-chan struct{}       { return c.ch }
func (c *doneCtx) Value(any) any               { return nil }

func (c *doneCtx) Err() error {
	if c.done() {
		return context.Canceled
	}
	return nil
}
