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
// A timeout is a notification, posted once per operation (EXS_TIMEOUT_ONCE
// is the only behaviour): the operation stays posted and later completes
// with its own event, as usual; to give it up, cancel it (CancelOp, which
// for a send or recv ends the connection, or Cancel). The timeout event
// comes before the operation's own event, or not at all if the operation
// completes first. Room for it is reserved in the queue with the
// operation, so that it is never dropped: with a timeout set, a send or
// recv needs room for two events in its queue, and gives one back when it
// completes without timing out. The time runs from the post; an operation
// posted while the socket connects is looked at once the connection is up.
func WithOpTimeout(send, recv time.Duration) SocketOption {
	return socketOpt{func(c *config) error {
		if send < 0 || recv < 0 {
			return fmt.Errorf("%w: operation timeouts %v, %v: want 0 (none) or positive", ErrInvalid, send, recv)
		}
		c.sendTO, c.recvTO = send, recv
		return nil
	}}
}

// opTimeout is an operation's timeout: its deadline, and whether room for
// its event is reserved and the event posted.
type opTimeout struct {
	deadline time.Time
	reserved bool
	fired    bool
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
	if !o.timeout.reserved {
		return
	}
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
