package exs

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/exsgo/exs/dynproto"
	"github.com/exsgo/exs/verbs"
)

// Flags modify a send or recv.
type Flags uint8

const (
	// MsgWaitAll makes a recv on a stream socket complete only when its
	// buffer is full (or the stream has ended), as MSG_WAITALL does. A
	// seqpacket recv takes one whole message anyway.
	MsgWaitAll Flags = 1 << iota
)

// Stats counts what a socket has done. The embedded dynproto.Stats are the
// protocol engine's counters: bytes and transfers sent directly and
// indirectly, ADVERTs sent, used and discarded, phase switches, credit and
// frame stalls, bytes copied out of the stream buffer, ACKs.
type Stats struct {
	dynproto.Stats
	// Sends and Recvs count the operations completed, with or without
	// error.
	Sends, Recvs uint64
	// BytesSent and BytesReceived count the bytes of the sends and recvs
	// that completed successfully.
	BytesSent, BytesReceived uint64
	// Wakeups counts the times the progress goroutine blocked and was
	// woken.
	Wakeups uint64
}

type sockState uint8

const (
	sockNew sockState = iota
	sockBound
	sockListening
	sockConnecting
	sockConnected
	sockFailed // the connect failed, or the listener broke
	sockClosed
)

// Socket is an endpoint of the Extended Sockets API. Create one with
// Stack.Socket; a connected socket also comes from an accept.
//
// Operations are asynchronous: Accept, Connect, Send, Recv, Shutdown,
// Close and Cancel return at once, and each one they accept (returning nil)
// posts exactly one Event to the queue named in the call when it completes.
// A call that returns an error posted nothing. The buffer of a send or recv
// belongs to the library from the call until its event is posted: do not
// touch it before dequeuing the event.
//
// Operations of one kind complete in the order they were posted (sends in
// order, recvs in order). A Socket is safe for concurrent use; the order of
// operations posted concurrently is the order in which the calls take the
// socket. The zero Socket is not usable.
type Socket struct {
	st  *Stack
	typ SockType
	cfg config
	log *zap.Logger

	wake     chan struct{} // capacity 1: wakes the sleeping goroutine
	sleeping atomic.Bool   // the goroutine is (about to be) blocked
	ncmd     atomic.Int32  // commands queued (and close requests)

	mu        sync.Mutex
	state     sockState
	addr      string
	dev       *device
	running   bool // a goroutine serves the socket
	closing   bool
	closingA  atomic.Bool // closing, readable without mu
	peerGone  atomic.Bool // the peer ended the connection (tests wait on it)
	closeQ    *Queue
	closeUser any
	cancelReq bool               // a cancel waits to be handled
	interrupt context.CancelFunc // interrupts a blocking connect or accept
	connCtx   context.Context    // bounds the connect (ConnectContext)
	peer      verbs.Peer         // the connection's ends, once it is up
	backlog   int                // connection requests that may wait for an accept
	ops       []op
	free      []int32
	cmds      []int32 // operations posted, not yet taken by the goroutine
	nsend     int
	nrecv     int
	nacc      int
	nctl      int
	slots     []slotInfo // what CancelOp may read of each slot, under mu
	serial    uint64

	// Owned by the goroutine serving the socket.
	done   []completion
	doneEv []Event // the events of done, in the same order
	gstats Stats

	statsMu sync.Mutex
	stats   Stats
}

// Socket creates an unconnected socket of type typ. Options set the
// socket's protocol mode, stream buffer, frame buffers, outstanding limits,
// wait mode and logger; the stack's are the defaults.
func (st *Stack) Socket(typ SockType, opts ...SocketOption) (*Socket, error) {
	if typ < SockStream || typ > SockSeqPacket {
		return nil, opErr("socket", "", fmt.Errorf("%w: socket type %v", ErrInvalid, typ))
	}
	cfg := st.cfg
	if err := cfg.applySocketOptions(opts); err != nil {
		return nil, opErr("socket", "", err)
	}
	s := newSocket(st, typ, cfg)
	if !st.addSocket(s) {
		return nil, opErr("socket", "", ErrClosed)
	}
	return s, nil
}

func newSocket(st *Stack, typ SockType, cfg config) *Socket {
	n := cfg.maxSends + cfg.maxRecvs + ctlSlots
	s := &Socket{
		st:    st,
		typ:   typ,
		cfg:   cfg,
		log:   cfg.logger,
		wake:  make(chan struct{}, 1),
		ops:   make([]op, n),
		slots: make([]slotInfo, n),
		free:  make([]int32, n),
		cmds:  make([]int32, 0, n),
	}
	for i := range s.free {
		s.free[i] = int32(n - 1 - i)
	}
	return s
}

// Type returns the socket's type.
func (s *Socket) Type() SockType { return s.typ }

// Mode returns the socket's protocol mode.
func (s *Socket) Mode() Mode { return s.cfg.mode }

// Addr returns the socket's address: the address it is bound to or
// listens on (once it listens, the listener's: "tcp:HOST:0" becomes the
// port the system gave), the address it connected to, or the listening
// address it was accepted on; "" for a new socket.
func (s *Socket) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Cred is a peer process's identity as the kernel reported it: pid, user
// and group ids.
type Cred = verbs.Cred

// LocalAddr returns the address of this end of a connection, as
// net.Conn's LocalAddr does: the listening address for an accepted socket,
// and for a connecting one the name its provider gave it ("inproc:@N", or
// "shm:@PID" with its process's pid: neither can be connected to). It is
// "" until the connection is up.
func (s *Socket) LocalAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peer.LocalAddr
}

// RemoteAddr returns the address of the peer end, as net.Conn's
// RemoteAddr does: the address connected to, or for an accepted socket
// the name of the connecting end (see LocalAddr). It is "" until the
// connection is up.
func (s *Socket) RemoteAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peer.RemoteAddr
}

// PeerCred returns the credentials of the peer's process, as the kernel
// reported them when it connected (the same-host provider reads them from
// its Unix socket, SO_PEERCRED), and false where the provider does not
// know them (the in-process provider: the peer is this process).
func (s *Socket) PeerCred() (Cred, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.peer.Cred == nil {
		return Cred{}, false
	}
	return *s.peer.Cred, true
}

// Stats returns the socket's counters. It may be called at any time, from
// any goroutine; the counters are updated by the socket's progress
// goroutine after each round of work.
func (s *Socket) Stats() Stats {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	return s.stats
}

// Send posts a send of buf. buf lies inside the memory handle mh, which
// must allow AccessRead, or mh is nil: the library then registers buf for
// this send alone, which costs a registration and a deregistration (some
// microseconds and an allocation) per send. flags must be 0. On a stream
// socket buf must not be empty; on a seqpacket socket an empty buf sends an
// empty message.
//
// The send completes with an EventSend once every byte has been written
// to the peer (into its posted recv buffer or its stream buffer): N is
// len(buf). It fails with an error matching EPIPE after Shutdown, EMSGSIZE
// for a message longer than the peer's recv (seqpacket), ECONNRESET or
// ECONNABORTED if the connection breaks, ECANCELED if canceled. A send
// that fails reports in N the bytes of it the peer got (exactly after a
// cancel, see CancelOp; at least those when the connection broke). buf
// must not be modified until the event is posted.
func (s *Socket) Send(q *Queue, buf []byte, mh *MHandle, flags Flags, user any) error {
	return s.postData(opSend, q, buf, mh, flags, user)
}

// Recv posts a recv into buf, which must not be empty and lies inside the
// memory handle mh, which must allow AccessWrite, or mh is nil (the library
// then registers buf for this recv alone, at a cost, see Send). flags may
// hold MsgWaitAll.
//
// The recv completes with an EventRecv: on a stream socket N is 1 to
// len(buf) bytes (len(buf) with MsgWaitAll, unless the stream ends), and 0
// with Event.EOF set at the end of the stream (the peer shut down and every
// byte before was received); on a seqpacket socket N is the length of the
// message (0 for an empty message, EOF then tells the end of the stream
// apart), and the recv fails with an error matching EMSGSIZE if the message
// was longer than buf. After the peer closed without shutting down, recvs
// get what arrived, then ECONNRESET. buf must not be read or written until
// the event is posted.
func (s *Socket) Recv(q *Queue, buf []byte, mh *MHandle, flags Flags, user any) error {
	return s.postData(opRecv, q, buf, mh, flags, user)
}

func (s *Socket) postData(kind opKind, q *Queue, buf []byte, mh *MHandle, flags Flags, user any) error {
	name := kind.String()
	if err := s.checkQueue(q); err != nil {
		return opErr(name, "", err)
	}
	need := AccessRead
	if kind == opRecv {
		need = AccessWrite
	}
	var err error
	switch {
	case kind == opSend && flags != 0:
		err = fmt.Errorf("%w: send flags %#x", ErrInvalid, uint8(flags))
	case kind == opRecv && flags&^MsgWaitAll != 0:
		err = fmt.Errorf("%w: recv flags %#x", ErrInvalid, uint8(flags))
	case len(buf) == 0 && (kind == opRecv || s.typ == SockStream):
		err = fmt.Errorf("%w: empty buffer", ErrInvalid)
	case len(buf) > MaxTransfer:
		err = fmt.Errorf("%w: buffer of %d bytes, at most %d", ErrInvalid, len(buf), MaxTransfer)
	case mh != nil:
		err = mh.check(s.st, buf, need)
	}
	if err != nil {
		return opErr(name, "", err)
	}
	return s.postOp(name, op{kind: kind, waitAll: flags&MsgWaitAll != 0, q: q, user: user, buf: buf, addr: addrOf(buf), mh: mh}, need)
}

// postOp posts the send or recv o, whose arguments are checked: it takes
// its memory (the handles', or a registration of its own) and its room in
// the queue, and queues it for the goroutine.
func (s *Socket) postOp(name string, o op, need Access) error {
	kind, mh, buf := o.kind, o.mh, o.buf
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case sockConnecting, sockConnected:
	case sockClosed:
		return opErr(name, s.addr, ErrClosed)
	default:
		return opErr(name, s.addr, ErrNotConnected)
	}
	if kind == opSend && s.nsend >= s.cfg.maxSends || kind == opRecv && s.nrecv >= s.cfg.maxRecvs {
		return opErr(name, s.addr, errTooMany)
	}
	if o.vec != nil {
		if err := s.takeVecMem(&o, need); err != nil {
			return opErr(name, s.addr, err)
		}
	} else if mh != nil {
		if err := mh.acquire(); err != nil {
			return opErr(name, s.addr, err)
		}
		o.mr = mh.mrs[s.dev.idx]
	} else if len(buf) > 0 && (kind == opSend || s.cfg.mode != ModeIndirectOnly) {
		mr, err := s.dev.pd.RegisterMR(buf, need.verbs())
		if err != nil {
			return opErr(name, s.addr, err)
		}
		o.mr, o.tmp = mr, true
	}
	if err := s.reserveOp(&o); err != nil {
		o.releaseMem()
		return opErr(name, s.addr, err)
	}
	if kind == opSend {
		s.nsend++
	} else {
		s.nrecv++
	}
	s.pushLocked(o)
	return nil
}

// Shutdown posts a shutdown of the sending direction (SHUT_WR): the sends
// posted before it are still carried out, then the peer's recvs see the end
// of the stream. It completes with an EventShutdown once every earlier send
// has completed and the end of the stream has reached the peer, so that a
// Close after it cannot overtake it, whatever the provider: the peer then
// sees every byte and the end of the stream, not ECONNRESET. It fails with
// ECONNRESET if the connection goes first. Sends posted afterwards fail
// with an error matching EPIPE. Recvs are not affected.
func (s *Socket) Shutdown(q *Queue, user any) error {
	if err := s.checkQueue(q); err != nil {
		return opErr("shutdown", "", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case sockConnecting, sockConnected:
	case sockClosed:
		return opErr("shutdown", s.addr, ErrClosed)
	default:
		return opErr("shutdown", s.addr, ErrNotConnected)
	}
	if s.nctl >= ctlSlots {
		return opErr("shutdown", s.addr, errTooMany)
	}
	if err := q.reserve(); err != nil {
		return opErr("shutdown", s.addr, err)
	}
	s.nctl++
	s.pushLocked(op{kind: opShutdown, q: q, user: user})
	return nil
}

// Cancel posts a cancel of every operation outstanding on the socket:
// accepts, a connect, sends, recvs and shutdowns posted before it complete
// with an error matching ErrCanceled (syscall.ECANCELED), then the cancel
// completes with an EventCancel whose N is the number of operations
// canceled. A byte stream cannot skip bytes, so canceling a connection's
// operations ends the connection: the peer sees it reset (ECONNRESET), and
// operations posted on the socket afterwards fail with ECANCELED; close the
// socket. Canceling a connect leaves the socket unusable but for Close. A
// listening socket keeps listening.
func (s *Socket) Cancel(q *Queue, user any) error {
	if err := s.checkQueue(q); err != nil {
		return opErr("cancel", "", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case sockListening, sockConnecting, sockConnected:
	case sockClosed:
		return opErr("cancel", s.addr, ErrClosed)
	default:
		// Nothing can be outstanding: the cancel completes at once, under
		// the lock, so that a Close cannot post its event first.
		if err := q.reserve(); err != nil {
			return opErr("cancel", s.addr, err)
		}
		q.post(Event{Type: EventCancel, Socket: s, User: user})
		return nil
	}
	if s.nctl >= ctlSlots {
		return opErr("cancel", s.addr, errTooMany)
	}
	if err := q.reserve(); err != nil {
		return opErr("cancel", s.addr, err)
	}
	s.nctl++
	s.cancelReq = true
	if s.interrupt != nil {
		s.interrupt()
	}
	s.pushLocked(op{kind: opCancel, q: q, user: user})
	return nil
}

// Close posts a close of the socket. Every operation still outstanding
// completes with an error matching ErrCanceled and ErrClosed, and what the
// socket received and no recv has taken is discarded; a listening socket
// stops listening. The peer loses nothing whose send completed here: its
// recvs still get those bytes, then the end of the stream if this
// socket's Shutdown completed before the Close, or ECONNRESET if not (the
// close rule, in the package documentation). Then the socket's resources
// are released, its goroutine ends, and the close completes with an
// EventClose, the last event the socket posts. For an orderly end, shut
// down and wait for the peer's end of stream first. Close does not block,
// and never waits for the peer. Any other call on the socket then fails
// with ErrClosed, and so does a second Close.
func (s *Socket) Close(q *Queue, user any) error {
	if err := s.checkQueue(q); err != nil {
		return opErr("close", "", err)
	}
	s.mu.Lock()
	if s.state == sockClosed || s.closing {
		s.mu.Unlock()
		return opErr("close", s.addr, ErrClosed)
	}
	if err := q.reserve(); err != nil {
		s.mu.Unlock()
		return opErr("close", s.addr, err)
	}
	s.closing, s.state = true, sockClosed
	s.closingA.Store(true)
	if s.running {
		s.closeQ, s.closeUser = q, user
		s.ncmd.Add(1)
		if s.interrupt != nil {
			s.interrupt()
		}
		s.mu.Unlock()
		s.kick()
		return nil
	}
	s.mu.Unlock()
	q.post(Event{Type: EventClose, Socket: s, User: user})
	s.st.removeSocket(s)
	return nil
}

// closeInternal closes the socket for Stack.Close: like Close, without an
// event.
func (s *Socket) closeInternal() {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return
	}
	s.closing, s.state = true, sockClosed
	s.closingA.Store(true)
	if s.running {
		s.ncmd.Add(1)
		if s.interrupt != nil {
			s.interrupt()
		}
	}
	s.mu.Unlock()
	s.kick()
}

// checkQueue checks that q may receive the socket's events.
func (s *Socket) checkQueue(q *Queue) error {
	switch {
	case q == nil:
		return fmt.Errorf("%w: nil queue", ErrInvalid)
	case q.st != s.st:
		return fmt.Errorf("%w: queue of another stack", ErrInvalid)
	}
	return nil
}

// pushLocked takes a slot for o and queues it for the goroutine. The
// caller has checked the limits and reserved the event.
func (s *Socket) pushLocked(o op) {
	idx := s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
	s.serial++
	o.serial = s.serial
	s.slots[idx] = slotInfo{kind: o.kind, user: o.user, serial: o.serial}
	s.ops[idx] = o
	s.cmds = append(s.cmds, idx)
	s.ncmd.Add(1)
	if s.sleeping.Load() {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// kick wakes the goroutine if it sleeps.
func (s *Socket) kick() {
	if s.sleeping.Load() {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// complete records the completion of operation idx; flushDone posts it.
// Called by the goroutine serving the socket.
func (s *Socket) complete(idx int32, n int, err error, accepted *Socket) {
	o := &s.ops[idx]
	ev := Event{Type: o.kind.event(), Socket: s, User: o.user, N: n, Accepted: accepted}
	if err != nil {
		ev.Err = &OpError{Op: o.kind.String(), Addr: s.addr, Err: err}
	}
	if o.msg {
		o.msgEvent(&ev)
	}
	switch o.kind {
	case opSend:
		s.gstats.Sends++
		if err == nil {
			s.gstats.BytesSent += uint64(n)
		}
	case opRecv:
		s.gstats.Recvs++
		if err == nil {
			s.gstats.BytesReceived += uint64(n)
		}
	}
	o.releaseMem()
	o.releaseTimeout()
	s.done = append(s.done, completion{idx: idx, kind: o.kind, q: o.q})
	s.doneEv = append(s.doneEv, ev)
	*o = op{}
}

// flushDone frees the slots of the completed operations, then posts their
// events, so that an application that dequeues an event may post again at
// once. The events of consecutive operations with the same queue are
// posted together.
func (s *Socket) flushDone() {
	if len(s.done) == 0 {
		return
	}
	s.mu.Lock()
	for i := range s.done {
		d := &s.done[i]
		s.free = append(s.free, d.idx)
		s.slots[d.idx] = slotInfo{}
		switch d.kind {
		case opSend:
			s.nsend--
		case opRecv:
			s.nrecv--
		case opAccept:
			s.nacc--
		default:
			s.nctl--
		}
	}
	s.mu.Unlock()
	for i := 0; i < len(s.done); {
		q := s.done[i].q
		j := i + 1
		for j < len(s.done) && s.done[j].q == q {
			j++
		}
		q.postBatch(s.doneEv[i:j])
		i = j
	}
	clear(s.done)
	clear(s.doneEv)
	s.done, s.doneEv = s.done[:0], s.doneEv[:0]
}

// takeCommands moves the queued operations into buf and reports whether
// the socket is being closed.
func (s *Socket) takeCommands(buf []int32) ([]int32, bool) {
	s.mu.Lock()
	buf, s.cmds = s.cmds, buf[:0]
	s.ncmd.Store(0)
	closing := s.closing
	s.mu.Unlock()
	return buf, closing
}

// publish makes the goroutine's counters visible to Stats.
func (s *Socket) publish(ps dynproto.Stats) {
	s.statsMu.Lock()
	s.stats = s.gstats
	s.stats.Stats = ps
	s.statsMu.Unlock()
}

// finish ends the goroutine serving the socket: operations still queued
// complete with err (a cancel with the count of operations canceled, from
// canceled on), and if the socket is being closed its close event is
// posted last. The socket counts as served until every event is posted,
// so that a Close meanwhile leaves its event to this goroutine; a socket
// that is not being closed takes no more operations (sockFailed).
func (s *Socket) finish(err error, canceled int) {
	for {
		s.mu.Lock()
		if !s.closing {
			s.state = sockFailed
		}
		cmds := s.cmds
		s.cmds = nil
		s.ncmd.Store(0)
		if len(cmds) == 0 {
			s.running = false
			closing, q, user := s.closing, s.closeQ, s.closeUser
			s.closeQ, s.closeUser = nil, nil
			s.mu.Unlock()
			if closing {
				if q != nil {
					q.post(Event{Type: EventClose, Socket: s, User: user})
				}
				s.st.removeSocket(s)
			}
			return
		}
		s.mu.Unlock()
		if h := testHookFinish.Load(); h != nil {
			(*h)(s)
		}
		for _, idx := range cmds {
			if k := s.ops[idx].kind; k == opCancel || k == opCancelOne {
				s.complete(idx, canceled, nil, nil)
				continue
			}
			s.complete(idx, 0, err, nil)
			canceled++
		}
		s.flushDone()
	}
}

// testHookFinish, if set, runs when the goroutine ending a socket has
// taken operations still queued and not yet completed them.
var testHookFinish atomic.Pointer[func(*Socket)]

// sleep blocks until a command or a close request arrives (for a
// goroutine with nothing else to wait for).
func (s *Socket) sleep() {
	s.sleeping.Store(true)
	if s.ncmd.Load() == 0 {
		<-s.wake
	}
	s.sleeping.Store(false)
}

// cancelErr is the error of operations canceled now: by Close or by
// Cancel.
func (s *Socket) cancelErrLocked() error {
	if s.closing {
		return errClosedCanceled
	}
	return ErrCanceled
}
