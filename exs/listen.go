package exs

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/exsgo/exs/verbs"
)

// acceptLoop serves a listening socket: it takes connection requests from
// the verbs listener while accepts are posted, and completes them with new
// connected sockets. It returns once the socket is closed (or the listener
// broke).
func (s *Socket) acceptLoop(l *verbs.Listener) {
	var accepts []int32 // posted accepts, oldest first
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
				s.complete(idx, len(accepts), nil, nil)
				accepts = accepts[:0]
			}
		}
		s.flushDone()
		if closing {
			break
		}
		if len(accepts) == 0 {
			s.sleep()
			continue
		}

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
		ns, err := s.acceptConn(req)
		if err != nil {
			s.log.Debug("connection refused", zap.String("addr", s.addr), zap.Error(err))
			continue
		}
		s.complete(accepts[0], 0, nil, ns)
		accepts = accepts[1:]
		s.flushDone()
	}
	l.Close()
	var err error = errClosedCanceled
	if lerr != nil {
		err = fmt.Errorf("%w: %w", ErrConnAborted, lerr)
	}
	for _, a := range accepts {
		s.complete(a, 0, err, nil)
	}
	s.flushDone()
	s.finish(err, 0)
}

// acceptConn checks a connection request, and if it matches the listening
// socket sets up the new connected socket and starts its goroutine.
func (s *Socket) acceptConn(req *verbs.ConnRequest) (*Socket, error) {
	local := hello{version: helloVersion, mode: s.cfg.mode, typ: s.typ, frames: uint16(s.cfg.frames)}
	peer, err := decodeHello(req.PrivateData())
	if err != nil {
		rej := local
		rej.reason = rejectBad
		req.Reject(rej.encode())
		return nil, err
	}
	if r := local.match(&peer); r != rejectNone {
		rej := local
		rej.reason = r
		req.Reject(rej.encode())
		return nil, mismatchError(r, &local, &peer)
	}
	ns := newSocket(s.st, s.typ, s.cfg)
	ns.state, ns.addr, ns.dev, ns.running = sockConnected, s.addr, s.dev, true
	c, err := newConn(ns, s.dev)
	if err == nil {
		if err = c.start(&peer); err != nil {
			c.destroy()
		}
	}
	if err != nil {
		rej := local
		rej.reason = rejectResource
		req.Reject(rej.encode())
		return nil, err
	}
	if err := req.Accept(c.qp, c.local.encode()); err != nil {
		c.destroy()
		return nil, err
	}
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
