package exs

import (
	"fmt"
	"time"
)

// WithOpTimeout sets the socket's operation timeouts (SO_ASYNC_SEND_TIMEOUT
// and SO_ASYNC_RECV_TIMEOUT): a send outstanding for longer than send, or a
// recv outstanding for longer than recv, posts one EventSendTimeout or
// EventRecvTimeout, with the operation's user value, to the operation's
// queue. 0 turns a timeout off (the default); a negative one is invalid.
//
// By default (TimeoutOnce, EXS_TIMEOUT_ONCE) a timeout is a notification,
// posted once per operation: the operation stays posted and later
// completes with its own event, as usual; to give it up, cancel it
// (CancelOp, which for a send or recv ends the connection, or Cancel). With
// WithTimeoutMode(TimeoutEnd) the operation ends at its timeout instead,
// with ETIMEDOUT and the bytes it moved, and the connection with it. The
// timeout event
// comes before the operation's own event, or not at all if the operation
// completes first. Room for it is reserved in the queue with the
// operation, so that it is never dropped: with a timeout set, a send or
// recv needs room for two events in its queue, and gives one back when it
// completes without timing out (TimeoutEnd reserves nothing more). The
// time runs from the post; an operation posted while the socket connects is
// looked at once the connection is up. A timeout of 0 is no timeout, in
// either mode.
func WithOpTimeout(send, recv time.Duration) SocketOption {
	return socketOpt{func(c *config) error {
		if send < 0 || recv < 0 {
			return fmt.Errorf("%w: operation timeouts %v, %v: want 0 (none) or positive", ErrInvalid, send, recv)
		}
		c.sendTO, c.recvTO = send, recv
		return nil
	}}
}

// TimeoutMode says what a timeout of WithOpTimeout does.
type TimeoutMode uint8

const (
	// TimeoutOnce (EXS_TIMEOUT_ONCE, the default): the operation that
	// times out posts one EventSendTimeout or EventRecvTimeout and stays
	// posted.
	TimeoutOnce TimeoutMode = iota
	// TimeoutEnd: the operation that times out ends with an error
	// matching ErrTimedOut (ETIMEDOUT), reporting in N the bytes it
	// moved; no timeout event is posted. A send or recv belongs to its
	// connection's stream, which cannot skip its bytes, so the
	// connection ends with it, as after a CancelOp: every operation
	// outstanding on the socket completes with ETIMEDOUT, later ones fail
	// with it, and the peer sees the connection reset.
	TimeoutEnd
)

var timeoutModeNames = [...]string{"once", "end"}

// String returns "once" or "end".
func (m TimeoutMode) String() string {
	if int(m) < len(timeoutModeNames) {
		return timeoutModeNames[m]
	}
	return fmt.Sprintf("TimeoutMode(%d)", uint8(m))
}

// WithTimeoutMode sets what the timeouts of WithOpTimeout do:
// TimeoutOnce (the default) or TimeoutEnd. Accepted sockets inherit it.
func WithTimeoutMode(m TimeoutMode) SocketOption {
	return socketOpt{func(c *config) error {
		if m > TimeoutEnd {
			return fmt.Errorf("%w: timeout mode %v", ErrInvalid, m)
		}
		c.toMode = m
		return nil
	}}
}

// endByTimeout ends the connection for a timeout in TimeoutEnd mode,
// after the drain of the frames in flight (drain.go).
func (c *conn) endByTimeout() {
	switch {
	case c.draining || c.eng.Dead():
	case c.inFlight():
		c.startDrain(nil, ErrTimedOut)
	default:
		c.endConn(ErrTimedOut)
	}
}

// opTimeout is an operation's timeout: its deadline, and whether room for
// its event is reserved and the event posted.
type opTimeout struct {
	deadline time.Time
	reserved bool
	fired    bool
	watched  bool // in conn.sendTO or recvTO
}

// reserveOp reserves the room o needs in its queue: its event, and its
// timeout event if the socket has a timeout for its kind.
func (s *Socket) reserveOp(o *op) error {
	d := s.cfg.sendTO
	if o.kind == opRecv {
		d = s.cfg.recvTO
	}
	if err := o.q.reserve(); err != nil {
		return err
	}
	if d == 0 {
		return nil
	}
	if s.cfg.toMode == TimeoutEnd {
		// The operation's own event tells the timeout.
		o.timeout = opTimeout{deadline: time.Now().Add(d)}
		return nil
	}
	if err := o.q.reserve(); err != nil {
		o.q.unreserve()
		return err
	}
	o.timeout = opTimeout{deadline: time.Now().Add(d), reserved: true}
	return nil
}

// releaseTimeout gives back the room of a timeout event not posted.
func (o *op) releaseTimeout() {
	if o.timeout.reserved && !o.timeout.fired {
		o.q.unreserve()
	}
}

// timed is an operation waiting for its timeout.
type timed struct {
	idx    int32
	serial uint64
}

// watch adds operation idx to the operations whose timeouts c watches.
// Operations of one kind complete in post order and share one timeout, so
// each list is in deadline order.
func (c *conn) watch(idx int32) {
	o := &c.s.ops[idx]
	if o.timeout.deadline.IsZero() || o.timeout.watched {
		return
	}
	o.timeout.watched = true
	t := timed{idx, o.serial}
	if o.kind == opSend {
		c.sendTO = append(c.sendTO, t)
	} else {
		c.recvTO = append(c.recvTO, t)
	}
}

// checkTimeouts posts the timeout events that are due, and returns the
// earliest deadline still watched (zero if none).
func (c *conn) checkTimeouts() time.Time {
	if len(c.sendTO) == 0 && len(c.recvTO) == 0 {
		return time.Time{}
	}
	now := time.Now()
	if c.s.cfg.toMode == TimeoutEnd && c.timedOut(now) {
		// Before the pass below, which drops the operations completed.
		c.endByTimeout()
	}
	var next time.Time
	for _, l := range []*[]timed{&c.sendTO, &c.recvTO} {
		k := 0
		for _, t := range *l {
			o := &c.s.ops[t.idx]
			if o.kind == 0 || o.serial != t.serial {
				k++ // completed
				continue
			}
			if o.timeout.deadline.After(now) {
				if next.IsZero() || o.timeout.deadline.Before(next) {
					next = o.timeout.deadline
				}
				break
			}
			if c.s.cfg.toMode == TimeoutEnd {
				break // ending: the drain is under way
			}
			o.timeout.fired = true
			ev := EventSendTimeout
			if o.kind == opRecv {
				ev = EventRecvTimeout
			}
			o.q.post(Event{Type: ev, Socket: c.s, User: o.user})
			k++
		}
		n := copy(*l, (*l)[k:])
		clear((*l)[n:])
		*l = (*l)[:n]
	}
	return next
}

// timedOut reports whether an operation watched is outstanding past its
// deadline.
func (c *conn) timedOut(now time.Time) bool {
	for _, l := range [][]timed{c.sendTO, c.recvTO} {
		for _, t := range l {
			o := &c.s.ops[t.idx]
			if o.kind == 0 || o.serial != t.serial {
				continue
			}
			if !o.timeout.deadline.After(now) {
				return true
			}
			break // the rest are later
		}
	}
	return false
}

// timeoutC returns a channel that receives at c.deadline, nil if there is
// none.
func (c *conn) timeoutC() <-chan time.Time {
	if c.deadline.IsZero() {
		return nil
	}
	d := time.Until(c.deadline)
	if c.timer == nil {
		c.timer = time.NewTimer(d)
	} else {
		c.timer.Reset(d) // Go 1.23 timers: no stale value after Reset
	}
	return c.timer.C
}

// due reports whether a watched deadline has passed.
func (c *conn) due() bool {
	return !c.deadline.IsZero() && !time.Now().Before(c.deadline)
}
