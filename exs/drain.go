package exs

import (
	"time"

	"github.com/exsgo/exs/internal/fifo"
)

// The bytes a send moved, and the drain before a cancel.
//
// A write's bytes reach the peer's engine only with the frame that
// announces them, and the frame's SEND completion is what tells this end
// that the frame arrived. conn therefore notes each write it posts
// (postedWrite) and, when a frame completes, credits the writes it
// announced to their operations (op.placed): the bytes the peer got.
//
// A cancel (Cancel, CancelOp) or a timeout that ends the connection
// (TimeoutEnd) first drains: it posts no more writes or frames, and waits
// for the frames already posted to complete, at most drainLimit, before it
// destroys the queue pair. The frames that complete are then exactly the
// frames the peer got, so that a canceled send reports in N exactly the
// bytes the peer's recvs will get. Without the drain, a frame in flight
// when the queue pair went would be flushed here (StatusFlushed) whether
// or not the peer had got it.

// drainLimit bounds the wait of a cancel for the frames in flight: they
// need the peer's provider, never the peer's application (a frame is sent
// only on a credit, for a receive buffer already posted there), but a
// cancel must not wait on a peer whose process stopped.
const drainLimit = time.Second

// postedWrite is a write action posted and not yet announced by a
// completed frame: its operation (the engine's send id) and length.
type postedWrite struct {
	id uint64
	n  int
}

// drainState is a conn's part for the cancel's drain.
type drainState struct {
	writes fifo.Queue[postedWrite] // in post order

	draining bool      // a drain is under way: post no more work requests
	drained  bool      // the cancel at the head of cmds has drained
	drainBy  time.Time // when to stop waiting
	drainErr error     // a timeout's end: the error that ends the connection
	// drainCmds holds the cancel that started the drain and the
	// operations taken after it, to apply once the drain is over; empty
	// for a timeout's end.
	drainCmds []int32
}

// notePosted records a write action just added to the batch.
func (c *conn) notePosted(id uint64, n int) {
	c.writes.Push(postedWrite{id, n})
}

// notePlaced credits the first n posted writes, announced by a frame
// whose SEND completed, to their operations.
func (c *conn) notePlaced(n int) {
	for ; n > 0 && c.writes.Len() > 0; n-- {
		w := c.writes.Pop()
		if w.id&idChunk != 0 {
			c.sfPlaced(w.n)
			continue
		}
		c.s.ops[w.id].placed += w.n
	}
}

// moved returns the bytes of send id the peer got, for a send that
// failed: on a seqpacket socket a message counts only whole.
func (c *conn) moved(id uint64) int {
	o := &c.s.ops[id]
	if c.s.typ == SockSeqPacket && o.placed != o.size() {
		return 0
	}
	return o.placed
}

// inFlight reports whether frames posted have not yet completed.
func (c *conn) inFlight() bool {
	return !c.failed && !c.eng.Dead() && c.framesDone < c.frameSeq
}

// startDrain starts the drain of a cancel (cmds: the cancel and the
// operations after it, applied when the drain is over) or of a timeout's
// end (cmds empty, err the error that ends the connection).
func (c *conn) startDrain(cmds []int32, err error) {
	c.draining = true
	c.drainBy = time.Now().Add(drainLimit)
	c.drainErr = err
	c.drainCmds = append(c.drainCmds[:0], cmds...)
	// The actions waiting for room in the send queue go now: the work
	// requests among them are dropped, the local ones carried out.
	c.drainBacklog()
}

// drainOver reports whether the drain may end: every frame posted has
// completed, the connection went, or the time is up.
func (c *conn) drainOver() bool {
	return !c.inFlight() || !time.Now().Before(c.drainBy)
}

// endDrain ends the drain: the cancel is applied again, now to end the
// connection, with the operations taken after it; or the timeout ends the
// connection. cmds are operations taken meanwhile (a close), applied after.
func (c *conn) endDrain(cmds []int32) []int32 {
	c.draining = false
	if len(c.drainCmds) == 0 {
		c.endConn(c.drainErr)
		c.drainErr = nil
		return cmds
	}
	c.drained = true
	all := append(append([]int32(nil), c.drainCmds...), cmds...)
	c.drainCmds = c.drainCmds[:0]
	return all
}

// cmdsDue reports whether the loop should take the operations posted: not
// during a drain, unless the socket is being closed.
func (c *conn) cmdsDue() bool {
	return c.s.ncmd.Load() != 0 && (!c.draining || c.s.closingA.Load())
}

// drainDeadline returns the earlier of d and the drain's time limit.
func (c *conn) drainDeadline(d time.Time) time.Time {
	if c.draining && (d.IsZero() || c.drainBy.Before(d)) {
		return c.drainBy
	}
	return d
}

// cancel applies cancel operation idx; rest are the operations taken
// after it. It reports true if it started a drain: the caller then stops,
// and the drain's end applies the cancel and rest again.
func (c *conn) cancel(idx int32, rest []int32) bool {
	s := c.s
	o := &s.ops[idx]
	c.exec()
	s.mu.Lock()
	s.cancelReq = false
	s.mu.Unlock()
	if c.drained {
		// The drain is over. The operation a CancelOp named may have
		// completed meanwhile (its last bytes were under way): its own
		// event says so, and the connection ends all the same.
		c.drained = false
	} else {
		if o.kind == opCancelOne {
			var found bool
			if c.polls, found = s.cancelPoll(o, c.polls); found {
				s.complete(idx, 1, nil, nil)
				return false
			}
			if !s.cancelTarget(o) {
				s.complete(idx, 0, ErrNotFound, nil)
				return false
			}
		}
		if c.inFlight() {
			c.startDrain(append([]int32{idx}, rest...), nil)
			return true
		}
	}
	s.complete(idx, c.endConn(ErrCanceled), nil, nil)
	return false
}

// endConn ends the connection for a cancel or a timeout: every operation
// outstanding completes with err. It returns how many.
func (c *conn) endConn(err error) int {
	n := 0
	if !c.eng.Dead() {
		c.abort(err)
		c.exec()
		c.releaseHeld()
		n = c.canceled
		n += c.failShutdowns()
	}
	n += c.s.failPolls(c.polls, err)
	c.polls = c.polls[:0]
	return n
}
