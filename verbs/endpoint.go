package verbs

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/exsgo/exs/mreg"
)

// Endpoint is a queue pair's end of one connection, as a provider sees it:
// the provider hands arriving messages to Deliver, reports the outcome of
// messages it carried asynchronously with Complete, and reports the
// connection's end with Terminated. Each connection gets a new Endpoint;
// once the connection is over, every method does nothing (Deliver returns
// ErrClosed), so a late call from a provider is harmless.
//
// Endpoint is safe for concurrent use, with one rule: Deliver calls for
// one Endpoint must be made one at a time, in the order the peer posted
// the work requests, as they arrive on a reliable connection. The zero
// Endpoint is not usable; this package makes them.
type Endpoint struct {
	qp   *QP
	link Link // set once, before the queue pair becomes ReadyToSend

	mu       sync.Mutex
	dead     bool          // the connection is over
	termDone atomic.Bool   // link.Terminate has returned (or there was no link)
	termed   chan struct{} // closed when termDone becomes true in terminate
	byPeer   atomic.Bool   // the peer (or the transport) ended the connection: Terminated
}

func newEndpoint(qp *QP) *Endpoint { return &Endpoint{qp: qp, termed: make(chan struct{})} }

// QPNum returns the number of the endpoint's queue pair.
func (e *Endpoint) QPNum() uint32 { return e.qp.num }

// PD returns the protection domain of the endpoint's queue pair: the
// registrations a provider that checks one-sided operations on the
// initiator's side (RegistrationObserver) publishes for this connection.
func (e *Endpoint) PD() *PD { return e.qp.pd }

// RNR returns the receiver-not-ready policy of the endpoint's queue pair,
// for providers that must apply it at the target (see Link.RecvPosted).
func (e *Endpoint) RNR() RNRPolicy { return e.qp.cfg.RNR }

// RelaxedWritePlacement reports whether the endpoint's queue pair lets the
// provider place its RDMA WRITEs ahead of the messages before them that
// consume a RECV (QPConfig.RelaxedWritePlacement). A provider may ignore
// it.
func (e *Endpoint) RelaxedWritePlacement() bool { return e.qp.cfg.RelaxedWritePlacement }

// BusyPoll reports whether the endpoint's queue pair asks that the
// provider's receive work never sleep (QPConfig.BusyPoll). A provider may
// ignore it.
func (e *Endpoint) BusyPoll() bool { return e.qp.cfg.BusyPoll }

// current reports whether e is still its queue pair's connection.
func (e *Endpoint) current() bool { return e.qp.ep.Load() == e }

// Deliver places a message that arrived from the peer, applying the rules
// every provider shares, and returns its outcome for the initiator:
//
//   - OpWrite, OpWriteWithImm: the range (m.RKey, m.RAddr, m.Len) is
//     checked against the protection domain's table (mreg.Table.Lookup:
//     live rkey, bounds without wrap-around, mreg.RemoteWrite) before a
//     byte is placed; then m.Len bytes are read from m.Payload into place.
//     OpWriteWithImm then consumes the next RECV, which completes with
//     m.Imm and byte count m.Len; with no RECV posted nothing is placed and
//     Deliver returns ErrNoRecv.
//   - OpSend, OpSendWithImm: consume the next RECV (ErrNoRecv if none),
//     check its scatter list (ErrRemoteOperation), check that m.Len fits
//     (ErrTooLong; the RECV completes with StatusLocalLengthError), read
//     the payload into it, complete it. A provider that learns a SEND's
//     length only at its end (iWARP's DDP, whose segments carry no total)
//     sets m.Len to -1: Deliver then reads Payload until io.EOF, and a
//     payload longer than the RECV fails with ErrTooLong once the RECV is
//     full (the bytes that fit are placed).
//   - OpRead: the range is checked with mreg.RemoteRead, then its m.Len
//     bytes are written to m.Sink.
//
// A failed check returns the check's error (mreg.ErrInvalidKey,
// mreg.ErrBounds, mreg.ErrAccess) without touching memory, and moves the
// queue pair to the Error state: it calls its Link's Terminate, which
// must make the peer fail too. Every error but ErrNoRecv does the same.
// A Payload (or Sink) error that matches ErrDisconnected says the
// connection ended in the middle of the message (the peer terminated, or
// its stream ended, before the rest came): the queue pair then ends as by
// the peer's disconnect (its cause matches ErrDisconnected, ECONNRESET,
// rather than ErrTerminated), and a RECV the message had begun to fill
// completes with StatusFlushed, never with part of the message. A queue
// pair that is not connected returns ErrClosed. Deliver does not allocate
// when it succeeds.
//
// Deliver reads the payload as it places it. While it fills a RECV (SEND,
// SEND_WITH_IMM) it holds the queue pair's receive-queue lock, so a
// provider should hand it a SEND whose payload is at hand (buffered, or
// in the initiator's memory) rather than one still crossing a slow
// network; the payload of an RDMA WRITE or READ response is read without
// that lock.
func (e *Endpoint) Deliver(m *Message) error {
	qp := e.qp
	rq := &qp.rq
	rq.mu.Lock()
	if !e.current() {
		rq.mu.Unlock()
		return ErrClosed
	}
	switch qp.State() {
	case StateReadyToReceive, StateReadyToSend:
	default:
		rq.mu.Unlock()
		return ErrClosed
	}
	var err, cause error
	if m.Op == OpWrite || m.Op == OpRead {
		// One-sided: check under the lock, copy without it.
		var r *mreg.Region
		var b []byte
		if r, b, err = qp.checkOneSided(m); err == nil {
			rq.mu.Unlock()
			err = qp.copyOneSided(m, b)
			r.Release()
			if err == nil {
				return nil
			}
			rq.mu.Lock()
		}
		cause = incomingCause(m.Op, err)
	} else {
		err, cause = qp.deliverLocked(m)
	}
	failed := false
	if cause != nil {
		if errors.Is(cause, ErrDisconnected) {
			e.byPeer.Store(true)
		}
		failed = qp.enterError(cause)
		qp.flushRecvLocked()
	}
	rq.mu.Unlock()
	if failed {
		qp.afterError(e, cause)
	}
	return err
}

// checkOneSided checks the target range of an incoming one-sided
// operation against the table, taking a reference on success.
func (qp *QP) checkOneSided(m *Message) (*mreg.Region, []byte, error) {
	access := mreg.RemoteWrite
	if m.Op == OpRead {
		access = mreg.RemoteRead
	}
	return qp.pd.table.Lookup(m.RKey, m.RAddr, uint64(m.Len), access)
}

// copyOneSided moves the data of a checked RDMA WRITE or READ.
func (qp *QP) copyOneSided(m *Message, b []byte) error {
	if m.Op == OpWrite {
		return readFull(m, b)
	}
	if m.Sink == nil {
		return fmt.Errorf("%w: read without a sink", ErrInvalid)
	}
	_, err := m.Sink.Write(b)
	return err
}

// Complete reports the outcome of a message that Link.Transmit accepted
// with done == false: nil for success, or the error the target's Deliver
// returned (or that describes a transport failure). Completions may be
// reported in any order; this package completes work requests in the
// order they were posted. A message must be completed at most once;
// completing one the queue pair has since flushed does nothing. Complete
// does not block on the provider.
func (e *Endpoint) Complete(m *Message, err error) {
	w := m.w
	if w == nil {
		return
	}
	qp := e.qp
	sq := &qp.sq
	sq.mu.Lock()
	if w.ep != e || w.phase != phaseInflight {
		sq.mu.Unlock()
		return
	}
	cause := qp.settleLocked(w, err)
	if cause == nil {
		// Its completion goes to the CQ now, not when the goroutine
		// running the send queue (another's, perhaps, handing a work
		// request to the provider meanwhile) gets to it: the flushes of
		// a disconnect the provider reports next must not overtake it
		// in the CQ, where an application takes the first flush for
		// the end and a send whose target had it for a failure.
		qp.completeDoneLocked()
	}
	sq.mu.Unlock()
	if cause != nil {
		qp.failFrom(e, cause)
	}
	qp.kickSend()
}

// Retry makes the queue pair retransmit a SEND (or RDMA WRITE with
// immediate data) held back by ErrNoRecv under RNRWait. A provider calls
// it when the peer's Link.RecvPosted says a RECV is there. A Retry with
// nothing held does nothing.
func (e *Endpoint) Retry() {
	if !e.current() {
		return
	}
	e.qp.sq.unstall.Store(true)
	e.qp.kickSend()
}

// Terminated tells the queue pair that the connection is over: the peer
// disconnected (cause nil or ErrDisconnected), terminated it because of an
// error, or the transport failed. The queue pair moves to the Error state
// and flushes its work requests, including those the provider still holds;
// it calls Link.Terminate, which by then has nothing left to tell the peer.
//
// If the peer terminated because it refused one of this queue pair's
// messages (the target's Deliver failed), the provider must first report
// that message's outcome with Complete (or as Transmit's result), so that
// its work request completes with the matching status
// (StatusRemoteAccessError, ...) rather than StatusFlushed.
func (e *Endpoint) Terminated(cause error) {
	if cause == nil {
		cause = ErrDisconnected
	}
	cause = fmt.Errorf("by peer: %w", cause)
	// Checked and acted on under epMu: an endpoint that stopped being
	// current between the two (the queue pair was reset and connected
	// again) would otherwise fail the new connection with its cause.
	qp := e.qp
	qp.epMu.Lock()
	if !e.current() {
		qp.epMu.Unlock()
		return
	}
	e.byPeer.Store(true)
	entered := qp.enterError(cause)
	qp.epMu.Unlock()
	if entered {
		qp.afterError(e, cause)
	}
}

// terminate ends the connection from this side, once: it marks e dead and
// calls the link's Terminate.
func (e *Endpoint) terminate(cause error) {
	e.mu.Lock()
	if e.dead {
		e.mu.Unlock()
		return
	}
	e.dead = true
	l := e.link
	e.mu.Unlock()
	if l != nil {
		l.Terminate(cause)
	}
	e.termDone.Store(true)
	close(e.termed)
}

// setLink records the link of an established connection. If the
// connection was terminated meanwhile it terminates the link too and
// returns false.
func (e *Endpoint) setLink(l Link, cause func() error) bool {
	e.mu.Lock()
	if e.dead {
		e.mu.Unlock()
		l.Terminate(cause())
		return false
	}
	e.link = l
	e.mu.Unlock()
	return true
}

// getLink returns the link, or nil while the connection is being set up.
func (e *Endpoint) getLink() Link {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead {
		return nil
	}
	return e.link
}
