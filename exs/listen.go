package exs

import (
	"context"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/exsgo/exs/verbs"
)

// pendingReq is a connection request that matched the listening socket
// and waits for an accept.
type pendingReq struct {
	req  *verbs.ConnRequest
	peer hello
}

// acceptLoop serves a listening socket: it takes connection requests from
// the verbs listener as they come, refuses at once those that do not match
// the socket or find its backlog full, keeps the others until accepts are
// posted, and completes the accepts with new connected sockets. It returns
// once the socket is closed (or the listener broke).
func (s *Socket) acceptLoop(l *verbs.Listener) {
	var accepts []int32 // posted accepts, oldest first
	var polls []int32   // posted polls
	var waiting []pendingReq
	var cmds []int32
	var lerr error // why the listener broke
	for {
		var closing bool
		cmds, closing = s.takeCommands(cmds)
		for _, idx := range cmds {
			switch s.ops[idx].kind {
			case opAccept:
				accepts = append(accepts, idx)
			case opCancel:
				s.mu.Lock()
				s.cancelReq = false
				s.mu.Unlock()
				for _, a := range accepts {
					s.complete(a, 0, ErrCanceled, nil)
				}
				n := len(accepts) + s.failPolls(polls, ErrCanceled)
				s.complete(idx, n, nil, nil)
				accepts, polls = accepts[:0], polls[:0]
			case opCancelOne:
				var found bool
				if polls, found = s.cancelPoll(&s.ops[idx], polls); found {
					s.complete(idx, 1, nil, nil)
				} else {
					accepts = s.cancelAccept(idx, accepts)
				}
			case opPoll:
				polls = append(polls, idx)
			}
		}
		s.flushDone()
		if closing {
			break
		}
		// Waiting requests first, oldest first; one whose connect gave
		// up fails its accept here, and the next is tried.
		for len(accepts) > 0 && len(waiting) > 0 {
			p := waiting[0]
			waiting[0] = pendingReq{}
			waiting = waiting[1:]
			ns, err := s.acceptConn(p.req, &p.peer)
			if err != nil {
				s.log.Debug("accept failed", zap.String("addr", s.addr), zap.Error(err))
				continue
			}
			s.complete(accepts[0], 0, nil, ns)
			accepts = accepts[1:]
		}
		if len(polls) > 0 && len(waiting) > 0 {
			polls = s.checkPolls(polls, PollIn)
		}
		s.flushDone()

		// Wait for a request, unless a command arrives.
		s.mu.Lock()
		if s.ncmd.Load() != 0 {
			s.mu.Unlock()
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		s.interrupt = cancel
		s.mu.Unlock()
		req, err := l.Accept(ctx)
		s.mu.Lock()
		s.interrupt = nil
		s.mu.Unlock()
		interrupted := ctx.Err() != nil
		cancel()
		if err != nil {
			if interrupted {
				continue
			}
			lerr = err
			s.log.Warn("listener failed", zap.String("addr", s.addr), zap.Error(err))
			break
		}
		peer, err := s.checkRequest(req)
		if err != nil {
			s.log.Debug("connection refused", zap.String("addr", s.addr), zap.Error(err))
			continue
		}
		if len(waiting) >= s.backlog {
			s.reject(req, rejectBacklog)
			s.log.Debug("connection refused: backlog full", zap.String("addr", s.addr), zap.Int("backlog", s.backlog))
			continue
		}
		waiting = append(waiting, pendingReq{req, peer})
	}
	l.Close()
	for _, p := range waiting {
		s.reject(p.req, rejectClosed)
	}
	var err error = errClosedCanceled
	if lerr != nil {
		err = fmt.Errorf("%w: %w", ErrConnAborted, lerr)
	}
	for _, a := range accepts {
		s.complete(a, 0, err, nil)
	}
	s.failPolls(polls, err)
	s.flushDone()
	s.finish(err, 0)
}

// reject refuses req for reason r.
func (s *Socket) reject(req *verbs.ConnRequest, r rejectReason) {
	rej := hello{version: helloVersion, mode: s.cfg.mode, typ: s.typ, frames: uint16(s.cfg.frames), reason: r}
	req.Reject(rej.encode())
}

// checkRequest reads a connection request's parameters and refuses it at
// once if they are malformed or do not match the listening socket's.
func (s *Socket) checkRequest(req *verbs.ConnRequest) (hello, error) {
	local := hello{version: helloVersion, mode: s.cfg.mode, typ: s.typ, frames: uint16(s.cfg.frames)}
	peer, err := decodeHello(req.PrivateData())
	if err != nil {
		s.reject(req, rejectBad)
		return peer, err
	}
	if r := local.match(&peer); r != rejectNone {
		s.reject(req, r)
		return peer, mismatchError(r, &local, &peer)
	}
	return peer, nil
}

// acceptConn sets up the new connected socket for a request that matched
// the listening socket (peer: its parameters) and starts its goroutine.
func (s *Socket) acceptConn(req *verbs.ConnRequest, peer *hello) (*Socket, error) {
	ns := newSocket(s.st, s.typ, s.cfg)
	ns.state, ns.addr, ns.dev, ns.running = sockConnected, s.addr, s.dev, true
	c, err := newConn(ns, s.dev)
	if err == nil {
		if err = c.start(peer); err != nil {
			c.destroy()
		}
	}
	if err != nil {
		s.reject(req, rejectResource)
		return nil, err
	}
	if err := req.Accept(c.qp, c.local.encode()); err != nil {
		c.destroy()
		return nil, err
	}
	ns.peer = c.qp.Peer()
	if !s.st.addSocket(ns) {
		c.destroy()
		return nil, ErrClosed
	}
	if !s.st.spawn(c.loop) {
		s.st.removeSocket(ns)
		c.destroy()
		return nil, ErrClosed
	}
	s.log.Debug("accepted", zap.String("addr", s.addr), zap.Stringer("mode", s.cfg.mode), zap.Stringer("type", s.typ))
	return ns, nil
}

// cancelAccept carries out CancelOp idx on a listening socket: the accept
// it names completes alone, if still posted.
func (s *Socket) cancelAccept(idx int32, accepts []int32) []int32 {
	o := &s.ops[idx]
	for i, a := range accepts {
		if a == o.target && s.cancelTarget(o) {
			s.complete(a, 0, ErrCanceled, nil)
			s.complete(idx, 1, nil, nil)
			return append(accepts[:i], accepts[i+1:]...)
		}
	}
	s.complete(idx, 0, ErrNotFound, nil)
	return accepts
}

// Bind binds a new socket to addr, the address it will listen on (see
// Listen): "scheme:name", such as "inproc:echo"; an address without a
// scheme is taken as "inproc:" + addr.
func (s *Socket) Bind(addr string) error {
	d, full, err := s.st.resolve(addr)
	if err != nil {
		return opErr("bind", addr, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case sockNew:
	case sockClosed:
		return opErr("bind", full, ErrClosed)
	default:
		return opErr("bind", full, fmt.Errorf("%w: socket already bound or connected", ErrInvalid))
	}
	s.state, s.addr, s.dev = sockBound, full, d
	return nil
}

// Listen makes a bound socket listen for connections, which Accept then
// takes. A connection request is examined as soon as it arrives, accept
// posted or not: one whose protocol version, mode or socket type differ
// from the socket's is refused at once (its connect fails with
// ErrMismatch). The others wait for an accept, at most backlog of them
// (0 means DefaultBacklog; at most MaxBacklog), in the order they came; a
// request beyond that is refused at once (its connect fails with
// ECONNREFUSED), as listen(2)'s backlog does. A connect completes only when
// an accept takes its request (the meaning rdma_cm gives "connected", not
// TCP's, whose connect completes when the request enters the backlog): the
// connection's resources are set up then. A request waits at most its
// connect's time limit (WithConnectTimeout); an accept that finds its
// connect gone takes the next. Listen returns an error matching
// syscall.EADDRINUSE if another socket listens on the address.
func (s *Socket) Listen(backlog int) error {
	if backlog < 0 || backlog > MaxBacklog {
		return opErr("listen", s.Addr(), fmt.Errorf("%w: backlog %d, want 0 to %d", ErrInvalid, backlog, MaxBacklog))
	}
	if backlog == 0 {
		backlog = DefaultBacklog
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case sockBound:
	case sockClosed:
		return opErr("listen", s.addr, ErrClosed)
	default:
		return opErr("listen", s.addr, fmt.Errorf("%w: socket not bound, or connected", ErrInvalid))
	}
	l, err := s.dev.dev.Listen(s.addr)
	if err != nil {
		return opErr("listen", s.addr, err)
	}
	if !s.st.spawn(func() { s.acceptLoop(l) }) {
		l.Close()
		return opErr("listen", s.addr, ErrClosed)
	}
	// The listener's address, if the provider tells it in the socket's
	// scheme: a port the system chose, say.
	if a := l.Addr(); strings.HasPrefix(a, s.dev.scheme+":") {
		s.addr = a
	}
	s.state, s.running, s.backlog = sockListening, true, backlog
	s.log.Debug("listening", zap.String("addr", s.addr))
	return nil
}

// Accept posts an accept on a listening socket. When a connection request
// arrives whose protocol parameters match the socket's (requests that do
// not match are refused and do not complete the accept), the accept
// completes with an EventAccept whose Accepted field is the new connected
// socket, which inherits the listening socket's options. Accepts complete
// in the order they were posted.
func (s *Socket) Accept(q *Queue, user any) error {
	if err := s.checkQueue(q); err != nil {
		return opErr("accept", "", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.state == sockClosed:
		return opErr("accept", s.addr, ErrClosed)
	case s.state != sockListening:
		return opErr("accept", s.addr, errNotListening)
	case s.nacc >= s.cfg.maxRecvs:
		return opErr("accept", s.addr, errTooMany)
	}
	if err := q.reserve(); err != nil {
		return opErr("accept", s.addr, err)
	}
	s.nacc++
	s.pushLocked(op{kind: opAccept, q: q, user: user})
	if s.interrupt != nil {
		// The goroutine waits for the next request: requests already
		// waiting are for this accept.
		s.interrupt()
	}
	return nil
}
