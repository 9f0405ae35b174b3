package exsnet

import (
	"context"
	"errors"
	"net"
	"sync"

	"go.uber.org/zap"

	"github.com/exsgo/exs/exs"
)

// socketOptions returns the options of the package's sockets: the
// caller's, then the limits of outstanding operations the package needs.
func socketOptions(cfg *config) []exs.SocketOption {
	return append(cfg.sockOpts[:len(cfg.sockOpts):len(cfg.sockOpts)], exs.WithOutstanding(maxSends, max(readChunks, acceptsAhead)))
}

// Dial connects to the listener at addr, an exs address such as
// "inproc:echo" or "shm:/run/app.sock" (see package exs), and returns the
// connection once the listener's side has accepted it. ctx bounds the
// connect, and so does the socket's connect time limit (exs's
// WithConnectTimeout, 5 seconds by default); ctx has no effect on the
// connection once it is up. Errors are *net.OpError values whose cause
// keeps its errno: a refused connect matches syscall.ECONNREFUSED, one past
// its time limit os.ErrDeadlineExceeded.
func Dial(ctx context.Context, addr string, opts ...Option) (*Conn, error) {
	cfg := defaultConfig()
	if err := cfg.applyOptions(opts); err != nil {
		return nil, dialErr(addr, err)
	}
	if ctx == nil {
		return nil, dialErr(addr, errors.New("exsnet: nil context"))
	}
	ref, err := newStackRef(&cfg)
	if err != nil {
		return nil, dialErr(addr, cause(err))
	}
	st := ref.st
	cq, err := st.Qcreate(4)
	if err != nil {
		ref.release()
		return nil, dialErr(addr, cause(err))
	}
	sock, err := st.Socket(exs.SockStream, socketOptions(&cfg)...)
	if err != nil {
		st.Qdelete(cq)
		ref.release()
		return nil, dialErr(addr, cause(err))
	}
	if err := sock.ConnectContext(ctx, cq, addr, "connect"); err != nil {
		closeSocket(st, sock)
		st.Qdelete(cq)
		ref.release()
		return nil, dialErr(addr, cause(err))
	}
	c, err := newConn(sock, ref, &cfg, cq)
	if err != nil {
		return nil, dialErr(addr, cause(err))
	}
	// exs ends every connect within its time limit, with ctx's end at the
	// latest: this wait is bounded.
	var evs [1]exs.Event
	for {
		if _, err := cq.Dequeue(evs[:], 1, -1); err != nil {
			c.abandon()
			return nil, dialErr(addr, cause(err))
		}
		if evs[0].Type == exs.EventConnect {
			break
		}
	}
	if err := evs[0].Err; err != nil {
		c.abandon()
		return nil, dialErr(addr, cause(err))
	}
	c.connected()
	cfg.log.Debug("exsnet: dialed", zap.Stringer("local", c.local), zap.Stringer("remote", c.remote))
	return c, nil
}

func dialErr(addr string, err error) error {
	return &net.OpError{Op: "dial", Net: Network, Addr: Addr(addr), Err: err}
}

// closeSocket closes a socket no Conn owns and waits for its close event.
func closeSocket(st *exs.Stack, s *exs.Socket) {
	q, err := st.Qcreate(1)
	if err != nil {
		return // the stack is closed, and s with it
	}
	defer st.Qdelete(q)
	if err := s.Close(q, nil); err != nil {
		return
	}
	var evs [1]exs.Event
	q.Dequeue(evs[:], 1, closeWait)
}

// Listener is a net.Listener of exs connections. Listen returns one.
//
// It keeps a few accepts posted, so that connects complete without
// waiting for a call to Accept (exs completes a connect only when an
// accept takes it); further connects wait in the listening socket's
// backlog, each for its own connect time limit. It is safe for concurrent
// use; the zero Listener is not usable.
type Listener struct {
	sock *exs.Socket
	ref  *stackRef
	cfg  config
	addr Addr
	aq   *exs.Queue // accept events
	cq   *exs.Queue // the listening socket's close event
	done *doneCtx   // ends at Close

	mu     sync.Mutex
	closed bool
}

// Listen listens at addr, an exs address such as "inproc:echo" or
// "shm:/run/app.sock" (the same-host provider binds a Unix socket at that
// path). Without WithStack the listener makes a stack of its own, which
// it shares with the connections it accepts and which is closed with the
// last of them. Errors are *net.OpError values; an address in use matches
// syscall.EADDRINUSE.
func Listen(addr string, opts ...Option) (*Listener, error) {
	l := &Listener{cfg: defaultConfig(), addr: Addr(addr), done: newDoneCtx()}
	if err := l.cfg.applyOptions(opts); err != nil {
		return nil, l.opErr("listen", err)
	}
	ref, err := newStackRef(&l.cfg)
	if err != nil {
		return nil, l.opErr("listen", cause(err))
	}
	l.ref = ref
	if err := l.listen(addr); err != nil {
		if l.sock != nil {
			closeSocket(ref.st, l.sock)
		}
		for _, q := range []*exs.Queue{l.aq, l.cq} {
			if q != nil {
				ref.st.Qdelete(q)
			}
		}
		ref.release()
		return nil, l.opErr("listen", cause(err))
	}
	l.cfg.log.Debug("exsnet: listening", zap.Stringer("addr", l.addr))
	return l, nil
}

func (l *Listener) listen(addr string) error {
	st := l.ref.st
	var err error
	if l.aq, err = st.Qcreate(acceptsAhead); err != nil {
		return err
	}
	if l.cq, err = st.Qcreate(1); err != nil {
		return err
	}
	if l.sock, err = st.Socket(exs.SockStream, socketOptions(&l.cfg)...); err != nil {
		return err
	}
	if err := l.sock.Bind(addr); err != nil {
		return err
	}
	if err := l.sock.Listen(0); err != nil {
		return err
	}
	l.addr = Addr(l.sock.Addr())
	for range acceptsAhead {
		if err := l.sock.Accept(l.aq, nil); err != nil {
			return err
		}
	}
	return nil
}

// Accept waits for the next connection and returns it (a *Conn). After
// Close, and in calls pending when Close is called, it returns an error
// matching net.ErrClosed.
func (l *Listener) Accept() (net.Conn, error) {
	var evs [1]exs.Event
	for {
		if l.isClosed() {
			return nil, l.opErr("accept", net.ErrClosed)
		}
		if n, err := l.aq.DequeueContext(l.done, evs[:], 1); n == 0 {
			if l.isClosed() {
				return nil, l.opErr("accept", net.ErrClosed)
			}
			return nil, l.opErr("accept", cause(err))
		}
		ev := evs[0]
		evs[0] = exs.Event{}
		if l.isClosed() {
			if ev.Accepted != nil {
				closeSocket(l.ref.st, ev.Accepted)
			}
			return nil, l.opErr("accept", net.ErrClosed)
		}
		// Keep the accepts posted; this fails only once Close has begun.
		if err := l.sock.Accept(l.aq, nil); err != nil {
			l.cfg.log.Debug("exsnet: repost accept", zap.Stringer("addr", l.addr), zap.Error(err))
		}
		if ev.Err != nil {
			// An accept that found its request gone (a connect that gave
			// up): take the next.
			l.cfg.log.Debug("exsnet: accept failed", zap.Stringer("addr", l.addr), zap.Error(ev.Err))
			continue
		}
		c, err := l.newConn(ev.Accepted)
		if err != nil {
			return nil, l.opErr("accept", cause(err))
		}
		return c, nil
	}
}

// newConn makes the Conn of an accepted socket.
func (l *Listener) newConn(s *exs.Socket) (*Conn, error) {
	st := l.ref.st
	cq, err := st.Qcreate(4)
	if err != nil {
		closeSocket(st, s)
		return nil, err
	}
	l.ref.acquire()
	c, err := newConn(s, l.ref, &l.cfg, cq)
	if err != nil {
		return nil, err
	}
	c.connected()
	l.cfg.log.Debug("exsnet: accepted", zap.Stringer("local", c.local), zap.Stringer("remote", c.remote))
	return c, nil
}

// Close stops listening: pending Accepts return an error matching
// net.ErrClosed, and connections accepted by the listener but not yet
// returned by Accept are closed. Connections Accept returned stay open.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return l.opErr("close", net.ErrClosed)
	}
	l.closed = true
	l.done.close()
	l.mu.Unlock()

	st := l.ref.st
	if err := l.sock.Close(l.cq, nil); err == nil {
		// The close event is the socket's last: every accept's event is
		// in aq then.
		var evs [1]exs.Event
		if n, _ := l.cq.Dequeue(evs[:], 1, closeWait); n == 0 {
			l.cfg.log.Error("exsnet: listening socket did not close", zap.Stringer("addr", l.addr), zap.Duration("after", closeWait))
		}
	}
	evs := make([]exs.Event, acceptsAhead)
	for {
		n := l.aq.TryDequeue(evs)
		if n == 0 {
			break
		}
		for _, ev := range evs[:n] {
			if ev.Accepted != nil {
				closeSocket(st, ev.Accepted)
			}
		}
	}
	st.Qdelete(l.aq)
	st.Qdelete(l.cq)
	l.ref.release()
	return nil
}

// Addr returns the listening address.
func (l *Listener) Addr() net.Addr { return l.addr }

func (l *Listener) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

func (l *Listener) opErr(op string, err error) error {
	return &net.OpError{Op: op, Net: Network, Addr: l.addr, Err: err}
}

var _ net.Listener = (*Listener)(nil)
