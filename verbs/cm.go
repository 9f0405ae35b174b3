package verbs

import (
	"context"
	"fmt"

	"go.uber.org/zap"
)

// checkPrivate validates private data.
func checkPrivate(p []byte) error {
	if len(p) > MaxPrivateData {
		return fmt.Errorf("%w: %d bytes of private data, limit %d", ErrInvalid, len(p), MaxPrivateData)
	}
	return nil
}

// Connect connects the queue pair, which must be in state Init, to the
// listener at addr (in the provider's syntax), sending private (at most
// MaxPrivateData bytes) with the request. It blocks until the peer accepts
// or rejects, or ctx is done, and returns the private data of the accept.
//
// While it waits the queue pair is in ReadyToReceive and may already
// receive; on success it is in ReadyToSend. On failure it is back in Init
// with its RECVs still posted: a rejection returns a *RejectError (which
// carries the rejecter's private data and satisfies errors.Is(err,
// ErrRejected) and errors.Is(err, syscall.ECONNREFUSED)); no listener, an
// error wrapping syscall.ECONNREFUSED; ctx done, an error wrapping
// ctx.Err(). If the queue pair is closed or moved to Error meanwhile,
// Connect returns ErrClosed or ErrQPState once the provider returns; but
// if the peer accepted and then ended the connection before the provider
// returned, Connect succeeds with the queue pair in Error: the RECVs its
// messages consumed completed first, then the rest flushed, as when a
// connection ends just after it was set up.
//
// Only one Connect or Accept may run on a queue pair at a time; other
// methods may be called concurrently.
func (qp *QP) Connect(ctx context.Context, addr string, private []byte) ([]byte, error) {
	if err := checkPrivate(private); err != nil {
		return nil, err
	}
	ep, err := qp.beginConnect()
	if err != nil {
		return nil, err
	}
	link, reply, err := qp.dev.p.Dial(ctx, addr, ep, private)
	if err != nil {
		qp.abortConnect(ep)
		qp.dev.log.Debug("connect failed", zap.Uint32("qp", qp.num), zap.String("addr", addr), zap.Error(err))
		return nil, err // the provider's, which names it and the address
	}
	if err := qp.finishConnect(ep, link); err != nil {
		return nil, err
	}
	qp.setPeer(link, Peer{RemoteAddr: addr})
	qp.dev.log.Debug("connected", zap.Uint32("qp", qp.num), zap.String("addr", addr))
	return reply, nil
}

// setPeer records the connection's ends: what link reports, completed with
// what the connect or accept knows (known).
func (qp *QP) setPeer(link Link, known Peer) {
	p := known
	if r, ok := link.(PeerReporter); ok {
		p = r.Peer()
		if p.LocalAddr == "" {
			p.LocalAddr = known.LocalAddr
		}
		if p.RemoteAddr == "" {
			p.RemoteAddr = known.RemoteAddr
		}
	}
	qp.peer.Store(&p)
}

// Peer returns what is known of the ends of the queue pair's connection:
// addresses and the peer process's credentials (see Peer). It is the zero
// Peer before the queue pair is connected, and stays after the connection
// ends, until Modify(Reset).
func (qp *QP) Peer() Peer {
	if p := qp.peer.Load(); p != nil {
		return *p
	}
	return Peer{}
}

// beginConnect moves the queue pair from Init to ReadyToReceive with a new
// endpoint.
func (qp *QP) beginConnect() (*Endpoint, error) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.closed.Load() {
		return nil, ErrClosed
	}
	if s := qp.State(); s != StateInit {
		return nil, fmt.Errorf("%w: connect in state %v", ErrQPState, s)
	}
	if qp.ep.Load() != nil {
		return nil, fmt.Errorf("%w: connection already in progress", ErrQPState)
	}
	ep := newEndpoint(qp)
	qp.epMu.Lock()
	qp.ep.Store(ep)
	qp.st.Store(uint32(StateReadyToReceive))
	qp.epMu.Unlock()
	return ep, nil
}

// abortConnect undoes beginConnect after the provider failed.
func (qp *QP) abortConnect(ep *Endpoint) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	ep.terminate(nil)
	qp.epMu.Lock()
	if qp.ep.CompareAndSwap(ep, nil) {
		qp.st.CompareAndSwap(uint32(StateReadyToReceive), uint32(StateInit))
	}
	qp.epMu.Unlock()
}

// finishConnect records the link and moves the queue pair to ReadyToSend.
func (qp *QP) finishConnect(ep *Endpoint, link Link) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	cause := func() error {
		if c := qp.Err(); c != nil {
			return c
		}
		return ErrDisconnected
	}
	// The peer may end the connection as soon as it accepted it, before
	// the provider's Dial returned here: the connect then succeeds, as it
	// would have a moment earlier, with the queue pair already in Error.
	// What the peer sent before it ended was delivered and its RECVs
	// completed, ahead of the flush; failing the connect would lose it.
	if !ep.setLink(link, cause) {
		ep.termDone.Store(true)
		qp.kickSend()
		if qp.closed.Load() {
			return ErrClosed
		}
		if ep.byPeer.Load() {
			return nil
		}
		return fmt.Errorf("%w: connection ended while being set up: %w", ErrQPState, cause())
	}
	if !qp.st.CompareAndSwap(uint32(StateReadyToReceive), uint32(StateReadyToSend)) {
		// An error moved the queue pair to Error before the link was
		// known; terminating the endpoint ends the link it now holds.
		if ep.byPeer.Load() && !qp.closed.Load() {
			return nil
		}
		return fmt.Errorf("%w: connection ended while being set up: %w", ErrQPState, cause())
	}
	qp.rewake()
	return nil
}

// Listener listens for connection requests. It is safe for concurrent
// use. The zero Listener is not usable: call Device.Listen.
type Listener struct {
	dev *Device
	ll  LinkListener
}

// Listen starts listening for connection requests at addr, in the
// provider's syntax. It returns an error wrapping syscall.EADDRINUSE if the
// address is taken.
func (d *Device) Listen(addr string) (*Listener, error) {
	ll, err := d.p.Listen(addr)
	if err != nil {
		return nil, err // the provider's, which names it and the address
	}
	l := &Listener{dev: d, ll: ll}
	if err := d.add(func() { d.listeners[l] = struct{}{} }); err != nil {
		ll.Close()
		return nil, err
	}
	return l, nil
}

// Addr returns the address the listener listens on.
func (l *Listener) Addr() string { return l.ll.Addr() }

// Accept waits for the next connection request, until ctx is done (an
// error wrapping ctx.Err()) or the listener is closed (an error
// satisfying errors.Is(err, ErrClosed)).
func (l *Listener) Accept(ctx context.Context) (*ConnRequest, error) {
	r, err := l.ll.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return &ConnRequest{l: l, r: r}, nil
}

// Close stops listening. Requests not yet accepted are rejected; blocked
// Accept calls return ErrClosed; established connections are not
// affected. A second Close returns ErrClosed.
func (l *Listener) Close() error {
	l.dev.mu.Lock()
	delete(l.dev.listeners, l)
	l.dev.mu.Unlock()
	return l.ll.Close()
}

// ConnRequest is a connection request received by a Listener. Call
// exactly one of Accept and Reject, once; a request left alone keeps its
// requester waiting until its context ends. It is safe for concurrent use;
// only the first Accept or Reject has effect, later ones return an error.
type ConnRequest struct {
	l *Listener
	r LinkRequest
}

// PrivateData returns the private data of the request. The caller must
// not modify it.
func (c *ConnRequest) PrivateData() []byte { return c.r.PrivateData() }

// Accept connects qp, which must be in state Init and belong to the
// listener's device, to the requester, sending private (at most
// MaxPrivateData bytes) with the accept. On success qp is in
// ReadyToSend; the requester's Connect returns once it has the reply. On
// failure (the requester gave up, qp is in the wrong state) qp is back in
// Init.
func (c *ConnRequest) Accept(qp *QP, private []byte) error {
	if err := checkPrivate(private); err != nil {
		return err
	}
	if qp.dev != c.l.dev {
		return fmt.Errorf("%w: queue pair of another device", ErrInvalid)
	}
	ep, err := qp.beginConnect()
	if err != nil {
		return err
	}
	link, err := c.r.Accept(ep, private)
	if err != nil {
		qp.abortConnect(ep)
		return err // the provider's
	}
	if err := qp.finishConnect(ep, link); err != nil {
		return err
	}
	qp.setPeer(link, Peer{LocalAddr: c.l.Addr()})
	qp.dev.log.Debug("accepted", zap.Uint32("qp", qp.num), zap.String("addr", c.l.Addr()))
	return nil
}

// Reject rejects the request, sending private (at most MaxPrivateData
// bytes) to the requester, whose Connect returns a *RejectError.
func (c *ConnRequest) Reject(private []byte) error {
	if err := checkPrivate(private); err != nil {
		return err
	}
	return c.r.Reject(private)
}
