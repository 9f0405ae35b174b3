// Package inproc is the in-process provider of package verbs: it connects
// queue pairs of one process. A one-sided operation is a copy between the
// two queue pairs' registered memory, made by the provider in the
// initiator's goroutine (the peer's application takes no part); a SEND is
// a copy into the RECV at the head of the peer's receive queue.
//
// The provider starts no goroutine, and on the data path it uses no
// channel and does not allocate: Link.Transmit hands each message straight
// to the peer's verbs.Endpoint, which checks and places it before
// Transmit returns. Connection management uses a registry of listeners per
// Provider, so independent Providers never see each other's addresses;
// there is no package-level state.
//
// Addresses have the form "inproc:NAME", NAME being any non-empty string.
package inproc

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/exsgo/exs/verbs"
)

// Scheme is the prefix of the provider's addresses.
const Scheme = "inproc:"

// Backlog is how many connection requests a listener queues before it
// refuses more (as a TCP listen backlog).
const Backlog = 128

// Compile-time checks that the provider implements the verbs interfaces.
var (
	_ verbs.Provider     = (*Provider)(nil)
	_ verbs.LinkListener = (*listener)(nil)
	_ verbs.LinkRequest  = (*request)(nil)
	_ verbs.Link         = (*link)(nil)
	_ verbs.PeerReporter = (*link)(nil)
)

// Provider is the in-process provider. It is safe for concurrent use. The
// zero Provider is ready to use; New returns one. A Provider holds only
// its registry of listeners: it has nothing to close.
type Provider struct {
	mu        sync.Mutex
	listeners map[string]*listener
	dials     atomic.Uint64 // names the connecting ends
}

// New returns a provider with an empty registry.
func New() *Provider { return &Provider{} }

// parse returns the name of an "inproc:NAME" address.
func parse(addr string) (string, error) {
	name, ok := strings.CutPrefix(addr, Scheme)
	if !ok || name == "" {
		return "", fmt.Errorf("%w: address %q is not %sNAME", verbs.ErrInvalid, addr, Scheme)
	}
	return name, nil
}

// Listen registers a listener at addr ("inproc:NAME"). It returns an error
// wrapping syscall.EADDRINUSE if the provider has a listener there.
func (p *Provider) Listen(addr string) (verbs.LinkListener, error) {
	name, err := parse(addr)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.listeners[name]; ok {
		return nil, fmt.Errorf("inproc: listen %s: %w", addr, syscall.EADDRINUSE)
	}
	if p.listeners == nil {
		p.listeners = make(map[string]*listener)
	}
	l := &listener{
		p:       p,
		name:    name,
		backlog: make(chan *request, Backlog),
		closed:  make(chan struct{}),
	}
	p.listeners[name] = l
	return l, nil
}

// Dial sends a connection request to the listener at addr and waits for
// the answer. It returns an error wrapping syscall.ECONNREFUSED if no
// listener is there or its backlog is full.
func (p *Provider) Dial(ctx context.Context, addr string, ep *verbs.Endpoint, private []byte) (verbs.Link, []byte, error) {
	name, err := parse(addr)
	if err != nil {
		return nil, nil, err
	}
	r := &request{
		private: append([]byte(nil), private...),
		active:  ep,
		done:    make(chan struct{}),
		name:    fmt.Sprintf("%s@%d", Scheme, p.dials.Add(1)),
		to:      Scheme + name,
	}
	p.mu.Lock()
	l := p.listeners[name]
	if l == nil {
		p.mu.Unlock()
		return nil, nil, fmt.Errorf("inproc: no listener at %s: %w", addr, syscall.ECONNREFUSED)
	}
	select {
	case l.backlog <- r:
	default:
		p.mu.Unlock()
		return nil, nil, fmt.Errorf("inproc: backlog of %s full: %w", addr, syscall.ECONNREFUSED)
	}
	p.mu.Unlock()

	select {
	case <-r.done:
	case <-ctx.Done():
		r.mu.Lock()
		if r.state == statePending {
			r.state = stateCancelled
			r.mu.Unlock()
			return nil, nil, fmt.Errorf("inproc: connect %s: %w", addr, ctx.Err())
		}
		r.mu.Unlock() // answered meanwhile: take the answer
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state == stateAccepted {
		return r.link, r.reply, nil
	}
	return nil, nil, &verbs.RejectError{PrivateData: r.reply}
}

// listener is a registered listener.
type listener struct {
	p       *Provider
	name    string
	backlog chan *request
	closed  chan struct{}
	once    sync.Once
}

// Addr returns "inproc:NAME".
func (l *listener) Addr() string { return Scheme + l.name }

// Accept returns the next request.
func (l *listener) Accept(ctx context.Context) (verbs.LinkRequest, error) {
	r, err := verbs.AcceptNext(ctx, l.backlog, l.closed)
	if err != nil {
		return nil, fmt.Errorf("inproc: accept on %s: %w", l.Addr(), err)
	}
	return r, nil
}

// Close unregisters the listener and rejects the requests in its backlog.
func (l *listener) Close() error {
	err := verbs.ErrClosed
	l.once.Do(func() {
		err = nil
		l.p.mu.Lock()
		delete(l.p.listeners, l.name)
		l.p.mu.Unlock()
		close(l.closed)
		// No Dial can queue a request any more: drain the backlog.
		for {
			select {
			case r := <-l.backlog:
				r.Reject(nil)
			default:
				return
			}
		}
	})
	return err
}

// States of a request.
const (
	statePending = iota
	stateAccepted
	stateRejected
	stateCancelled
)

// request is a connection request on its way to being answered.
type request struct {
	private []byte
	active  *verbs.Endpoint
	done    chan struct{} // closed when answered
	name    string        // the connecting end's: "inproc:@N"
	to      string        // the listener's address

	mu    sync.Mutex
	state int
	reply []byte
	link  *link // the requester's end, once accepted
}

// PrivateData returns the request's private data.
func (r *request) PrivateData() []byte { return r.private }

// answer moves a pending request to state, or reports why it cannot.
func (r *request) answerLocked(state int, private []byte) error {
	switch r.state {
	case statePending:
	case stateCancelled:
		return fmt.Errorf("inproc: requester gave up: %w", syscall.ECONNABORTED)
	default:
		return fmt.Errorf("%w: connection request already answered", verbs.ErrInvalid)
	}
	r.state = state
	r.reply = append([]byte(nil), private...)
	close(r.done)
	return nil
}

// Accept joins the requester's endpoint and ep with a pair of links.
func (r *request) Accept(ep *verbs.Endpoint, private []byte) (verbs.Link, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &conn{}
	c.ends[0] = link{c: c, local: r.active, peer: ep, addrs: verbs.Peer{LocalAddr: r.name, RemoteAddr: r.to}}
	c.ends[1] = link{c: c, local: ep, peer: r.active, addrs: verbs.Peer{LocalAddr: r.to, RemoteAddr: r.name}}
	if err := r.answerLocked(stateAccepted, private); err != nil {
		return nil, err
	}
	r.link = &c.ends[0]
	return &c.ends[1], nil
}

// Reject answers the request with a rejection.
func (r *request) Reject(private []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.answerLocked(stateRejected, private)
}

// conn is one connection: two links that share their fate.
type conn struct {
	closed atomic.Bool
	ends   [2]link
}

// link is one end of a conn.
type link struct {
	c           *conn
	local, peer *verbs.Endpoint
	addrs       verbs.Peer
}

// Peer returns the two ends' names: the listener's address, and "inproc:@N"
// for the connecting end (N counts the provider's connects). The peer is
// this process: there are no credentials to tell.
func (l *link) Peer() verbs.Peer { return l.addrs }

// Transmit hands m to the peer's endpoint, which places it (copying from
// the initiator's memory) before returning.
func (l *link) Transmit(m *verbs.Message) (bool, error) {
	if l.c.closed.Load() {
		return true, verbs.ErrClosed
	}
	return true, l.peer.Deliver(m)
}

// RecvPosted makes the peer, whose SEND waits for a RECV here, retry it.
func (l *link) RecvPosted() {
	if !l.c.closed.Load() {
		l.peer.Retry()
	}
}

// Terminate closes the connection and tells the peer, once.
func (l *link) Terminate(cause error) {
	if l.c.closed.CompareAndSwap(false, true) {
		l.peer.Terminated(cause)
	}
}
