// Package faults is a fault-injecting verbs provider for tests: it wraps
// any verbs.Provider and, as filters installed by the test decide, holds or
// delays messages, reports their outcomes late and in another order, drops
// a connection at a chosen message, refuses registrations, posts and
// connects, and slows the goroutines that poll completions, the way Go's
// net/internal/socktest switches faults into real sockets. With no filter
// installed it passes every call through, adding a lock and a few loads
// per message.
//
//	p := faults.New(inproc.New())
//	defer p.Close()
//	p.Set(faults.Filters{
//		Message: func(m *faults.Msg) faults.Fault {
//			if m.Conn.Side() == faults.Dialer && m.Seq == 3 {
//				return faults.Fault{Drop: faults.ErrReset} // the peer vanishes at the 4th message
//			}
//			return faults.Fault{Delay: time.Millisecond}
//		},
//	})
//	st, _ := exs.NewStack(exs.WithProvider("inproc", p))
//
// # What verbs allows, and so what the faults are
//
// A provider must place the messages of each queue pair in the order they
// were posted, and the faults keep that order: a message held or delayed
// holds every later message of its link (its direction of the connection)
// behind it. The two directions of a connection are independent, so
// delaying one lets the other overtake it. A provider may report the
// outcomes of messages in any order, and late (Fault.CompleteAfter). A
// connection may end at any moment (Fault.Drop, Conn.Drop): messages not yet
// handed on are lost, and the queue pairs flush their work requests. A
// message whose outcome was reported as a success was delivered: nothing
// here takes a delivered message back or delivers one twice.
//
// Held and delayed messages are handed to the inner provider by a goroutine
// of the connection end, started when the first such message comes and
// ended when none is left; outcomes the inner provider reports at once are
// then reported to the queue pair from that goroutine (Endpoint.Complete).
// A message that the target refuses while the goroutine hands it on
// completes with the refusal's status, as it would without the wrapper,
// when the target's end goes through this provider too (the refusal's
// termination then waits for the outcome); when it does not, the status is
// the one the termination's cause tells (StatusRemoteAccessError for a
// key, bounds or rights violation), or flushed. Outcomes the inner
// provider reports later (from a goroutine of its own) reach the queue pair
// directly and cannot be delayed.
package faults

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// ErrInjected is matched (errors.Is) by every cause this package makes up:
// ErrReset and ErrAbort.
var ErrInjected = errors.New("injected fault")

// Causes for Fault.Drop and Conn.Drop.
var (
	// ErrReset ends a connection as when the peer vanishes (its process
	// killed, its link gone): both queue pairs record an error that
	// matches verbs.ErrDisconnected and syscall.ECONNRESET.
	ErrReset error = &injected{"faults: connection reset", verbs.ErrDisconnected}
	// ErrAbort ends a connection as a transport failure does: both queue
	// pairs record an error that matches verbs.ErrTerminated and
	// syscall.ECONNABORTED.
	ErrAbort error = &injected{"faults: transport failure", verbs.ErrTerminated}
)

// injected is the type of the causes this package makes up.
type injected struct {
	msg   string
	cause error
}

func (e *injected) Error() string        { return e.msg }
func (e *injected) Unwrap() error        { return e.cause }
func (e *injected) Is(target error) bool { return target == ErrInjected }

// Side says which end of a connection a Conn is.
type Side uint8

const (
	// Dialer is the end that sent the connection request.
	Dialer Side = iota + 1
	// Acceptor is the end that accepted it.
	Acceptor
)

// String returns "dialer" or "acceptor".
func (s Side) String() string {
	switch s {
	case Dialer:
		return "dialer"
	case Acceptor:
		return "acceptor"
	}
	return fmt.Sprintf("Side(%d)", uint8(s))
}

// Msg describes a message a connection end was given to carry
// (Link.Transmit), for Filters.Message.
type Msg struct {
	// Conn is the connection end that carries the message.
	Conn *Conn
	// Seq numbers the messages given to Conn, from 0. A message that
	// met receiver-not-ready and is transmitted again by its queue pair
	// gets a new number.
	Seq uint64
	// Op, Len: the operation and its length in bytes.
	Op  verbs.Opcode
	Len int
}

// Fault says what happens to one message. The zero Fault passes it on.
type Fault struct {
	// Delay hands the message to the inner provider this long after it
	// was given, or later if messages before it are still held: the
	// messages after it on its link wait behind it.
	Delay time.Duration
	// Hold holds the message, and the ones after it on its link, until
	// Conn.Release (or the end of the connection).
	Hold bool
	// CompleteAfter reports a successful outcome this long after the
	// message was delivered instead of at once, so that outcomes come in
	// another order than the messages. It applies to outcomes the inner
	// provider reports at once (the in-process provider's).
	CompleteAfter time.Duration
	// Drop, if not nil, ends the connection at this message with Drop as
	// the cause (ErrReset, ErrAbort or any error), as Conn.Drop does:
	// before the message is handed on (it is lost), or with DropAfter once
	// it was delivered and before its outcome is reported (the initiator's
	// work request is flushed although the target got it).
	Drop      error
	DropAfter bool
}

// Post describes a post of work requests, for Filters.Post.
type Post struct {
	// Conn is the connection end of the queue pair, or nil while the
	// connection is being set up.
	Conn *Conn
	// Endpoint is the queue pair's connection.
	Endpoint *verbs.Endpoint
	// Recv tells a post of RECVs from one of send work requests.
	Recv bool
	// N is the number of work requests.
	N int
}

// Registration describes a memory registration, for Filters.Register.
type Registration struct {
	// Seq numbers the registrations the provider was asked about, from 0.
	Seq    uint64
	PD     *verbs.PD
	Len    int
	Access mreg.Access
}

// Filters decide the faults. Each is optional; a nil filter injects
// nothing. Filters are called concurrently, from the goroutines that post,
// transmit, poll and register; they must be safe for that, must not block
// for long, and must not call into the provider or the queue pairs.
type Filters struct {
	// Message is asked about each message a connection end is given to
	// carry.
	Message func(*Msg) Fault
	// Post is asked at the start of each post of work requests on a queue
	// pair with a connection: an error refuses the post, which posts
	// nothing (verbs.ErrQueueFull plays a full queue or completion queue).
	Post func(*Post) error
	// Register is asked before each registration: an error refuses it.
	Register func(*Registration) error
	// Dial is asked before each connection request is sent: an error
	// fails the Dial with it (wrap syscall.ECONNREFUSED to play a refusal).
	Dial func(addr string) error
}

// Provider is the fault-injecting provider. It is safe for concurrent use.
// Create one with New.
type Provider struct {
	inner   verbs.Provider
	filters atomic.Pointer[Filters]
	regs    atomic.Uint64
	stats   struct {
		conns, messages, deferred, completeLater, drops atomic.Int64
		refusedPosts, refusedRegs, refusedDials         atomic.Int64
	}
	wg sync.WaitGroup // the goroutines of the connection ends

	mu     sync.Mutex
	closed bool
	nextID uint64
	conns  map[*verbs.Endpoint]*Conn // live connection ends
	rnr    map[*Conn]struct{}        // ends whose head message waits for a RECV at the peer
	// The ends whose goroutine hands a message to the inner provider, by
	// the goroutine's id.
	delivering map[uint64]*Conn
}

// Compile-time checks.
var (
	_ verbs.Provider             = (*Provider)(nil)
	_ verbs.RegistrationFilter   = (*Provider)(nil)
	_ verbs.PostFilter           = (*Provider)(nil)
	_ verbs.RegistrationObserver = (*Provider)(nil)
	_ verbs.LinkListener         = (*listener)(nil)
	_ verbs.LinkRequest          = (*request)(nil)
	_ verbs.Link                 = (*Conn)(nil)
	_ verbs.PeerReporter         = (*Conn)(nil)
)

// New returns a provider that wraps inner, with no filter installed. The
// addresses are inner's. It implements the optional abilities of inner's
// that a wrapper must pass on (verbs.RegistrationObserver, and exs's
// Allocator: Alloc and Free, which fail when inner has none, exs then
// allocating from mreg), and the fault-injection abilities
// (verbs.RegistrationFilter, verbs.PostFilter), which also ask inner's.
func New(inner verbs.Provider) *Provider {
	return &Provider{
		inner: inner,
		conns: make(map[*verbs.Endpoint]*Conn),
		rnr:   make(map[*Conn]struct{}),

		delivering: make(map[uint64]*Conn),
	}
}

// Inner returns the wrapped provider.
func (p *Provider) Inner() verbs.Provider { return p.inner }

// Set installs f, replacing the filters installed before. Calls made from
// then on see the new filters; Set(Filters{}) removes every filter.
func (p *Provider) Set(f Filters) { p.filters.Store(&f) }

func (p *Provider) current() *Filters {
	if f := p.filters.Load(); f != nil {
		return f
	}
	return &Filters{}
}

// Conns returns the connection ends set up and not yet ended, in the order
// they were set up.
func (p *Provider) Conns() []*Conn {
	p.mu.Lock()
	cs := make([]*Conn, 0, len(p.conns))
	for _, c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	sort.Slice(cs, func(i, j int) bool { return cs[i].id < cs[j].id })
	return cs
}

// Stats counts what the provider did since New.
type Stats struct {
	Conns         int64 // connection ends set up
	Messages      int64 // messages given to carry
	Deferred      int64 // held or delayed, and handed on by an end's goroutine
	CompleteLater int64 // outcomes reported late
	Drops         int64 // connections dropped (Conn.Drop, Fault.Drop)
	RefusedPosts  int64 // posts refused by Filters.Post
	RefusedRegs   int64 // registrations refused by Filters.Register
	RefusedDials  int64 // connection requests refused by Filters.Dial
}

// Stats returns the provider's counters.
func (p *Provider) Stats() Stats {
	s := &p.stats
	return Stats{
		Conns: s.conns.Load(), Messages: s.messages.Load(), Deferred: s.deferred.Load(),
		CompleteLater: s.completeLater.Load(), Drops: s.drops.Load(),
		RefusedPosts: s.refusedPosts.Load(), RefusedRegs: s.refusedRegs.Load(), RefusedDials: s.refusedDials.Load(),
	}
}

// Close drops every connection end still up (as Conn.Drop with ErrReset),
// refuses Listen and Dial from then on, and waits for the goroutines of the
// connection ends to end. It does not close the inner provider. A second
// Close returns verbs.ErrClosed.
func (p *Provider) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return verbs.ErrClosed
	}
	p.closed = true
	p.mu.Unlock()
	for _, c := range p.Conns() {
		c.Drop(ErrReset)
	}
	p.wg.Wait()
	return nil
}

func (p *Provider) checkOpen() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("faults: provider: %w", verbs.ErrClosed)
	}
	return nil
}

// Listen starts listening at addr through the inner provider.
func (p *Provider) Listen(addr string) (verbs.LinkListener, error) {
	if err := p.checkOpen(); err != nil {
		return nil, err
	}
	l, err := p.inner.Listen(addr)
	if err != nil {
		return nil, err
	}
	return &listener{p: p, LinkListener: l}, nil
}

// Dial asks Filters.Dial, then dials through the inner provider.
func (p *Provider) Dial(ctx context.Context, addr string, ep *verbs.Endpoint, private []byte) (verbs.Link, []byte, error) {
	if err := p.checkOpen(); err != nil {
		return nil, nil, err
	}
	if f := p.current().Dial; f != nil {
		if err := f(addr); err != nil {
			p.stats.refusedDials.Add(1)
			return nil, nil, err
		}
	}
	l, reply, err := p.inner.Dial(ctx, addr, ep, private)
	if err != nil {
		return nil, nil, err
	}
	return p.newConn(l, ep, Dialer, addr), reply, nil
}

// FilterRegistration asks Filters.Register, then inner's filter if it has
// one.
func (p *Provider) FilterRegistration(pd *verbs.PD, buf []byte, access mreg.Access) error {
	seq := p.regs.Add(1) - 1
	if f := p.current().Register; f != nil {
		if err := f(&Registration{Seq: seq, PD: pd, Len: len(buf), Access: access}); err != nil {
			p.stats.refusedRegs.Add(1)
			return err
		}
	}
	if f, ok := p.inner.(verbs.RegistrationFilter); ok {
		return f.FilterRegistration(pd, buf, access)
	}
	return nil
}

// FilterPost asks Filters.Post, then inner's filter if it has one.
func (p *Provider) FilterPost(ep *verbs.Endpoint, recv bool, n int) error {
	if f := p.current().Post; f != nil {
		p.mu.Lock()
		c := p.conns[ep]
		p.mu.Unlock()
		if err := f(&Post{Conn: c, Endpoint: ep, Recv: recv, N: n}); err != nil {
			p.stats.refusedPosts.Add(1)
			return err
		}
	}
	if f, ok := p.inner.(verbs.PostFilter); ok {
		return f.FilterPost(ep, recv, n)
	}
	return nil
}

// MemoryRegistered passes the registration on to inner, if it observes
// registrations.
func (p *Provider) MemoryRegistered(pd *verbs.PD, mr *verbs.MR) {
	if o, ok := p.inner.(verbs.RegistrationObserver); ok {
		o.MemoryRegistered(pd, mr)
	}
}

// MemoryDeregistered passes the deregistration on to inner, if it observes
// registrations.
func (p *Provider) MemoryDeregistered(pd *verbs.PD, mr *verbs.MR) {
	if o, ok := p.inner.(verbs.RegistrationObserver); ok {
		o.MemoryDeregistered(pd, mr)
	}
}

// allocator is exs's Allocator, which a provider may offer.
type allocator interface {
	Alloc(n int) ([]byte, error)
	Free(b []byte) error
}

// errNoAllocator is Alloc's error when inner has no allocator.
var errNoAllocator = errors.New("faults: the inner provider has no allocator")

// Alloc allocates from inner's allocator, and fails if inner has none.
func (p *Provider) Alloc(n int) ([]byte, error) {
	if a, ok := p.inner.(allocator); ok {
		return a.Alloc(n)
	}
	return nil, errNoAllocator
}

// Free returns memory to inner's allocator; with none, it fails with
// mreg.ErrInvalid (memory it did not hand out).
func (p *Provider) Free(b []byte) error {
	if a, ok := p.inner.(allocator); ok {
		return a.Free(b)
	}
	return fmt.Errorf("%w: %w", mreg.ErrInvalid, errNoAllocator)
}

// newConn wraps a link of the inner provider.
func (p *Provider) newConn(l verbs.Link, ep *verbs.Endpoint, side Side, addr string) *Conn {
	c := &Conn{p: p, inner: l, ep: ep, side: side, addr: addr, kick: make(chan struct{}, 1)}
	c.cond = sync.NewCond(&c.mu)
	p.mu.Lock()
	p.nextID++
	c.id = p.nextID
	p.stats.conns.Add(1)
	p.conns[ep] = c
	p.mu.Unlock()
	return c
}

// forget removes an ended connection end.
func (p *Provider) forget(c *Conn) {
	p.mu.Lock()
	if p.conns[c.ep] == c {
		delete(p.conns, c.ep)
	}
	delete(p.rnr, c)
	p.mu.Unlock()
}

// setDeliverer records that goroutine g hands a message of c on (c nil:
// no longer).
func (p *Provider) setDeliverer(g uint64, c *Conn) {
	p.mu.Lock()
	if c == nil {
		delete(p.delivering, g)
	} else {
		p.delivering[g] = c
	}
	p.mu.Unlock()
}

// deliverer returns the end whose message goroutine g hands on, or nil.
func (p *Provider) deliverer(g uint64) *Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delivering[g]
}

// waitRNR records that c's head message waits for a RECV at the peer.
func (p *Provider) waitRNR(c *Conn) {
	p.mu.Lock()
	p.rnr[c] = struct{}{}
	p.mu.Unlock()
}

// recvPosted wakes the ends whose head message waits for a RECV: the
// RECV just posted may be the one.
func (p *Provider) recvPosted() {
	p.mu.Lock()
	for c := range p.rnr {
		c.recvPosted()
	}
	p.mu.Unlock()
}

type listener struct {
	p *Provider
	verbs.LinkListener
}

func (l *listener) Accept(ctx context.Context) (verbs.LinkRequest, error) {
	r, err := l.LinkListener.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return &request{l: l, LinkRequest: r}, nil
}

type request struct {
	l *listener
	verbs.LinkRequest
}

func (r *request) Accept(ep *verbs.Endpoint, private []byte) (verbs.Link, error) {
	link, err := r.LinkRequest.Accept(ep, private)
	if err != nil {
		return nil, err
	}
	return r.l.p.newConn(link, ep, Acceptor, r.l.Addr()), nil
}
