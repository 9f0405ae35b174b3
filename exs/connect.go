package exs

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/exsgo/exs/verbs"
)

// Connect posts a connect of a new (or bound) socket to the listening
// socket at addr. The connection is set up in the background; the connect
// completes with an EventConnect once the listening socket's accept took
// it (see Listen), or with an error: matching syscall.ECONNREFUSED when no
// socket listens at addr or the listening socket refused (its backlog is
// full, or, matching ErrMismatch too, the two ends' protocol mode, socket
// type or version differ), and ErrTimedOut (ETIMEDOUT) when no accept took
// it within the socket's connect time limit (WithConnectTimeout). Sends,
// recvs and a shutdown may be posted at once: they start when the
// connection is up, and fail with the connect's error if it fails.
func (s *Socket) Connect(q *Queue, addr string, user any) error {
	return s.ConnectContext(context.Background(), q, addr, user)
}

// ConnectContext is Connect with a context that bounds the connection's
// set-up: if ctx ends before the connect completes, the connect completes
// with ErrTimedOut (ctx's deadline passed) or ErrCanceled (ctx was
// canceled). The socket's connect time limit applies too. Once the
// connection is up, ctx has no effect on it.
func (s *Socket) ConnectContext(ctx context.Context, q *Queue, addr string, user any) error {
	if ctx == nil {
		return opErr("connect", addr, fmt.Errorf("%w: nil context", ErrInvalid))
	}
	if err := s.checkQueue(q); err != nil {
		return opErr("connect", addr, err)
	}
	d, full, err := s.st.resolve(addr)
	if err != nil {
		return opErr("connect", addr, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case sockNew, sockBound:
	case sockClosed:
		return opErr("connect", full, ErrClosed)
	case sockFailed:
		return opErr("connect", full, fmt.Errorf("%w: the socket failed to connect before: close it", ErrInvalid))
	default:
		return opErr("connect", full, errIsConn)
	}
	if err := q.reserve(); err != nil {
		return opErr("connect", full, err)
	}
	idx := s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
	s.serial++
	s.ops[idx] = op{kind: opConnect, q: q, user: user, serial: s.serial}
	s.slots[idx] = slotInfo{kind: opConnect, user: user, serial: s.serial}
	s.nctl++
	prev := s.state
	s.state, s.addr, s.dev, s.running, s.connCtx = sockConnecting, full, d, true, ctx
	if !s.st.spawn(func() { s.connectLoop(idx) }) {
		s.state, s.running = prev, false
		s.ops[idx], s.slots[idx] = op{}, slotInfo{}
		s.free = append(s.free, idx)
		s.nctl--
		q.unreserve()
		return opErr("connect", full, ErrClosed)
	}
	return nil
}

// connectLoop serves a socket from its connect on: it sets up the
// connection, completes the connect, then runs the progress loop.
func (s *Socket) connectLoop(idx int32) {
	c, err := newConn(s, s.dev)
	if err == nil {
		err = s.dial(c)
		if err != nil {
			c.destroy()
		}
	}
	if err != nil {
		s.log.Debug("connect failed", zap.String("addr", s.addr), zap.Error(err))
		// The socket takes no more operations before its connect's event
		// can be seen: those posted already fail with the connect's error.
		s.mu.Lock()
		if !s.closing {
			s.state = sockFailed
		}
		s.mu.Unlock()
		s.complete(idx, 0, err, nil)
		s.flushDone()
		s.finish(err, 1)
		return
	}
	s.mu.Lock()
	if s.state == sockConnecting {
		s.state = sockConnected
	}
	s.peer = c.qp.Peer()
	s.mu.Unlock()
	s.log.Debug("connected", zap.String("addr", s.addr), zap.Stringer("mode", s.cfg.mode), zap.Stringer("type", s.typ))
	s.complete(idx, 0, nil, nil)
	s.flushDone()
	c.loop()
}

// dial connects c's queue pair to s.addr and starts the engine.
func (s *Socket) dial(c *conn) error {
	s.mu.Lock()
	if s.closing || s.cancelReq {
		err := s.cancelErrLocked()
		s.mu.Unlock()
		return err
	}
	base := s.connCtx
	ctx, cancel := context.WithCancel(context.Background())
	s.interrupt = cancel
	s.mu.Unlock()
	// The connect's limits: the socket's time limit, and the context of
	// ConnectContext, whose end is copied into ctx.
	tctx, tcancel := context.WithTimeout(ctx, s.cfg.connTime)
	stop := context.AfterFunc(base, tcancel)

	reply, err := c.qp.Connect(tctx, s.addr, c.local.encode())

	stop()
	s.mu.Lock()
	s.interrupt = nil
	cerr := s.cancelErrLocked()
	s.mu.Unlock()
	interrupted := ctx.Err() != nil
	limit := errors.Is(tctx.Err(), context.DeadlineExceeded) && base.Err() == nil
	baseErr := base.Err()
	tcancel()
	cancel()
	if err != nil {
		var rej *verbs.RejectError
		switch {
		case interrupted:
			return cerr
		case limit:
			return fmt.Errorf("%w: no accept within %v", ErrTimedOut, s.cfg.connTime)
		case errors.Is(baseErr, context.DeadlineExceeded):
			return fmt.Errorf("%w: the context's deadline passed", ErrTimedOut)
		case baseErr != nil:
			return fmt.Errorf("%w: the context was canceled", ErrCanceled)
		case errors.As(err, &rej):
			if h, derr := decodeHello(rej.PrivateData); derr == nil && h.reason != rejectNone {
				return mismatchError(h.reason, &c.local, &h)
			}
		}
		return err // the provider's, which names it and the address
	}
	peer, err := decodeHello(reply)
	if err == nil {
		if r := c.local.match(&peer); r != rejectNone {
			err = mismatchError(r, &c.local, &peer)
		}
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConnAborted, err)
	}
	return c.start(&peer)
}
