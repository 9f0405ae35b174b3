package verbs

import (
	"context"
	"fmt"
	"io"

	"github.com/exsgo/exs/mreg"
)

// MaxPrivateData is the most private data a connection request, accept or
// reject may carry, as with rdma_cm over iWARP (MPA).
const MaxPrivateData = 512

// MaxMessage is the largest number of bytes one work request may move.
const MaxMessage = 1 << 31

// Provider moves bytes between queue pairs: the in-process provider
// (package inproc) between two queue pairs of one process; others between
// processes or hosts. It is the small interface this package consumes; the
// rules every provider shares (the checks of keys, bounds and rights, the
// order of completions, the Error state and its flushes, receiver-not-ready)
// live in this package, behind Endpoint.
//
// A provider sets up connections (Listen, Dial) and returns for each a
// Link, through which this package hands it Messages to carry. At the far
// end the provider hands each arriving Message to the target's Endpoint
// (Deliver), which checks it and places its bytes. See docs/verbs.md,
// "Writing a new provider", and the conformance suite in package
// verbstest.
//
// A Provider must be safe for concurrent use.
type Provider interface {
	// Listen starts accepting connection requests at addr, in a syntax
	// of the provider's choosing (the in-process provider uses
	// "inproc:name"). It returns an error wrapping syscall.EADDRINUSE if
	// addr is taken.
	Listen(addr string) (LinkListener, error)

	// Dial sends a connection request carrying private (at most
	// MaxPrivateData bytes; the provider must copy it if it keeps it) to
	// the listener at addr and waits until it is accepted, rejected or
	// ctx is done. ep is the local queue pair's end of the connection,
	// already in state ReadyToReceive: the provider may Deliver to it as
	// soon as the peer accepted.
	//
	// On acceptance it returns the Link and the accepter's private data.
	// On rejection it returns a *RejectError carrying the rejecter's
	// private data; if no one listens at addr, an error wrapping
	// syscall.ECONNREFUSED; if ctx is done first, an error wrapping
	// ctx.Err(). After an error no link to ep remains: the provider makes
	// no further calls on ep, and the passive side, if it had accepted,
	// sees the connection terminated.
	Dial(ctx context.Context, addr string, ep *Endpoint, private []byte) (Link, []byte, error)
}

// LinkListener is a provider's listener. It must be safe for concurrent
// use.
type LinkListener interface {
	// Accept waits for the next connection request, until ctx is done or
	// the listener is closed (an error satisfying errors.Is(err,
	// ErrClosed)).
	Accept(ctx context.Context) (LinkRequest, error)
	// Addr returns the address the listener listens on.
	Addr() string
	// Close stops listening. Requests not yet accepted are rejected
	// without private data; blocked Accept calls return ErrClosed.
	// Connections already accepted are not affected. A second Close
	// returns ErrClosed.
	Close() error
}

// LinkRequest is a connection request received by a LinkListener. Exactly
// one of Accept and Reject is called, once.
type LinkRequest interface {
	// PrivateData returns the private data of the request. The caller
	// must not modify it.
	PrivateData() []byte
	// Accept accepts the request for ep (already in state
	// ReadyToReceive), sending private to the requester, and returns the
	// connection's Link. It fails if the requester gave up meanwhile.
	Accept(ep *Endpoint, private []byte) (Link, error)
	// Reject rejects the request, sending private to the requester.
	Reject(private []byte) error
}

// Link is a provider's end of one connection, owned by the queue pair it
// was made for. This package calls Transmit from one goroutine at a time,
// in the order the work requests were posted; RecvPosted and Terminate may
// be called concurrently with Transmit and with each other.
type Link interface {
	// Transmit carries m to the peer, where it must be handed to the
	// peer's Endpoint.Deliver, in order with the Messages transmitted
	// before it. m and the memory its Payload and Sink refer to stay valid
	// until the provider reports m's outcome:
	//
	//   - synchronously, by returning done == true and the outcome err
	//     (nil for success, otherwise an error of Deliver such as
	//     mreg.ErrBounds or ErrNoRecv);
	//   - or later, by returning done == false and calling the local
	//     Endpoint's Complete(m, err).
	//
	// Transmit must not block for long, and never on something that
	// waits for this queue pair (such as its own completions). After
	// Terminate it returns done == true, err == ErrClosed.
	Transmit(m *Message) (done bool, err error)

	// RecvPosted tells the provider that the local queue pair, whose
	// Deliver reported ErrNoRecv, has since had a RECV posted. A provider
	// that reported ErrNoRecv back to the initiator makes the initiator's
	// Endpoint Retry; one that holds the Message at the target delivers it
	// again now. It must not block.
	RecvPosted()

	// Terminate ends the connection: the local queue pair entered the
	// Error state with cause (ErrDisconnected for a plain disconnect).
	// The provider tells the peer, whose Endpoint it calls Terminated on
	// (after reporting the outcome of the peer's message whose refusal
	// caused the termination, if any: see Endpoint.Terminated), and
	// stops calling the local Endpoint; messages in flight are
	// abandoned (this package flushes their work requests). When
	// Terminate returns, the provider no longer touches the memory of any
	// Message it was given. Terminate is idempotent, must not block for
	// long, and may be called from within a call the provider made into
	// the local Endpoint (Deliver, Complete, Terminated).
	Terminate(cause error)
}

// Peer describes the two ends of a connection: their addresses, in the
// provider's syntax, and the peer process's credentials where the provider
// learned them from the operating system. The zero Peer knows nothing.
type Peer struct {
	// LocalAddr is this end's address: the listener's for an accepted
	// connection, a name the provider gave the connecting end otherwise
	// ("" if it has none).
	LocalAddr string
	// RemoteAddr is the peer's address: the address dialed, or the name
	// of the connecting end.
	RemoteAddr string
	// Cred is the peer process's identity, or nil if unknown.
	Cred *Cred
}

// Cred is a process's identity, as the kernel reported it (SO_PEERCRED).
type Cred struct {
	PID, UID, GID int
}

// PeerReporter is an optional ability of a Link: it tells what the
// provider knows of the connection's ends. QP.Peer fills in from the
// connect or accept what a provider without it leaves out.
type PeerReporter interface {
	Peer() Peer
}

// Message is one operation travelling from a queue pair to its peer. On
// the initiator's side this package fills it from a work request and
// hands it to Link.Transmit; at the target, the provider hands a Message
// to Endpoint.Deliver: the initiator's own (the in-process provider), or
// one the provider built from what arrived on the wire.
type Message struct {
	// Op is the operation.
	Op Opcode
	// Imm is the immediate data of OpSendWithImm and OpWriteWithImm.
	Imm uint32
	// RKey and RAddr name the target's memory for OpWrite,
	// OpWriteWithImm and OpRead.
	RKey  mreg.Key
	RAddr uint64
	// Len is the number of bytes sent, written or read; -1 for a SEND
	// whose length a provider learns only at its end (see
	// Endpoint.Deliver).
	Len int
	// Payload yields the Len bytes of a SEND or WRITE. On the initiator's
	// side it reads the gather list, and it also implements io.WriterTo.
	Payload io.Reader
	// Sink takes the Len bytes of a READ's response. On the initiator's
	// side it writes into the scatter list.
	Sink io.Writer

	w *sendWQE // the initiator's work request; nil at a target
}

// Segments returns, on the initiator's side, the local memory of m's
// gather list (SEND, WRITE) or scatter list (READ), one slice per SGE. It
// returns nil for a Message a provider built. The caller must not retain
// the slices past m's outcome.
func (m *Message) Segments() [][]byte {
	if m.w == nil {
		return nil
	}
	return m.w.segs[:len(m.w.sgl)]
}

// Unconfirmed reports whether, on the initiator's side, a provider may
// leave m's outcome unreported for a while: m is an unsignaled SEND or
// RDMA WRITE (its success posts no completion) and, when it was handed
// over, its send queue was at most half full and held no more work
// requests than its send CQ had free slots. A provider that learns of
// delivery by a round trip of its own (the TCP provider's fences) may then
// have a later message's confirmation cover m, as long as it reports m's
// outcome within a bounded time even if nothing follows: until then m
// holds its send-queue slot and its completion-queue reservation, and a
// disconnect flushes it (a flushed work request completes with
// StatusFlushed, signaled or not). It returns false for a Message a
// provider built.
func (m *Message) Unconfirmed() bool {
	return m.w != nil && m.w.lazy
}

// RegistrationObserver is an optional ability of a Provider: one that
// places data without the target's help (the same-host provider writing
// into a peer process's memory) must publish each protection domain's
// registrations where initiators can check them. Device calls these
// methods, if the provider implements them, after a registration succeeds
// and after a deregistration succeeds. They must not block for long and
// must not call back into the PD.
type RegistrationObserver interface {
	MemoryRegistered(pd *PD, mr *MR)
	MemoryDeregistered(pd *PD, mr *MR)
}

// RegistrationFilter is an optional ability of a Provider, for fault
// injection (package verbs/faults): before each registration in one of the
// device's protection domains, PD.RegisterMR asks it, and fails with the
// error it returns, registering nothing. It must not block for long and
// must not call back into the PD.
type RegistrationFilter interface {
	FilterRegistration(pd *PD, buf []byte, access mreg.Access) error
}

// PostFilter is an optional ability of a Provider, for fault injection
// (package verbs/faults): a queue pair that has a connection (being set up
// or set up) asks it at the start of each post (PostSend, PostSendBatch,
// PostRecv, PostRecvBatch), and the post fails with the error it returns,
// posting nothing: ErrQueueFull, say, to play a full queue or completion
// queue. ep is the connection's Endpoint, as given to Dial or
// LinkRequest.Accept; recv tells a receive post from a send post, and n is
// the number of work requests. It must not block for long and must not call
// into the queue pair.
type PostFilter interface {
	FilterPost(ep *Endpoint, recv bool, n int) error
}

// RegionInfo describes a registered region as it may be published to
// peers: enough to check a one-sided operation against a table the
// checker does not hold. Info returns it for an MR.
type RegionInfo struct {
	LKey, RKey mreg.Key
	Addr       uint64 // virtual address of the first byte
	Len        uint64
	Access     mreg.Access
}

// Info returns the region's description.
func (m *MR) Info() RegionInfo {
	return RegionInfo{LKey: m.LKey(), RKey: m.RKey(), Addr: m.Addr(), Len: uint64(m.Len()), Access: m.Access()}
}

// Check applies to a described region the rule mreg.Table.Lookup applies
// to a live one, in the same order, for a provider that checks a remote
// operation on the initiator's side against a peer's published
// registrations: key names the region (remote access, that is access with
// mreg.RemoteRead or mreg.RemoteWrite, needs the rkey, local access the
// lkey) or mreg.ErrInvalidKey; [addr, addr+n) lies inside it, without
// wrap-around, or mreg.ErrBounds; the region grants access, or
// mreg.ErrAccess. Unknown access bits are mreg.ErrInvalid. Whether the
// registration is still live is the publisher's business: it withdraws a
// region once MemoryDeregistered is called.
func (ri RegionInfo) Check(key mreg.Key, addr, n uint64, access mreg.Access) error {
	const known = mreg.LocalWrite | mreg.RemoteRead | mreg.RemoteWrite
	if access&^known != 0 {
		return fmt.Errorf("%w: unknown access bits %#x", mreg.ErrInvalid, uint32(access&^known))
	}
	if key == 0 || (key != ri.LKey && key != ri.RKey) {
		return mreg.ErrInvalidKey
	}
	if addr < ri.Addr || addr-ri.Addr > ri.Len || n > ri.Len-(addr-ri.Addr) {
		return mreg.ErrBounds
	}
	remote := access&(mreg.RemoteRead|mreg.RemoteWrite) != 0
	if remote != (key == ri.RKey) || access&^ri.Access != 0 {
		return mreg.ErrAccess
	}
	return nil
}

// AcceptNext is the Accept of a provider's listener whose connection
// requests wait in backlog until Accept takes them, and which closes
// closed when it stops: the next request, or ErrClosed once closed is
// closed (even with requests still queued: Close rejects those), or
// ctx.Err(). The errors are bare: the provider names itself and the
// address. backlog is never closed.
func AcceptNext[R LinkRequest](ctx context.Context, backlog <-chan R, closed <-chan struct{}) (LinkRequest, error) {
	select {
	case <-closed:
		return nil, ErrClosed
	default:
	}
	select {
	case r := <-backlog:
		return r, nil
	case <-closed:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
