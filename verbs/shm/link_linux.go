package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// Request record layout (after the 8-byte header, whose bytes 5, 6 and 7
// hold the opcode, the payload mode and the number of iovecs):
//
//	8  id     uint32   the initiator's sequence number of the message
//	12 imm    uint32
//	16 rkey   uint32
//	24 raddr  uint64
//	32 len    uint64   bytes sent, written or read
//	40 body   inline bytes (modeInline) or iovecs of 16 bytes (modeIov)
const reqHdr = 40

// Payload modes of a request.
const (
	modeInline = 1 + iota // bytes in the record and in recFrag records after it
	modeIov               // the initiator's memory, for cross-memory attach
	modeRData             // READ: the target sends the bytes back in recRData records
)

// Response records: recAck and recDone are 16 bytes (id, code); recRData
// has id at 8 and bytes from 16; recTerm has the kind at 8 and a text
// from 16.
const respHdr = 16

// Outcome codes carried by recDone, so that errors.Is keeps working on
// the initiator's side.
const (
	codeOther = 1 + iota
	codeInvalidKey
	codeBounds
	codeAccess
	codeNoRecv
	codeTooLong
	codeRemoteOp
	codeInvalid
	codeClosed
)

var codeErrs = [...]error{
	codeInvalidKey: mreg.ErrInvalidKey,
	codeBounds:     mreg.ErrBounds,
	codeAccess:     mreg.ErrAccess,
	codeNoRecv:     verbs.ErrNoRecv,
	codeTooLong:    verbs.ErrTooLong,
	codeRemoteOp:   verbs.ErrRemoteOperation,
	codeInvalid:    verbs.ErrInvalid,
	codeClosed:     verbs.ErrClosed,
}

func codeOf(err error) uint32 {
	for c, e := range codeErrs {
		if e != nil && errors.Is(err, e) {
			return uint32(c)
		}
	}
	return codeOther
}

// errOf returns the error the initiator reports for an outcome code.
func errOf(code uint32) error {
	if code < uint32(len(codeErrs)) && codeErrs[code] != nil {
		return fmt.Errorf("shm: refused by peer: %w", codeErrs[code])
	}
	return errors.New("shm: the peer failed the operation")
}

// Termination kinds carried by recTerm.
const (
	termDisconnect = 1 + iota
	termError
)

// errProtocol reports a peer that broke the rules of the shared rings or
// of the handshake.
var errProtocol = errors.New("shm: protocol violation by peer")

// How long one sleep of a receiver on its futex lasts at most: a safety
// net, wake-ups do not depend on it (the tests stretch it to minutes, so
// that a lost wake-up shows as a hang).
var sleepCap = 100 * time.Millisecond

const (
	accessLimit = 2 * time.Second // longest wait for the peer's copies to end
	lingerLimit = time.Second     // longest wait to hand the peer our last records
)

// flight is a message in flight: transmitted through the ring, its outcome
// not yet back.
type flight struct {
	id uint32
	m  *verbs.Message
}

// flights is a FIFO of messages in flight; outcomes come back in order.
type flights struct {
	buf      []flight
	head     int
	n        int
	oneSided int // of which READs and WRITEs
}

func isOneSided(m *verbs.Message) bool { return m.Op == verbs.OpRead || m.Op == verbs.OpWrite }

func (f *flights) push(x flight) {
	if f.n == len(f.buf) {
		nb := make([]flight, max(16, 2*len(f.buf)))
		for i := range f.n {
			nb[i] = f.buf[(f.head+i)%len(f.buf)]
		}
		f.buf, f.head = nb, 0
	}
	f.buf[(f.head+f.n)%len(f.buf)] = x
	f.n++
	if isOneSided(x.m) {
		f.oneSided++
	}
}

func (f *flights) front() (flight, bool) {
	if f.n == 0 {
		return flight{}, false
	}
	return f.buf[f.head], true
}

func (f *flights) pop() {
	if isOneSided(f.buf[f.head].m) {
		f.oneSided--
	}
	f.buf[f.head] = flight{}
	f.head = (f.head + 1) % len(f.buf)
	f.n--
}

func (f *flights) clear() {
	clear(f.buf)
	f.head, f.n, f.oneSided = 0, 0, 0
}

// item is a record waiting for room in a ring.
type item struct {
	kind    byte // recReq, recAck, recDone, recRData, recTerm
	started bool
	id      uint32
	code    uint32         // recDone: outcome; recTerm: kind
	m       *verbs.Message // recReq
	mode    byte           // recReq
	off     int            // bytes of payload written
	data    []byte         // recRData bytes (owned), recTerm text
}

// items is a FIFO of records waiting for room.
type items struct {
	q    []item
	head int
}

func (s *items) empty() bool  { return s.head == len(s.q) }
func (s *items) push(it item) { s.q = append(s.q, it) }
func (s *items) front() *item { return &s.q[s.head] }
func (s *items) pop() {
	s.q[s.head] = item{}
	s.head++
	if s.head == len(s.q) {
		s.q, s.head = s.q[:0], 0
	}
}
func (s *items) reset() {
	clear(s.q)
	s.q, s.head = s.q[:0], 0
}

// link is one end of a connection: it owns the shared mapping, the Unix
// socket, and two goroutines (the receiver, which reads the peer's rings
// and hands messages to the local endpoint, and the watcher, which reads
// the socket to learn that the peer closed it or died). Both stop after
// Terminate or when the peer is gone.
type link struct {
	p       *Provider
	ep      *verbs.Endpoint
	pd      *verbs.PD
	side    int
	peerPID int
	addrs   verbs.Peer // the ends' addresses and the peer's credentials
	// pidChecks counts the pidfd watcher's looks at the peer process: after
	// the first that finds it running, the watcher waits in the runtime's
	// poller (tests wait for it).
	pidChecks atomic.Int32
	pidfd     int      // a pidfd of the peer process, or -1 (pidfd_linux.go)
	pidf      *os.File // pidfd, while watchPeerProcess's goroutine waits on it
	pidDone   chan struct{}
	cma       bool            // cross-memory attach works both ways
	cmaErr    string          // why not, if it does not
	peerRNR   verbs.RNRPolicy // the peer queue pair's policy, applied here
	relaxed   bool            // the queue pair's RelaxedWritePlacement
	conn      *net.UnixConn
	m         []byte
	me        *sideBlock
	peer      *sideBlock
	mine      table // published by this side
	theirs    table // published by the peer
	reqOut    producer
	respOut   producer
	reqIn     consumer
	respIn    consumer
	maxReq    int // largest request record
	maxResp   int // largest response record

	txMu     sync.Mutex
	term     bool // Terminate was called
	dead     bool // the mapping is being released: touch nothing
	termPend bool // a TERM waits for the outcome of the message being delivered
	termKind uint32
	termText string
	pendReq  items
	pendResp items
	inflight flights
	nextID   uint32
	tiov     iovecs // the fast path's (Transmit runs one at a time)

	// peerArenas are the peer's shared-allocator arenas mapped here, by
	// id; guarded by txMu, so that a copy into one (made with txMu held)
	// never meets its unmapping.
	peerArenas     map[uint32][]byte
	peerArenaBytes uint64 // their total size
	// started, arenasSent (the ids of this side's arenas handed to the
	// peer) and arenaQ (arena messages not yet written to the socket)
	// are guarded by p.mu.
	started    bool
	arenasSent map[uint32]struct{}
	arenaQ     []arenaMsg
	// sendMu serializes the writes of arena messages, made without p.mu;
	// sendFailed, guarded by it, says one failed and no more are written.
	sendMu     sync.Mutex
	sendFailed bool

	hasPend    atomic.Bool // pendReq or pendResp is not empty
	delivering atomic.Bool // the receiver is inside Endpoint.Deliver

	stop       atomic.Bool
	peerGone   atomic.Bool // the socket closed: the peer process ended or closed
	recvPosted atomic.Bool
	refs       atomic.Int32 // users of the mapping; it is unmapped at zero
	done       chan struct{}
	watchDone  chan struct{}

	// Receive-work state, owned by the receiver goroutine (run).
	tm         verbs.Message
	rd         payloadReader
	sk         sinkWriter
	held       bool // a request waits for a RECV (RNRWait at the peer)
	reqStopped bool // no more requests are taken (the connection failed)
	peerTerm   bool // the peer's TERM arrived
	// The acknowledgement of the requests delivered, to send: set by the
	// receive work and flushed by it or by Terminate, under txMu.
	ackID   uint32
	ackPend bool
	riov    iovecs
	acked   []*verbs.Message // completeUpTo's batch

	st counters
}

// counters are a link's statistics.
type counters struct {
	direct   atomic.Uint64 // one-sided operations done by this side with process_vm_*
	ringMsgs atomic.Uint64 // messages sent through the request ring
	inline   atomic.Uint64 // of which with their bytes inline
	pulls    atomic.Uint64 // messages whose bytes this side moved as target with process_vm_*
	wakes    atomic.Uint64 // futex sleeps of the receiver
	shared   atomic.Uint64 // one-sided operations done by this side with a plain copy (shared allocator)
}

// Compile-time checks.
var (
	_ verbs.Link         = (*link)(nil)
	_ verbs.PeerReporter = (*link)(nil)
)

// newLink builds a link over a mapping; start runs its goroutines.
func newLink(p *Provider, side int, m []byte, lo layout, conn *net.UnixConn) *link {
	l := &link{p: p, side: side, m: m, conn: conn, done: make(chan struct{}), watchDone: make(chan struct{}),
		pidfd: -1, pidDone: make(chan struct{}),
		peerArenas: make(map[uint32][]byte), arenasSent: make(map[uint32]struct{})}
	l.refs.Store(1)
	l.me, l.peer = sideAt(m, side), sideAt(m, 1-side)
	l.mine, l.theirs = tableAt(m, lo.table[side]), tableAt(m, lo.table[1-side])
	l.reqOut.r = ringAt(m, lo.req[side], lo.reqSize)
	l.respOut.r = ringAt(m, lo.resp[side], lo.respSize)
	l.reqIn.r = ringAt(m, lo.req[1-side], lo.reqSize)
	l.respIn.r = ringAt(m, lo.resp[1-side], lo.respSize)
	l.maxReq, l.maxResp = maxRecord(lo.reqSize), maxRecord(lo.respSize)
	if k := raceKeyFor((*header)(unsafe.Pointer(&m[0])).nonce); k != nil {
		l.reqOut.r.race, l.respOut.r.race, l.reqIn.r.race, l.respIn.r.race = k, k, k, k
	}
	l.rd.l, l.sk.l = l, l
	return l
}

// setEndpoint records the queue pair's end of the connection and what the
// link takes from its configuration.
func (l *link) setEndpoint(ep *verbs.Endpoint) {
	l.ep, l.pd, l.relaxed = ep, ep.PD(), ep.RelaxedWritePlacement()
}

// Peer returns the ends' addresses and the peer process's credentials,
// from the kernel (SO_PEERCRED). A connecting end has no address of its
// own: it is named "shm:@PID", its process's pid.
func (l *link) Peer() verbs.Peer { return l.addrs }

// start runs the receiver and the watchers.
func (l *link) start() {
	l.p.sendArenas(l)
	l.watchPeerProcess()
	go l.watch()
	go l.run()
}

// release drops a reference to the mapping, unmapping it at zero.
func (l *link) release() {
	if l.refs.Add(-1) == 0 {
		unix.Munmap(l.m)
	}
}

// acquire takes a reference to the mapping if it is still there.
func (l *link) acquire() bool {
	for {
		n := l.refs.Load()
		if n <= 0 {
			return false
		}
		if l.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// ---- Initiator side ----

// Transmit carries m to the peer: a one-sided operation directly into (or
// out of) the peer's registered memory when nothing is in flight before it
// (with the queue pair's RelaxedWritePlacement, a WRITE also when only
// messages that consume a RECV are), otherwise a record on the request
// ring.
//
// A relaxed WRITE places its bytes before the SENDs in flight are
// delivered; their delivery and completion stay first (the queue pair
// completes in order), and a WRITE that fails its checks goes through the
// ring, so that the target reports it in its turn.
func (l *link) Transmit(m *verbs.Message) (bool, error) {
	l.txMu.Lock()
	if l.term || l.dead {
		l.txMu.Unlock()
		return true, verbs.ErrClosed
	}
	if l.pendReq.empty() && l.p.opts.directMin <= verbs.MaxMessage &&
		(l.inflight.n == 0 && (m.Op == verbs.OpRead || m.Op == verbs.OpWrite) ||
			l.relaxed && m.Op == verbs.OpWrite && l.inflight.oneSided == 0) {
		if done, err := l.direct(m, l.inflight.n == 0); done {
			l.txMu.Unlock()
			return true, err
		}
	}
	id := l.nextID
	l.nextID++
	l.inflight.push(flight{id: id, m: m})
	it := item{kind: recReq, m: m, id: id}
	if !l.pendReq.empty() || !l.writeReq(&it) {
		l.pendReq.push(it)
		l.stalledLocked()
	}
	l.peer.ring()
	l.txMu.Unlock()
	l.st.ringMsgs.Add(1)
	return false, nil
}

// direct runs a one-sided operation without the peer's CPU, if it can:
// the check of the peer's published registration, then a plain copy when
// the region lies in a shared-allocator arena mapped here, otherwise (for
// READs and WRITEs of at least directMin bytes, with cross-memory attach)
// one process_vm_writev (or readv). It reports false, having done nothing,
// when the operation is to go through the ring: no path applies, or only
// the plain copy did and the checks failed (the target then reports the
// violation, as for any message through the ring); so it does, with
// nothing done or the bytes to be written again, when alone is false
// (messages are in flight before it) and the operation fails. It is called
// with txMu held, so that Terminate waits for it and no arena is unmapped
// under it.
func (l *link) direct(m *verbs.Message, alone bool) (bool, error) {
	access, write := mreg.RemoteWrite, true
	if m.Op == verbs.OpRead {
		access, write = mreg.RemoteRead, false
	}
	cma := l.cma && (m.Op == verbs.OpRead || m.Len >= l.p.opts.directMin)
	if !cma && len(l.peerArenas) == 0 {
		return false, nil
	}
	l.peer.access.Add(1)
	defer l.peer.access.Add(-1)
	var err error
	if l.peer.closed.Load() != 0 {
		err = fmt.Errorf("shm: peer terminated: %w", verbs.ErrClosed)
	} else if e := &l.theirs[slotOf(m.RKey)]; e.state.Load() != entryLive {
		err = mreg.ErrInvalidKey
	} else {
		ri := verbs.RegionInfo{
			LKey: mreg.Key(e.lkey.Load()), RKey: mreg.Key(e.rkey.Load()),
			Addr: e.addr.Load(), Len: e.n.Load(), Access: mreg.Access(e.access.Load()),
		}
		err = ri.Check(m.RKey, m.RAddr, uint64(m.Len), access)
		if err == nil {
			if span, ok := l.arenaSpan(e, ri, m.RAddr, m.Len); ok {
				if write {
					for _, s := range m.Segments() {
						span = span[copy(span, s):]
					}
				} else {
					for _, s := range m.Segments() {
						span = span[copy(s, span):]
					}
				}
				l.st.shared.Add(1)
				return true, nil
			}
		}
	}
	if !cma || err != nil && !alone {
		return false, nil
	}
	if err != nil {
		return true, err
	}
	if m.Len == 0 {
		l.st.direct.Add(1)
		return true, nil
	}
	v := &l.tiov
	v.addLocal(m.Segments()...)
	v.addRemote(m.RAddr, m.Len)
	_, err = l.cmaTransfer(v, write, m.Len)
	v.reset()
	if err != nil {
		if !alone {
			return false, nil
		}
		return true, fmt.Errorf("shm: %v by cross-memory attach: %w", m.Op, err)
	}
	l.st.direct.Add(1)
	return true, nil
}

// stalledLocked records that records wait for room: the peer's consumer
// will ring this side's bell when it frees some. It tries once more after
// raising the flag, in case the consumer made room before it could see
// the flag.
func (l *link) stalledLocked() {
	l.hasPend.Store(true)
	l.me.wantSpace.Store(1)
	l.pumpLocked()
}

// modeOf chooses how a request's bytes travel.
func (l *link) modeOf(m *verbs.Message) byte {
	switch {
	case m.Op == verbs.OpRead && l.cma:
		return modeIov
	case m.Op == verbs.OpRead:
		return modeRData
	case l.cma && m.Len > l.p.opts.inlineMax:
		return modeIov
	}
	return modeInline
}

// writeReq writes as much of a request as fits, and reports whether all
// of it is written. Called with txMu held.
func (l *link) writeReq(it *item) bool {
	m := it.m
	if !it.started {
		it.mode = l.modeOf(m)
		segs := m.Segments()
		body := 0
		switch it.mode {
		case modeInline:
			body = min(m.Len, l.maxReq-reqHdr)
		case modeIov:
			body = 16 * len(segs)
		}
		b := l.reqOut.reserve(reqHdr + body)
		if b == nil {
			return false
		}
		putHdr(b, recReq)
		b[5], b[6], b[7] = byte(m.Op), it.mode, byte(len(segs))
		binary.LittleEndian.PutUint32(b[8:], it.id)
		binary.LittleEndian.PutUint32(b[12:], m.Imm)
		binary.LittleEndian.PutUint32(b[16:], uint32(m.RKey))
		binary.LittleEndian.PutUint32(b[20:], 0)
		binary.LittleEndian.PutUint64(b[24:], m.RAddr)
		binary.LittleEndian.PutUint64(b[32:], uint64(m.Len))
		switch it.mode {
		case modeInline:
			copySegs(b[reqHdr:], segs, 0)
			it.off = body
			l.st.inline.Add(1)
		case modeIov:
			p := b[reqHdr:]
			for i, s := range segs {
				var addr uint64
				if len(s) > 0 {
					addr = uint64(uintptrOf(s))
				}
				binary.LittleEndian.PutUint64(p[16*i:], addr)
				binary.LittleEndian.PutUint64(p[16*i+8:], uint64(len(s)))
			}
		}
		l.reqOut.commit(len(b))
		it.started = true
	}
	if it.mode != modeInline {
		return true
	}
	for it.off < m.Len {
		chunk := min(m.Len-it.off, l.maxReq-recHdr)
		room := l.reqOut.room() - recHdr
		if room < chunk && room < 4096 {
			return false
		}
		chunk = min(chunk, room)
		b := l.reqOut.reserve(recHdr + chunk)
		if b == nil {
			return false
		}
		putHdr(b, recFrag)
		copySegs(b[recHdr:], m.Segments(), it.off)
		it.off += chunk
		l.reqOut.commit(len(b))
	}
	return true
}

// writeResp writes a response record (or as much of recRData's bytes as
// fits) and reports whether it is complete. Called with txMu held.
func (l *link) writeResp(it *item) bool {
	switch it.kind {
	case recRData:
		for it.off < len(it.data) || !it.started {
			chunk := min(len(it.data)-it.off, l.maxResp-respHdr)
			room := l.respOut.room() - respHdr
			if room < chunk && room < 4096 {
				return false
			}
			chunk = min(chunk, room)
			b := l.respOut.reserve(respHdr + chunk)
			if b == nil {
				return false
			}
			putHdr(b, recRData)
			binary.LittleEndian.PutUint32(b[8:], it.id)
			binary.LittleEndian.PutUint32(b[12:], 0)
			placeCopy(b[respHdr:], it.data[it.off:it.off+chunk])
			it.off += chunk
			it.started = true
			l.respOut.commit(len(b))
		}
		return true
	case recTerm:
		text := it.data[:min(len(it.data), 256)]
		b := l.respOut.reserve(respHdr + len(text))
		if b == nil {
			return false
		}
		putHdr(b, recTerm)
		binary.LittleEndian.PutUint32(b[8:], it.code)
		binary.LittleEndian.PutUint32(b[12:], 0)
		copy(b[respHdr:], text)
		l.respOut.commit(len(b))
		return true
	}
	b := l.respOut.reserve(respHdr)
	if b == nil {
		return false
	}
	putHdr(b, it.kind)
	binary.LittleEndian.PutUint32(b[8:], it.id)
	binary.LittleEndian.PutUint32(b[12:], it.code)
	l.respOut.commit(respHdr)
	return true
}

// emitLocked sends a response record, or queues it behind those waiting.
func (l *link) emitLocked(it item) {
	if l.pendResp.empty() && l.writeResp(&it) {
		return
	}
	if it.kind == recRData {
		// The caller's bytes (a READ's source region) do not outlive
		// the call.
		d := make([]byte, len(it.data)-it.off)
		placeCopy(d, it.data[it.off:])
		it.data, it.off = d, 0
	}
	l.pendResp.push(it)
	l.stalledLocked()
}

// pumpLocked writes waiting records while there is room and reports
// whether it wrote any.
func (l *link) pumpLocked() bool {
	reqTail, respTail := l.reqOut.tail, l.respOut.tail
	for !l.pendResp.empty() {
		if !l.writeResp(l.pendResp.front()) {
			break
		}
		l.pendResp.pop()
	}
	for !l.pendReq.empty() {
		if !l.writeReq(l.pendReq.front()) {
			break
		}
		l.pendReq.pop()
	}
	progress := l.reqOut.tail != reqTail || l.respOut.tail != respTail
	if l.pendReq.empty() && l.pendResp.empty() {
		l.hasPend.Store(false)
		l.me.wantSpace.Store(0)
	}
	if progress {
		l.peer.ring()
	}
	return progress
}

// copySegs copies the bytes of segs from offset off into dst, as many as
// fit.
func copySegs(dst []byte, segs [][]byte, off int) {
	for _, s := range segs {
		if len(dst) == 0 {
			return
		}
		if off >= len(s) {
			off -= len(s)
			continue
		}
		n := copy(dst, s[off:])
		dst = dst[n:]
		off = 0
	}
}

// RecvPosted makes the receiver deliver again the request it holds for
// want of a RECV.
func (l *link) RecvPosted() {
	l.recvPosted.Store(true)
	l.txMu.Lock()
	if !l.dead {
		l.me.ringAlways()
	}
	l.txMu.Unlock()
}

// Terminate ends the connection: it tells the peer (a recTerm record,
// after the outcome of the message being delivered if that is what
// failed), forbids the peer to touch this side's memory and waits for
// its copies in progress to end, and stops the goroutines.
func (l *link) Terminate(cause error) {
	l.txMu.Lock()
	if l.term || l.dead {
		l.term = true
		l.txMu.Unlock()
		return
	}
	l.term = true
	l.refs.Add(1) // the mapping stays while we wait
	l.pendReq.reset()
	l.inflight.clear()
	l.termKind, l.termText = termDisconnect, "disconnected"
	if cause != nil && !errors.Is(cause, verbs.ErrDisconnected) {
		l.termKind, l.termText = termError, cause.Error()
	}
	if l.delivering.Load() {
		l.termPend = true
	} else {
		// What was delivered is acknowledged before the TERM, so that
		// the peer's sends it completes do not fail with the connection.
		l.flushAckLocked()
		l.emitLocked(item{kind: recTerm, code: l.termKind, data: []byte(l.termText)})
		l.peer.ring()
	}
	l.txMu.Unlock()
	l.me.closed.Store(1)
	l.waitAccess()
	l.stop.Store(true)
	l.me.ringAlways()
	l.release()
}

// waitAccess waits until the peer's copies into or out of this side's
// memory have ended (it checks closed before it starts a new one), unless
// the peer is gone.
func (l *link) waitAccess() {
	var start time.Time
	for i := 0; l.me.access.Load() != 0; i++ {
		if l.peerGone.Load() {
			return
		}
		if i < 64 {
			runtime.Gosched()
			continue
		}
		if start.IsZero() {
			start = time.Now()
		} else if time.Since(start) > accessLimit {
			return // a peer that does not play by the rules
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// ---- The receiver ----

// watch reads the socket until it fails: the peer closed it, or died, or
// the link closed it. It never gets data after the handshake.
func (l *link) watch() {
	defer close(l.watchDone)
	var b [64]byte
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := l.conn.ReadMsgUnix(b[:], oob)
		fds := parseFDs(oob[:oobn])
		if err != nil || n == 0 {
			closeFDs(fds)
			break
		}
		l.onArenaMsg(b[:n], fds)
	}
	l.markPeerGone()
}

// markPeerGone records that the peer process ended or closed the
// connection and wakes the receiver goroutine to finish it.
func (l *link) markPeerGone() {
	l.peerGone.Store(true)
	l.me.ringAlways()
}

// run is the receiver: it takes records from the peer's rings and waits
// on its bell when there are none. It alone does the receive work.
func (l *link) run() {
	defer l.exit()
	var spinStart time.Time
	idle := 0
	for !l.stop.Load() {
		if l.poll() {
			spinStart, idle = time.Time{}, 0
			continue
		}
		if l.peerGone.Load() {
			l.onPeerGone()
			return
		}
		// Read the clock on every 8th empty poll only: it costs as
		// much as a poll.
		if idle++; idle&7 != 1 {
			runtime.Gosched()
			continue
		}
		if spinStart.IsZero() {
			spinStart = time.Now()
		}
		if time.Since(spinStart) < l.p.opts.spin {
			runtime.Gosched()
			continue
		}
		l.sleep()
		spinStart, idle = time.Time{}, 0
	}
}

// poll does what there is to do and reports whether it did anything.
func (l *link) poll() bool {
	work := false
	if l.hasPend.Load() {
		l.txMu.Lock()
		if !l.dead && l.pumpLocked() {
			work = true
		}
		l.txMu.Unlock()
	}
	if l.respIn.ready() {
		l.processResp()
		work = true
	}
	if l.held && l.recvPosted.Swap(false) {
		l.held = false
	}
	if !l.held && !l.reqStopped && l.reqIn.ready() {
		l.processReq()
		work = true
	}
	return work
}

// sleep blocks on the bell until something may have changed.
func (l *link) sleep() {
	l.me.sleeping.Store(sleepNormal)
	v := l.me.bell.Load()
	if !l.stop.Load() && !l.peerGone.Load() && !l.respIn.ready() &&
		(l.held || l.reqStopped || !l.reqIn.ready()) &&
		!(l.held && l.recvPosted.Load()) && !l.pumpIfPending() {
		l.st.wakes.Add(1)
		sleepOn(&l.me.bell, v, int64(sleepCap))
	}
	l.me.sleeping.Store(awake)
}

// pumpIfPending writes waiting records and reports whether it wrote any.
func (l *link) pumpIfPending() bool {
	if !l.hasPend.Load() {
		return false
	}
	l.txMu.Lock()
	defer l.txMu.Unlock()
	return !l.dead && l.pumpLocked()
}

// fail ends the connection because the peer broke the protocol.
func (l *link) fail(err error) {
	l.reqStopped = true
	l.ep.Terminated(fmt.Errorf("%w: %w", verbs.ErrTerminated, err))
	l.stop.Store(true)
}

// onPeerGone handles the end of the peer: what it wrote before it went is
// read (the outcome of a refused message, its TERM), then the endpoint is
// terminated, as by a reset connection.
func (l *link) onPeerGone() {
	if l.respIn.ready() {
		l.processResp()
	}
	if !l.peerTerm {
		l.ep.Terminated(fmt.Errorf("shm: peer closed the connection: %w", syscall.ECONNRESET))
	}
}

// exit releases what the receiver owns once it stops.
func (l *link) exit() {
	deadline := time.Now().Add(lingerLimit)
	for l.hasPend.Load() && !l.peerGone.Load() && time.Now().Before(deadline) {
		l.txMu.Lock()
		l.pendReq.reset() // requests are abandoned; outcomes and TERM go out
		l.pumpLocked()
		l.txMu.Unlock()
		time.Sleep(50 * time.Microsecond)
	}
	l.conn.Close()
	<-l.watchDone
	l.txMu.Lock()
	l.dead, l.term = true, true
	l.pendReq.reset()
	l.pendResp.reset()
	l.inflight.clear()
	l.txMu.Unlock()
	l.closePeerProcess(true)
	l.dropPeerArenas()
	l.p.removeLink(l)
	l.release()
	close(l.done)
}

// processResp reads the response ring: outcomes of this side's messages,
// READ data, the peer's TERM.
func (l *link) processResp() {
	defer l.publishIn(&l.respIn)
	for range 256 {
		rec, err := l.respIn.peek()
		if err != nil {
			l.fail(err)
			return
		}
		if rec == nil {
			return
		}
		if len(rec) < respHdr {
			l.fail(errCorrupt)
			return
		}
		id := binary.LittleEndian.Uint32(rec[8:])
		switch rec[4] {
		case recAck:
			err = l.completeUpTo(id)
		case recDone:
			err = l.completeOne(id, errOf(binary.LittleEndian.Uint32(rec[12:])))
		case recRData:
			err = l.readData(id, rec[respHdr:])
		case recTerm:
			l.respIn.advance(len(rec))
			l.peerTerm = true
			sentinel := verbs.ErrDisconnected
			if id == termError {
				sentinel = verbs.ErrTerminated
			} else {
				l.deliverBeforeTerm()
			}
			l.ep.Terminated(fmt.Errorf("%w: %s", sentinel, rec[respHdr:]))
			continue
		default:
			err = errCorrupt
		}
		if err != nil {
			l.fail(err)
			return
		}
		l.respIn.advance(len(rec))
	}
}

// deliverBeforeTerm delivers the requests the peer wrote into the request
// ring before its TERM of a plain disconnect, as long as they need none of
// its memory (a single inline record, as every small SEND is): the peer
// posted them before it went, and verbs lets work in flight at a
// disconnect arrive. A protocol whose last messages are small SENDs (an
// acknowledgement posted just before a close) then has them arrive, rather
// than lost to the order in which this side reads its two rings.
func (l *link) deliverBeforeTerm() {
	defer l.publishIn(&l.reqIn)
	for !l.held && !l.reqStopped {
		rec, err := l.reqIn.peek()
		if err != nil || rec == nil || len(rec) < reqHdr || rec[4] != recReq || rec[6] != modeInline ||
			binary.LittleEndian.Uint64(rec[32:]) > uint64(len(rec)-reqHdr) {
			return
		}
		if !l.deliver(rec) {
			return
		}
	}
}

// publishIn publishes how far an incoming ring was read and wakes the peer
// if it waits for room.
func (l *link) publishIn(c *consumer) {
	c.publish()
	if l.peer.wantSpace.Load() != 0 {
		l.peer.ringAlways()
	}
}

// completeUpTo completes every message in flight up to id, successfully.
func (l *link) completeUpTo(id uint32) error {
	l.txMu.Lock()
	if l.term {
		l.txMu.Unlock()
		return nil
	}
	if int32(l.nextID-1-id) < 0 {
		l.txMu.Unlock()
		return errCorrupt
	}
	for {
		f, ok := l.inflight.front()
		if !ok || int32(id-f.id) < 0 {
			break
		}
		l.inflight.pop()
		l.acked = append(l.acked, f.m)
	}
	l.txMu.Unlock()
	for i, m := range l.acked {
		l.ep.Complete(m, nil)
		l.acked[i] = nil
	}
	l.acked = l.acked[:0]
	return nil
}

// completeOne completes the message in flight with id, which must be the
// oldest.
func (l *link) completeOne(id uint32, err error) error {
	l.txMu.Lock()
	if l.term {
		l.txMu.Unlock()
		return nil
	}
	f, ok := l.inflight.front()
	if !ok || f.id != id {
		l.txMu.Unlock()
		return errCorrupt
	}
	l.inflight.pop()
	l.txMu.Unlock()
	l.ep.Complete(f.m, err)
	return nil
}

// readData places bytes of a READ's response into the oldest message in
// flight, the READ, under txMu so that Terminate waits for it.
func (l *link) readData(id uint32, b []byte) error {
	l.txMu.Lock()
	defer l.txMu.Unlock()
	if l.term {
		return nil
	}
	f, ok := l.inflight.front()
	if !ok || f.id != id || f.m.Op != verbs.OpRead || f.m.Sink == nil {
		return errCorrupt
	}
	if _, err := f.m.Sink.Write(b); err != nil {
		return errCorrupt
	}
	return nil
}

// processReq reads the request ring and hands each request to the
// endpoint, in order, until one must wait for a RECV, the connection
// fails, or a batch is done. Successes are acknowledged once per batch.
func (l *link) processReq() {
	defer l.publishIn(&l.reqIn)
	for range 64 {
		rec, err := l.reqIn.peek()
		if err != nil {
			l.fail(err)
			break
		}
		if rec == nil || rec[4] != recReq || len(rec) < reqHdr {
			if rec != nil {
				l.fail(errCorrupt)
			}
			break
		}
		if !l.deliver(rec) {
			break
		}
	}
	// Under txMu: Terminate may have flushed the acknowledgement.
	l.txMu.Lock()
	if l.ackPend && !l.dead {
		l.flushAckLocked()
		l.peer.ring()
	}
	l.txMu.Unlock()
}

// flushAckLocked sends the pending acknowledgement.
func (l *link) flushAckLocked() {
	if l.ackPend {
		l.ackPend = false
		l.emitLocked(item{kind: recAck, id: l.ackID})
	}
}

// deliver hands one request to the endpoint and reports whether the
// receiver may go on with the next.
func (l *link) deliver(rec []byte) bool {
	op := verbs.Opcode(rec[5])
	mode, nseg := rec[6], int(rec[7])
	id := binary.LittleEndian.Uint32(rec[8:])
	n := binary.LittleEndian.Uint64(rec[32:])
	if n > verbs.MaxMessage {
		l.fail(errCorrupt)
		return false
	}
	l.tm = verbs.Message{
		Op: op, Imm: binary.LittleEndian.Uint32(rec[12:]),
		RKey: mreg.Key(binary.LittleEndian.Uint32(rec[16:])), RAddr: binary.LittleEndian.Uint64(rec[24:]),
		Len: int(n),
	}
	if err := l.rd.reset(op, mode, rec, int(n), nseg); err != nil {
		l.fail(err)
		return false
	}
	if op == verbs.OpRead {
		l.sk.reset(mode, id, l.rd.iov, int(n))
		l.tm.Sink = &l.sk
	} else {
		l.tm.Payload = &l.rd
	}
	l.delivering.Store(true)
	err := l.ep.Deliver(&l.tm)
	if err == nil && l.rd.rem > 0 && op != verbs.OpRead {
		err = l.rd.discard()
	}
	l.txMu.Lock()
	l.delivering.Store(false)
	defer l.txMu.Unlock()
	l.tm = verbs.Message{}
	if l.dead {
		l.reqStopped = true
		return false
	}
	goOn := true
	switch {
	case err == nil:
		l.reqIn.advance(l.rd.recLen)
		l.ackID, l.ackPend = id, true
	case errors.Is(err, verbs.ErrNoRecv) && l.peerRNR != verbs.RNRFail:
		// Held, and delivered again on RecvPosted; once terminated,
		// never: the peer flushes it.
		l.held = !l.term
		l.reqStopped = l.term
		goOn = false
	default:
		l.flushAckLocked()
		l.emitLocked(item{kind: recDone, id: id, code: codeOf(err)})
		l.reqStopped = true
		goOn = false
	}
	if l.termPend {
		l.termPend = false
		l.flushAckLocked()
		l.emitLocked(item{kind: recTerm, code: l.termKind, data: []byte(l.termText)})
	}
	if !goOn {
		l.peer.ring()
	}
	return goOn
}

// waitIn waits until the request ring has a record, pumping this side's
// own waiting records meanwhile, or fails once the link stops.
func (l *link) waitIn() ([]byte, error) {
	var spinStart time.Time
	for {
		rec, err := l.reqIn.peek()
		if err != nil || rec != nil {
			return rec, err
		}
		if l.stop.Load() || l.peerGone.Load() {
			return nil, fmt.Errorf("shm: connection ended in the middle of a message: %w", io.ErrUnexpectedEOF)
		}
		if l.pumpIfPending() {
			continue
		}
		if spinStart.IsZero() {
			spinStart = time.Now()
		}
		if time.Since(spinStart) < l.p.opts.spin {
			runtime.Gosched()
			continue
		}
		l.me.sleeping.Store(sleepNormal)
		v := l.me.bell.Load()
		if !l.reqIn.ready() && !l.stop.Load() && !l.peerGone.Load() && !l.pumpIfPending() {
			sleepOn(&l.me.bell, v, int64(sleepCap))
		}
		l.me.sleeping.Store(awake)
		spinStart = time.Time{}
	}
}

// payloadReader is the Payload of a request handed to Deliver: inline
// bytes from the ring, or the initiator's memory by process_vm_readv.
type payloadReader struct {
	l      *link
	mode   byte
	cur    []byte // unread inline bytes of the record at the head
	recLen int    // length of the record at the head of the ring
	rem    int    // bytes not yet read
	iov    []unix.RemoteIovec
	off    int // bytes read, for modeIov
}

// reset prepares the reader for the request rec of n bytes.
func (r *payloadReader) reset(op verbs.Opcode, mode byte, rec []byte, n, nseg int) error {
	r.mode, r.recLen, r.rem, r.off, r.cur = mode, len(rec), n, 0, nil
	r.iov = r.iov[:0]
	body := rec[reqHdr:]
	switch mode {
	case modeInline:
		if len(body) > n || op == verbs.OpRead {
			return errCorrupt
		}
		r.cur = body
	case modeIov:
		if !r.l.cma || len(body) != 16*nseg || nseg > verbs.MaxSGE {
			return errCorrupt
		}
		total := uint64(0)
		for i := range nseg {
			a := binary.LittleEndian.Uint64(body[16*i:])
			k := binary.LittleEndian.Uint64(body[16*i+8:])
			total += k
			if k > verbs.MaxMessage || a+k < a {
				return errCorrupt
			}
			if k > 0 {
				r.iov = append(r.iov, unix.RemoteIovec{Base: uintptr(a), Len: int(k)})
			}
		}
		if total != uint64(n) {
			return errCorrupt
		}
	case modeRData:
		if op != verbs.OpRead || len(body) != 0 {
			return errCorrupt
		}
	default:
		return errCorrupt
	}
	return nil
}

// Read reads the next bytes of the payload.
func (r *payloadReader) Read(p []byte) (int, error) {
	if r.rem == 0 {
		return 0, io.EOF
	}
	if r.mode == modeIov {
		return r.pull(p)
	}
	if r.mode != modeInline {
		return 0, io.EOF
	}
	l := r.l
	if len(r.cur) == 0 {
		// The record at the head is used up: move on to the next
		// fragment. The request can no longer be held back.
		l.reqIn.advance(r.recLen)
		l.publishIn(&l.reqIn)
		rec, err := l.waitIn()
		if err != nil {
			r.recLen = 0
			return 0, err
		}
		r.recLen = len(rec)
		if rec[4] != recFrag || len(rec) == recHdr || len(rec)-recHdr > r.rem {
			return 0, errCorrupt
		}
		r.cur = rec[recHdr:]
	}
	n := placeCopy(p, r.cur)
	r.cur = r.cur[n:]
	r.rem -= n
	return n, nil
}

// pull reads bytes from the initiator's memory.
func (r *payloadReader) pull(p []byte) (int, error) {
	l := r.l
	k := min(len(p), r.rem)
	v := &l.riov
	v.addLocal(p[:k])
	remoteFrom(v, r.iov, r.off, k)
	n, err := l.peerTransfer(v, false, k, r.off == 0)
	r.off += n
	r.rem -= n
	if err != nil {
		return n, fmt.Errorf("shm: read the initiator's memory: %w", err)
	}
	return n, nil
}

// peerErr marks a cross-memory-attach failure that says the peer process
// is gone (ESRCH) as a reset connection, which is what it is: the same
// error the closing of the Unix socket reports a moment later.
func peerErr(err error) error {
	if errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%w (%w)", syscall.ECONNRESET, err)
	}
	return err
}

// peerTransfer moves k bytes between the local and remote iovecs set up in
// v (into the peer's memory if write), unless the peer has terminated,
// holding the peer's access count meanwhile so that the peer's
// deregistration waits for the copy; v is reset afterwards. first counts a
// pull in the statistics.
func (l *link) peerTransfer(v *iovecs, write bool, k int, first bool) (int, error) {
	l.peer.access.Add(1)
	var n int
	var err error
	if l.peer.closed.Load() != 0 {
		err = fmt.Errorf("shm: peer terminated: %w", verbs.ErrClosed)
	} else {
		n, err = l.cmaTransfer(v, write, k)
	}
	l.peer.access.Add(-1)
	v.reset()
	if first {
		l.st.pulls.Add(1)
	}
	return n, err
}

// discard skips payload bytes Deliver did not read.
func (r *payloadReader) discard() error {
	var buf [512]byte
	for r.rem > 0 {
		if _, err := r.Read(buf[:min(len(buf), r.rem)]); err != nil {
			return err
		}
	}
	return nil
}

// remoteFrom appends to v the k bytes of iov starting at offset off.
func remoteFrom(v *iovecs, iov []unix.RemoteIovec, off, k int) {
	for _, s := range iov {
		if k == 0 {
			return
		}
		if off >= s.Len {
			off -= s.Len
			continue
		}
		n := min(s.Len-off, k)
		v.remote = append(v.remote, unix.RemoteIovec{Base: s.Base + uintptr(off), Len: n})
		k -= n
		off = 0
	}
}

// sinkWriter is the Sink of a READ handed to Deliver: it writes the bytes
// into the initiator's memory by process_vm_writev, or sends them back in
// recRData records.
type sinkWriter struct {
	l    *link
	mode byte
	id   uint32
	iov  []unix.RemoteIovec
	off  int
	rem  int
}

func (w *sinkWriter) reset(mode byte, id uint32, iov []unix.RemoteIovec, n int) {
	w.mode, w.id, w.iov, w.off, w.rem = mode, id, iov, 0, n
}

// Write sends b, the next bytes of the READ's response.
func (w *sinkWriter) Write(b []byte) (int, error) {
	if len(b) > w.rem {
		return 0, io.ErrShortWrite
	}
	l := w.l
	if w.mode == modeRData {
		l.txMu.Lock()
		if !l.dead {
			l.flushAckLocked()
			l.emitLocked(item{kind: recRData, id: w.id, data: b})
			l.peer.ring()
		}
		l.txMu.Unlock()
		w.rem -= len(b)
		return len(b), nil
	}
	v := &l.riov
	v.addLocal(b)
	remoteFrom(v, w.iov, w.off, len(b))
	n, err := l.peerTransfer(v, true, len(b), w.off == 0)
	w.off += n
	w.rem -= n
	if err != nil {
		return n, fmt.Errorf("shm: write the initiator's memory: %w", err)
	}
	return n, nil
}
