package exs

import "fmt"

// PollEvents are the conditions Socket.Poll waits for (EXS_POLLIN,
// EXS_POLLOUT).
type PollEvents uint8

const (
	// PollIn holds on a connected socket when a recv posted now would
	// complete without waiting for the peer: bytes (or a message, or part
	// of one) wait in the stream buffer, or the stream has ended (the
	// peer shut down or went). In ModeDirectOnly there is no stream
	// buffer, so only the end of the stream makes it hold. On a listening
	// socket it holds when a connection request waits for an accept.
	PollIn PollEvents = 1 << iota
	// PollOut holds on a connected socket when a send posted now would be
	// accepted (fewer sends outstanding than the socket's limit,
	// WithOutstanding), or would fail at once because the connection has
	// ended. It never holds on a listening socket.
	PollOut
)

// String returns "in", "out" or "in|out".
func (p PollEvents) String() string {
	switch p {
	case PollIn:
		return "in"
	case PollOut:
		return "out"
	case PollIn | PollOut:
		return "in|out"
	}
	return fmt.Sprintf("PollEvents(%#x)", uint8(p))
}

// Revents returns the conditions that held when a poll completed: for an
// EventPoll, the subset of the polled PollEvents that holds; 0 for other
// events and for a poll that failed.
func (e Event) Revents() PollEvents {
	if e.Type != EventPoll {
		return 0
	}
	return PollEvents(e.N)
}

// Poll posts a poll of the socket (exs_poll): it completes with one
// EventPoll when at least one of the conditions in events (PollIn,
// PollOut, not empty) holds, at once if one holds already; Event.Revents
// tells which hold. A poll is a notification, not a reservation: another
// operation may take the condition before the application acts on it.
// A connecting socket is polled from when its connection is up; if the
// connect fails, the poll fails with its error. Cancel and Close complete
// an outstanding poll with ECANCELED; CancelOp cancels a poll alone,
// leaving the connection as it is. A poll counts among the socket's
// control operations (connect, shutdown, cancel, poll: 8 outstanding at
// most, ErrWouldBlock beyond).
func (s *Socket) Poll(q *Queue, events PollEvents, user any) error {
	if err := s.checkQueue(q); err != nil {
		return opErr("poll", "", err)
	}
	if events == 0 || events&^(PollIn|PollOut) != 0 {
		return opErr("poll", "", fmt.Errorf("%w: poll events %#x", ErrInvalid, uint8(events)))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case sockListening, sockConnecting, sockConnected:
	case sockClosed:
		return opErr("poll", s.addr, ErrClosed)
	default:
		return opErr("poll", s.addr, ErrNotConnected)
	}
	if s.nctl >= ctlSlots {
		return opErr("poll", s.addr, errTooMany)
	}
	if err := q.reserve(); err != nil {
		return opErr("poll", s.addr, err)
	}
	s.nctl++
	s.pushLocked(op{kind: opPoll, q: q, user: user, poll: events})
	if s.interrupt != nil {
		// A listening socket waits for the next request: a request
		// already waiting may satisfy the poll.
		s.interrupt()
	}
	return nil
}

// checkPolls completes the polls whose conditions hold, given which do,
// and returns the polls left. Called by the goroutine serving the socket.
func (s *Socket) checkPolls(polls []int32, holds PollEvents) []int32 {
	k := 0
	for _, idx := range polls {
		if r := s.ops[idx].poll & holds; r != 0 {
			s.complete(idx, int(r), nil, nil)
			continue
		}
		polls[k] = idx
		k++
	}
	clear(polls[k:])
	return polls[:k]
}

// failPolls completes every poll with err and returns how many.
func (s *Socket) failPolls(polls []int32, err error) int {
	for _, idx := range polls {
		s.complete(idx, 0, err, nil)
	}
	return len(polls)
}

// cancelPoll completes the poll that CancelOp o names, if it is among
// polls, and returns the polls left and whether it was.
func (s *Socket) cancelPoll(o *op, polls []int32) ([]int32, bool) {
	for i, idx := range polls {
		if idx == o.target && s.cancelTarget(o) {
			s.complete(idx, 0, ErrCanceled, nil)
			return append(polls[:i], polls[i+1:]...), true
		}
	}
	return polls, false
}

// pollHolds reports which conditions hold on the connection now.
func (c *conn) pollHolds() PollEvents {
	if c.eng.Dead() {
		return PollIn | PollOut
	}
	var r PollEvents
	st := c.eng.State()
	if st.BR > 0 || st.FinReceived || c.eng.Gone() {
		r |= PollIn
	}
	s := c.s
	s.mu.Lock()
	if s.nsend < s.cfg.maxSends {
		r |= PollOut
	}
	s.mu.Unlock()
	if c.eng.Gone() {
		r |= PollOut
	}
	return r
}
