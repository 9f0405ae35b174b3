package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// Compile-time checks.
var (
	_ verbs.Link         = (*link)(nil)
	_ verbs.PeerReporter = (*link)(nil)
)

// maxCtlQueued bounds the control FPDUs (fence and zero-length READ
// responses, the Terminate) queued for the socket: past it the receiver
// stops reading, so that a peer that sends fences and reads nothing
// meets TCP back-pressure instead of making this side allocate.
const maxCtlQueued = 4096

// flushCtl is how many control FPDUs the receiver queues at most before
// it writes them.
const flushCtl = 64

// holdCheck is how often a receiver that holds a SEND for want of a RECV
// looks whether the peer closed the connection meanwhile.
const holdCheck = 50 * time.Millisecond

// Kinds of records: what the initiator sent and waits to hear of.
const (
	recSend  = 1 + iota // SEND, SEND_WITH_IMM
	recWrite            // RDMA_WRITE, RDMA_WRITE_WITH_IMM
	recRead             // RDMA_READ
	recFence            // the provider's zero-length READ (and the ready-to-receive)
)

// record is a message sent whose outcome is not known yet.
type record struct {
	m      *verbs.Message // nil for a fence
	kind   uint8
	hasMSN bool
	msnLo  uint32 // the QN 0 MSNs its untagged messages took
	msnHi  uint32
	rmsn   uint32 // QN 1 MSN (READ, fence)
	stag   uint32 // WRITE: target STag and offset; READ: Data Sink STag
	to     uint64
	n      uint64 // WRITE length, READ size
	got    uint64 // READ: response bytes received
}

// Kinds of queued FPDUs.
const (
	itemCtl  = iota // only the provider's bytes
	itemMsg         // refers to a Message's memory
	itemResp        // refers to a region the provider pinned (a READ response)
)

// txItem is one FPDU waiting for the socket.
type txItem struct {
	iov     [][]byte // what is left to write
	vec     [][]byte // backing of iov
	hdr     [2 + untaggedHdr + maxTermLen]byte
	tail    [8]byte
	kind    uint8
	started bool         // some of it was written
	fence   bool         // a fence's Read Request
	region  *mreg.Region // released once written (itemResp)
	respEnd bool         // the last FPDU of a READ response
	priv    []byte       // its unwritten rest, copied at Terminate
}

// link is one connection.
//
// Locking: mu guards the transmit side (the queue of FPDUs, the writes to
// the socket, which are non-blocking system calls made under mu), the
// records of messages in flight, and the link's end; cond (on mu) is
// broadcast when FPDUs are written, when the receiver stops reading into a
// message's memory, and when the link ends. The receiver goroutine owns
// the decoder and every field below "receiver only".
type link struct {
	p     *Provider
	c     *net.TCPConn
	fd    int
	ep    *verbs.Endpoint
	crc   bool
	pay   [2]int // payload bytes per FPDU: tagged, untagged
	addrs verbs.Peer

	done       chan struct{} // closed once the socket is closed
	writerDone chan struct{}
	recvPosted chan struct{} // cap 1
	termC      chan struct{} // closed by Terminate

	mu          sync.Mutex
	cond        *sync.Cond
	q           []*txItem
	qh          int
	free        []*txItem
	gather      [][]byte
	iov         iovecs
	gated       bool // a passive side sends nothing before the peer's first FPDU (RFC 5044)
	blocked     bool // the socket took not everything: the writer waits for room
	term        bool // Terminate was called
	termErr     bool // ... with an error: a Terminate FPDU goes out
	peerEnded   bool // the peer ended the connection: nothing to tell it
	finish      bool // the writer writes what is left, then shuts writing down
	txErr       error
	sendMSN     uint32 // next QN 0 MSN
	readMSN     uint32 // next QN 1 MSN
	sinkSeq     uint32
	recs        []record
	rh          int
	respPending int // READ responses with data not yet written
	ctlQueued   int
	rxBusy      bool      // the receiver reads into a message's memory or a WRITE's target
	ctlHeld     bool      // control FPDUs wait for the receiver to be idle
	rxTerm      *termInfo // the Terminate the receiver decided on

	// Receiver only.
	dec         decoder
	expMSN      [3]uint32
	peerRNR     verbs.RNRPolicy
	rtrSeen     bool
	first       bool
	grace       bool // Terminate came: only fences are still answered
	pl          payload
	sink        respSink
	tm          verbs.Message
	wOpen       bool // a WRITE message is being received
	wDone       bool // the last message was a whole WRITE
	wKey        uint32
	wAddr, wLen uint64
	immPending  bool // an Immediate Data message binds to the next SEND
	immVal      uint32
	completions []*verbs.Message
	ctl         [maxTermLen]byte
}

// newLink makes the link of an established connection; start runs it.
func newLink(p *Provider, c *net.TCPConn, ep *verbs.Endpoint, crc, passive bool) (*link, error) {
	fd, err := fdOf(c)
	if err != nil {
		return nil, fmt.Errorf("tcp: %w", err)
	}
	c.SetNoDelay(true)
	ulpdu := p.opts.segment
	if ulpdu == 0 {
		// RFC 5044's MULPDU without markers: an FPDU (length, ULPDU,
		// padding, CRC) fits the segment.
		ulpdu = maxULPDU
		if mss := maxSegment(fd); mss > 0 {
			ulpdu = min(max((mss-8)&^3+2, 256), maxULPDU)
		}
	}
	l := &link{
		p:          p,
		c:          c,
		fd:         fd,
		ep:         ep,
		crc:        crc,
		pay:        [2]int{ulpdu - taggedHdr, ulpdu - untaggedHdr},
		addrs:      verbs.Peer{LocalAddr: addrOf(c.LocalAddr()), RemoteAddr: addrOf(c.RemoteAddr())},
		done:       make(chan struct{}),
		writerDone: make(chan struct{}),
		recvPosted: make(chan struct{}, 1),
		termC:      make(chan struct{}),
		gated:      passive,
		sendMSN:    1,
		readMSN:    1,
		expMSN:     [3]uint32{1, 1, 1},
		peerRNR:    verbs.RNRFail, // iWARP's own rule, until the peer says otherwise
	}
	l.cond = sync.NewCond(&l.mu)
	r, err := newSockReader(c)
	if err != nil {
		return nil, fmt.Errorf("tcp: %w", err)
	}
	r.idle = l.idle
	l.dec = decoder{r: r, crc: crc}
	l.pl.l = l
	l.sink.l = l
	if !p.addLink(l) {
		return nil, errProviderClosed
	}
	// The first FPDU: ready to receive, with this side's RNR policy.
	params := uint64(rtrMagic | rtrVersion)
	if ep.RNR() == verbs.RNRFail {
		params |= rtrRNRFail
	}
	l.mu.Lock()
	l.pushFenceLocked(params)
	l.mu.Unlock()
	return l, nil
}

// start runs the link's goroutines and sends what is queued.
func (l *link) start() {
	go l.writer()
	go l.run()
	l.mu.Lock()
	l.flushLocked()
	l.mu.Unlock()
}

// Peer returns the two ends' "tcp:IP:PORT" addresses. TCP tells nothing of
// the peer's process.
func (l *link) Peer() verbs.Peer { return l.addrs }

// ---- The initiator's side ----

// Transmit queues the FPDUs of m and writes what the socket takes now; the
// writer goroutine writes the rest. Its outcome comes later: success when
// a READ response after it (a fence's, or an application READ's) arrives,
// the error of the peer's Terminate that names it, or a flush.
func (l *link) Transmit(m *verbs.Message) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.term {
		return true, verbs.ErrClosed
	}
	// A fence not yet written at the queue's tail goes: the one after
	// this message (or its own response, for a READ) covers the same.
	l.dropFenceLocked()
	segs := m.Segments()
	r := record{m: m}
	switch m.Op {
	case verbs.OpSend:
		r.kind, r.hasMSN, r.msnLo, r.msnHi = recSend, true, l.sendMSN, l.sendMSN
		l.pushData(false, opSend, 0, 0, qnSend, l.sendMSN, segs, m.Len, itemMsg)
		l.sendMSN++
	case verbs.OpSendWithImm:
		r.kind, r.hasMSN, r.msnLo, r.msnHi = recSend, true, l.sendMSN, l.sendMSN+1
		l.pushImmLocked(m.Imm, immNextSend)
		l.pushData(false, opSend, 0, 0, qnSend, l.sendMSN, segs, m.Len, itemMsg)
		l.sendMSN++
	case verbs.OpWrite:
		r.kind, r.stag, r.to, r.n = recWrite, uint32(m.RKey), m.RAddr, uint64(m.Len)
		l.pushData(true, opWrite, uint32(m.RKey), m.RAddr, 0, 0, segs, m.Len, itemMsg)
	case verbs.OpWriteWithImm:
		r.kind, r.stag, r.to, r.n = recWrite, uint32(m.RKey), m.RAddr, uint64(m.Len)
		l.pushData(true, opWrite, uint32(m.RKey), m.RAddr, 0, 0, segs, m.Len, itemMsg)
		r.hasMSN, r.msnLo, r.msnHi = true, l.sendMSN, l.sendMSN
		l.pushImmLocked(m.Imm, 0)
	case verbs.OpRead:
		l.sinkSeq++
		r.kind, r.rmsn, r.stag, r.n = recRead, l.readMSN, 1<<31|l.sinkSeq&(1<<31-1), uint64(m.Len)
		rr := readRequest{sinkSTag: r.stag, size: uint32(m.Len), srcSTag: uint32(m.RKey), srcTO: m.RAddr}
		l.pushReadLocked(&rr)
	default:
		return true, fmt.Errorf("%w: opcode %v", verbs.ErrInvalid, m.Op)
	}
	l.recs = append(l.recs, r)
	if m.Op != verbs.OpRead {
		l.pushFenceLocked(0)
	}
	l.flushLocked()
	return false, nil
}

// dropFenceLocked takes back the fence at the queue's tail if none of it
// was written: its record is the last, its MSN the last taken.
func (l *link) dropFenceLocked() {
	if l.qh == len(l.q) {
		return
	}
	it := l.q[len(l.q)-1]
	if !it.fence || it.started {
		return
	}
	l.q[len(l.q)-1] = nil
	l.q = l.q[:len(l.q)-1]
	l.retire(it)
	l.recs[len(l.recs)-1] = record{}
	l.recs = l.recs[:len(l.recs)-1]
	l.readMSN--
}

// pushFenceLocked queues a zero-length READ of no memory (params is its
// Data Source Tagged Offset: zero for a fence, the parameters for the
// ready-to-receive message) and records it.
func (l *link) pushFenceLocked(params uint64) {
	l.recs = append(l.recs, record{kind: recFence, rmsn: l.readMSN})
	rr := readRequest{srcTO: params}
	l.pushReadLocked(&rr)
	l.q[len(l.q)-1].fence = params == 0
}

// pushReadLocked queues an RDMA Read Request.
func (l *link) pushReadLocked(rr *readRequest) {
	it := l.item(itemCtl)
	h := putUntagged(it.hdr[:], opReadReq, true, qnRead, l.readMSN, 0, readReqLen)
	rr.put(it.hdr[len(h):])
	l.pushCtlItem(it, len(h)+readReqLen)
	l.readMSN++
}

// pushImmLocked queues an Immediate Data message (RFC 7306) carrying imm
// and, in its second word, flag.
func (l *link) pushImmLocked(imm, flag uint32) {
	it := l.item(itemCtl)
	h := putUntagged(it.hdr[:], opImm, true, qnSend, l.sendMSN, 0, immLen)
	binary.BigEndian.PutUint32(it.hdr[len(h):], imm)
	binary.BigEndian.PutUint32(it.hdr[len(h)+4:], flag)
	l.pushCtlItem(it, len(h)+immLen)
	l.sendMSN++
}

// pushCtlItem finishes an item whose FPDU is the first n bytes of its hdr
// and queues it.
func (l *link) pushCtlItem(it *txItem, n int) {
	b := it.hdr[:n]
	it.vec = append(it.vec[:0], b, trailer(it.tail[:], l.sum(0, b), n-2, l.crc))
	it.iov = it.vec
	l.q = append(l.q, it)
	if it.kind == itemCtl {
		l.ctlQueued++
	}
}

// sum updates a running CRC, if CRCs are on.
func (l *link) sum(s uint32, b []byte) uint32 {
	if !l.crc {
		return 0
	}
	return crcUpdate(s, b)
}

// pushData queues the FPDUs of one DDP message whose payload is the first
// n bytes of segs: tagged (stag, to) or untagged (qn, msn), each FPDU
// carrying at most the link's payload size, the last with the L bit.
func (l *link) pushData(tagged bool, op uint8, stag uint32, to uint64, qn, msn uint32, segs [][]byte, n int, kind uint8) {
	max := l.pay[1]
	if tagged {
		max = l.pay[0]
	}
	si, so := 0, 0 // position in segs
	off := 0
	for {
		chunk := min(max, n-off)
		last := off+chunk == n
		it := l.item(kind)
		var h []byte
		if tagged {
			h = putTagged(it.hdr[:], op, last, stag, to+uint64(off), chunk)
		} else {
			h = putUntagged(it.hdr[:], op, last, qn, msn, uint32(off), chunk)
		}
		it.vec = append(it.vec[:0], h)
		s := l.sum(0, h)
		for k := chunk; k > 0; {
			b := segs[si][so:]
			if len(b) > k {
				b = b[:k]
			}
			if len(b) > 0 {
				it.vec = append(it.vec, b)
				s = l.sum(s, b)
			}
			k -= len(b)
			so += len(b)
			if so == len(segs[si]) {
				si, so = si+1, 0
			}
		}
		it.vec = append(it.vec, trailer(it.tail[:], s, len(h)-2+chunk, l.crc))
		it.iov = it.vec
		l.q = append(l.q, it)
		if kind == itemCtl {
			l.ctlQueued++
		}
		off += chunk
		if last {
			return
		}
	}
}

// item returns a blank item of kind.
func (l *link) item(kind uint8) *txItem {
	var it *txItem
	if n := len(l.free); n > 0 {
		it = l.free[n-1]
		l.free = l.free[:n-1]
	} else {
		it = new(txItem)
	}
	it.kind = kind
	return it
}

// flushLocked writes queued FPDUs while the socket takes them, without
// blocking; when it takes no more, the writer goroutine waits for room.
func (l *link) flushLocked() {
	for l.qh < len(l.q) && !l.gated && l.txErr == nil {
		bufs := l.gather[:0]
		for i := l.qh; i < len(l.q) && len(bufs)+len(l.q[i].iov) <= maxIov; i++ {
			it := l.q[i]
			if it.region != nil && len(it.iov) > 1 {
				// The last FPDU of a READ response: its trailer goes
				// in a write of its own, after the region's reference
				// is dropped, so that the READ cannot complete (and
				// its requester deregister the region) while this
				// side still holds it.
				bufs = append(bufs, it.iov[:len(it.iov)-1]...)
				break
			}
			bufs = append(bufs, it.iov...)
		}
		l.gather = bufs
		n, err := l.iov.writev(l.fd, bufs)
		clear(bufs)
		if err == errWouldBlock {
			if !l.blocked {
				l.blocked = true
				l.cond.Broadcast()
			}
			return
		}
		if err != nil {
			l.txErr = err
			l.cond.Broadcast()
			return
		}
		l.advanceLocked(n)
	}
	l.blocked = false
}

// advanceLocked takes n written bytes off the queue.
func (l *link) advanceLocked(n int) {
	for l.qh < len(l.q) {
		it := l.q[l.qh]
		for len(it.iov) > 0 && n >= len(it.iov[0]) {
			n -= len(it.iov[0])
			it.iov = it.iov[1:]
		}
		if len(it.iov) > 0 {
			if n > 0 {
				it.iov[0] = it.iov[0][n:]
				it.started = true
			}
			if len(it.iov) == 1 && it.region != nil {
				it.region.Release() // only the trailer is left
				it.region = nil
			}
			return
		}
		l.q[l.qh] = nil
		l.qh++
		l.retire(it)
	}
	l.q = l.q[:0]
	l.qh = 0
}

// retire recycles a written or dropped item.
func (l *link) retire(it *txItem) {
	if it.region != nil {
		it.region.Release()
	}
	if it.respEnd {
		l.respPending--
		l.cond.Broadcast()
	}
	if it.kind == itemCtl {
		if l.ctlQueued--; l.ctlQueued == maxCtlQueued-1 {
			l.cond.Broadcast()
		}
	}
	clear(it.vec)
	*it = txItem{vec: it.vec[:0], priv: it.priv[:0]}
	l.free = append(l.free, it)
}

// writer writes what the socket could not take at once, waiting for room
// in the runtime's poller, and at the end shuts the writing side down.
func (l *link) writer() {
	defer close(l.writerDone)
	rc, err := l.c.SyscallConn()
	for {
		l.mu.Lock()
		for !(l.blocked && !l.gated) && !l.finish && l.txErr == nil {
			l.cond.Wait()
		}
		if l.txErr != nil || err != nil {
			l.mu.Unlock()
			return
		}
		if l.finish && l.qh == len(l.q) {
			l.mu.Unlock()
			l.c.CloseWrite() // FIN, after every byte written
			return
		}
		l.mu.Unlock()
		werr := rc.Write(func(uintptr) bool {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.flushLocked()
			return !l.blocked || l.gated || l.txErr != nil
		})
		if werr != nil {
			l.mu.Lock()
			if l.txErr == nil {
				l.txErr = werr
			}
			l.cond.Broadcast()
			l.mu.Unlock()
			return
		}
	}
}

// RecvPosted makes the receiver deliver again the SEND it holds for want
// of a RECV.
func (l *link) RecvPosted() {
	select {
	case l.recvPosted <- struct{}{}:
	default:
	}
}

// Terminate ends the connection. A plain disconnect answers the fences
// the peer already sent after messages that were delivered, then closes
// the connection after the last byte written (a FIN, never a reset); an
// error sends an iWARP Terminate first. No memory of a Message is touched
// once Terminate returns: the FPDU being written keeps a copy of its
// unwritten rest, the others are dropped, and a read into a READ's sink is
// interrupted and waited for.
func (l *link) Terminate(cause error) {
	l.mu.Lock()
	if l.term {
		l.mu.Unlock()
		return
	}
	l.term = true
	if !l.peerEnded && !errors.Is(cause, verbs.ErrDisconnected) {
		l.termErr = true
	}
	l.detachLocked()
	for l.rxBusy {
		l.c.SetReadDeadline(time.Unix(1, 0))
		l.cond.Wait()
	}
	// The receiver stops waiting for the peer; if it is between FPDUs it
	// reads on without blocking, to answer fences (see run). Under mu, so
	// that finishRx's later deadline is not overwritten.
	l.c.SetReadDeadline(time.Unix(1, 0))
	close(l.termC)
	l.cond.Broadcast()
	l.mu.Unlock()
}

// detachLocked drops what refers to message memory: the records, and the
// queued FPDUs of messages and READ responses, but for the one being
// written, whose rest is copied so that the stream stays well framed.
func (l *link) detachLocked() {
	clear(l.recs)
	l.recs, l.rh = l.recs[:0], 0
	keep := l.q[:0]
	for i := l.qh; i < len(l.q); i++ {
		it := l.q[i]
		l.q[i] = nil
		switch {
		case it.kind == itemCtl:
			keep = append(keep, it)
		case i == l.qh && it.started:
			for _, b := range it.iov {
				it.priv = append(it.priv, b...)
			}
			it.vec = append(it.vec[:0], it.priv)
			it.iov = it.vec
			if it.region != nil {
				it.region.Release()
				it.region = nil
			}
			if it.respEnd {
				it.respEnd = false
				l.respPending--
			}
			it.kind = itemCtl
			l.ctlQueued++
			keep = append(keep, it)
		default:
			l.retire(it)
		}
	}
	l.q, l.qh = keep, 0
}

// ---- The receiver ----

// run reads FPDUs and acts on them until the connection ends, then closes
// it (finish).
func (l *link) run() {
	defer l.finishRx()
	for {
		h, err := l.dec.next()
		if err != nil && l.toGrace(err) {
			continue
		}
		if err != nil {
			l.streamEnded(err)
			return
		}
		if !l.first {
			l.first = true
			l.mu.Lock()
			l.gated = false
			l.flushLocked()
			l.cond.Broadcast()
			l.mu.Unlock()
		}
		if !l.frame(h) {
			return
		}
	}
}

// toGrace reports whether err is the interruption of Terminate, between
// FPDUs of a plain disconnect: the receiver then reads on without
// blocking, answering the fences that came after delivered messages until
// the socket holds nothing more or something that is not a fence.
func (l *link) toGrace(err error) bool {
	if l.grace || !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	l.mu.Lock()
	ok := l.term && !l.termErr && !l.peerEnded
	l.mu.Unlock()
	if ok {
		l.grace = true
		l.dec.r = readNB(l.fd)
	}
	return ok
}

// frame acts on one FPDU whose header was read; it returns false when the
// receiver stops.
func (l *link) frame(h *header) bool {
	if h.op != opReadResp {
		if err := l.waitTx(); err != nil {
			return l.streamEnded(err)
		}
	}
	if l.grace && h.op != opReadReq && h.op != opReadResp {
		return false
	}
	if l.immPending && h.op != opSend && h.op != opSendSE {
		return l.violated(violation(layerRDMAP, etypeRemoteOperation, codeUnexpectedOp, "opcode %d after an Immediate Data message bound to a SEND", h.op))
	}
	switch h.op {
	case opTerminate:
		return l.onTerminate(h)
	case opReadReq:
		return l.onReadRequest(h)
	case opReadResp:
		return l.onReadResponse(h)
	case opWrite:
		return l.onWrite(h)
	case opSend, opSendSE:
		return l.onSend(h)
	case opImm, opImmSE:
		return l.onImm(h)
	}
	return l.violated(violation(layerRDMAP, etypeRemoteOperation, codeUnexpectedOp, "opcode %d", h.op))
}

// idle writes the control FPDUs the receiver queued, once it has read all
// the socket holds (sockReader calls it before it waits).
func (l *link) idle() {
	l.mu.Lock()
	if l.ctlHeld {
		l.ctlHeld = false
		l.flushLocked()
	}
	l.mu.Unlock()
}

// waitTx waits while a READ response of this side is not yet written (a
// later message may change the memory it reads) or too many control FPDUs
// are queued. It fails once the link ends or the socket failed.
func (l *link) waitTx() error {
	if l.grace {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for (l.respPending > 0 || l.ctlQueued >= maxCtlQueued) && l.txErr == nil && !l.term {
		l.flushLocked()
		l.cond.Wait()
	}
	switch {
	case l.txErr != nil:
		return l.txErr
	case l.term:
		return errHeldEnd
	}
	return nil
}

// checkMSN checks an untagged message's MSN against the next expected on
// its queue.
func (l *link) checkMSN(h *header) error {
	if h.msn != l.expMSN[h.qn] {
		return violation(layerDDP, etypeUntagged, codeUBadMSN, "MSN %d on queue %d, want %d", h.msn, h.qn, l.expMSN[h.qn])
	}
	if h.mo != 0 {
		return violation(layerDDP, etypeUntagged, codeUBadMO, "message offset %d in a message's first segment", h.mo)
	}
	return nil
}

// readCtl reads a control message's whole payload (n bytes exactly, in one
// FPDU) and its trailer.
func (l *link) readCtl(h *header, n int) ([]byte, error) {
	if h.payload != n || !h.last {
		return nil, violation(layerLLP, etypeMPA, codeLengthField, "opcode %d with %d bytes of payload (L %v), want %d in one segment", h.op, h.payload, h.last, n)
	}
	b := l.ctl[:n]
	if err := l.dec.readFull(b); err != nil {
		return nil, err
	}
	return b, l.dec.end()
}

func (l *link) onReadRequest(h *header) bool {
	if err := l.checkMSN(h); err != nil {
		return l.violated(err)
	}
	b, err := l.readCtl(h, readReqLen)
	if err != nil {
		return l.violated(err)
	}
	l.expMSN[qnRead]++
	rr := parseReadRequest(b)
	if rr.fence() {
		if !l.rtrSeen && h.msn == 1 {
			l.rtrSeen = true
			if rr.srcTO&rtrMask == rtrMagic && rr.srcTO&0xFF00 == rtrVersion {
				l.peerRNR = verbs.RNRWait
				if rr.srcTO&rtrRNRFail != 0 {
					l.peerRNR = verbs.RNRFail
				}
			}
		}
		// The response goes with the next write, or when the receiver
		// has read all there is (idle): a burst of fences is answered
		// with one writev.
		l.mu.Lock()
		if !l.term || l.grace {
			it := l.item(itemCtl)
			h := putTagged(it.hdr[:], opReadResp, true, rr.sinkSTag, rr.sinkTO, 0)
			l.pushCtlItem(it, len(h))
			if l.grace || l.ctlQueued >= flushCtl {
				l.flushLocked()
			} else {
				l.ctlHeld = true
			}
		}
		l.mu.Unlock()
		return true
	}
	if l.grace {
		return false
	}
	if rr.size > verbs.MaxMessage {
		return l.violated(violation(layerDDP, etypeUntagged, codeUTooLong, "RDMA Read of %d bytes", rr.size))
	}
	l.sink.rr = rr
	l.tm = verbs.Message{Op: verbs.OpRead, RKey: mreg.Key(rr.srcSTag), RAddr: rr.srcTO, Len: int(rr.size), Sink: &l.sink}
	err = l.ep.Deliver(&l.tm)
	l.tm = verbs.Message{}
	if err != nil {
		return l.refused(err, h, &rr)
	}
	// The response: not before Deliver dropped its reference to the
	// region, so that the requester, once its READ completes, finds the
	// region free to deregister.
	l.mu.Lock()
	l.flushLocked()
	l.mu.Unlock()
	return true
}

// respSink is the Sink of an incoming READ handed to Deliver: it queues the
// RDMA Read Response FPDUs, whose payload is the region's memory itself,
// pinned by a reference of its own until the last byte is written.
type respSink struct {
	l  *link
	rr readRequest
}

func (s *respSink) Write(b []byte) (int, error) {
	l := s.l
	var r *mreg.Region
	if len(b) > 0 {
		var err error
		r, b, err = l.ep.PD().Table().Lookup(mreg.Key(s.rr.srcSTag), s.rr.srcTO, uint64(len(b)), mreg.RemoteRead)
		if err != nil {
			return 0, err
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.term {
		if r != nil {
			r.Release()
		}
		return 0, verbs.ErrClosed
	}
	kind := uint8(itemResp)
	if r == nil {
		kind = itemCtl
	}
	l.pushData(true, opReadResp, s.rr.sinkSTag, s.rr.sinkTO, 0, 0, [][]byte{b}, len(b), kind)
	if r != nil {
		last := l.q[len(l.q)-1]
		last.region, last.respEnd = r, true
		l.respPending++
	}
	// Written once Deliver returned, and with it the reference it took
	// (see onReadRequest).
	return len(b), nil
}

func (l *link) onReadResponse(h *header) bool {
	l.mu.Lock()
	if l.term {
		// The records are gone: the rest of the READs does not matter.
		l.mu.Unlock()
		if err := l.dec.discard(); err != nil {
			return l.streamEnded(err)
		}
		if err := l.dec.end(); err != nil {
			return l.streamEnded(err)
		}
		return l.grace
	}
	i := l.rh
	for i < len(l.recs) && l.recs[i].kind != recRead && l.recs[i].kind != recFence {
		i++
	}
	if i == len(l.recs) {
		l.mu.Unlock()
		return l.violated(violation(layerDDP, etypeTagged, codeTInvalidSTag, "RDMA Read Response for STag %#x with no READ outstanding", h.stag))
	}
	r := l.recs[i]
	if h.stag != r.stag {
		l.mu.Unlock()
		return l.violated(violation(layerDDP, etypeTagged, codeTInvalidSTag, "RDMA Read Response for STag %#x, want %#x", h.stag, r.stag))
	}
	if h.to != r.got || uint64(h.payload) > r.n-r.got {
		l.mu.Unlock()
		return l.violated(violation(layerDDP, etypeTagged, codeTBounds, "RDMA Read Response of %d bytes at offset %d, READ of %d with %d received", h.payload, h.to, r.n, r.got))
	}
	if h.payload > 0 {
		segs := r.m.Segments()
		l.rxBusy = true
		l.mu.Unlock()
		err := l.readInto(segs, int(r.got), h.payload)
		l.mu.Lock()
		l.rxBusy = false
		l.cond.Broadcast()
		if err != nil || l.term {
			l.mu.Unlock()
			if err != nil {
				return l.streamEnded(err)
			}
			return false
		}
	}
	l.mu.Unlock()
	if err := l.dec.end(); err != nil {
		return l.violated(err)
	}
	l.mu.Lock()
	if l.term {
		l.mu.Unlock()
		return false
	}
	l.recs[i].got += uint64(h.payload)
	if !h.last {
		l.mu.Unlock()
		return true
	}
	if l.recs[i].got != r.n {
		l.mu.Unlock()
		return l.violated(violation(layerDDP, etypeTagged, codeTBounds, "RDMA Read Response of %d bytes for a READ of %d", l.recs[i].got, r.n))
	}
	// Every message before the READ was placed and delivered: they and
	// the READ complete.
	for j := l.rh; j <= i; j++ {
		if m := l.recs[j].m; m != nil {
			l.completions = append(l.completions, m)
		}
		l.recs[j] = record{}
	}
	l.rh = i + 1
	if l.rh == len(l.recs) {
		l.recs, l.rh = l.recs[:0], 0
	}
	l.mu.Unlock()
	for k, m := range l.completions {
		l.ep.Complete(m, nil)
		l.completions[k] = nil
	}
	l.completions = l.completions[:0]
	return true
}

// readInto reads n payload bytes into segs from offset off.
func (l *link) readInto(segs [][]byte, off, n int) error {
	for _, s := range segs {
		if n == 0 {
			break
		}
		if off >= len(s) {
			off -= len(s)
			continue
		}
		b := s[off:]
		off = 0
		if len(b) > n {
			b = b[:n]
		}
		if err := l.dec.readFull(b); err != nil {
			return err
		}
		n -= len(b)
	}
	return nil
}

func (l *link) onWrite(h *header) bool {
	if !(l.wOpen && h.stag == l.wKey && h.to == l.wAddr+l.wLen) {
		l.wOpen, l.wKey, l.wAddr, l.wLen = true, h.stag, h.to, 0
	}
	l.wDone = false
	l.pl.reset(h, false)
	l.tm = verbs.Message{Op: verbs.OpWrite, RKey: mreg.Key(h.stag), RAddr: h.to, Len: h.payload, Payload: &l.pl}
	err := l.pl.begin(h)
	if err == nil {
		err = l.ep.Deliver(&l.tm)
	}
	if err == nil {
		err = l.pl.finish()
	}
	l.tm = verbs.Message{}
	if err != nil {
		return l.refused(err, &l.dec.h, nil)
	}
	l.wLen += uint64(h.payload)
	if h.last {
		l.wOpen, l.wDone = false, true
	}
	return true
}

func (l *link) onSend(h *header) bool {
	if err := l.checkMSN(h); err != nil {
		return l.violated(err)
	}
	l.wOpen, l.wDone = false, false
	op, imm := verbs.OpSend, uint32(0)
	if l.immPending {
		op, imm = verbs.OpSendWithImm, l.immVal
		l.immPending = false
	}
	n := h.payload
	if !h.last {
		n = -1 // the length is known at the L bit only: Deliver reads to io.EOF
	}
	l.pl.reset(h, true)
	l.tm = verbs.Message{Op: op, Imm: imm, Len: n, Payload: &l.pl}
	err := l.pl.begin(h)
	if err == nil {
		err = l.deliverHeld()
	}
	if err == nil {
		err = l.pl.finish()
	}
	l.tm = verbs.Message{}
	if err != nil {
		return l.refused(err, &l.dec.h, nil)
	}
	l.expMSN[qnSend]++
	return true
}

func (l *link) onImm(h *header) bool {
	if err := l.checkMSN(h); err != nil {
		return l.violated(err)
	}
	b, err := l.readCtl(h, immLen)
	if err != nil {
		return l.violated(err)
	}
	l.expMSN[qnSend]++
	imm, flag := binary.BigEndian.Uint32(b), binary.BigEndian.Uint32(b[4:])
	if flag == immNextSend {
		l.immPending, l.immVal = true, imm
		l.wOpen, l.wDone = false, false
		return true
	}
	if !l.wDone {
		return l.violated(violation(layerRDMAP, etypeRemoteOperation, codeUnexpectedOp, "Immediate Data message with no RDMA Write before it"))
	}
	l.wOpen, l.wDone = false, false
	// The WRITE's bytes are in place: Deliver checks the range again and
	// consumes a RECV, which completes with imm and the WRITE's length.
	l.tm = verbs.Message{Op: verbs.OpWriteWithImm, Imm: imm, RKey: mreg.Key(l.wKey), RAddr: l.wAddr, Len: int(l.wLen), Payload: placed{}}
	err = l.deliverHeld()
	l.tm = verbs.Message{}
	if err != nil {
		return l.refused(err, h, nil)
	}
	return true
}

// placed is the Payload of the notification of an RDMA WRITE with
// immediate data: the bytes were placed by the WRITE's segments, so
// reading leaves them as they are.
type placed struct{}

func (placed) Read(p []byte) (int, error) { return len(p), nil }

// deliverHeld delivers l.tm, holding it while the target has no RECV and
// the peer's policy is RNRWait: the receiver reads nothing more (TCP's
// flow control holds the peer) until a RECV is posted (RecvPosted), the
// link ends, or the peer closes its side.
func (l *link) deliverHeld() error {
	for {
		err := l.ep.Deliver(&l.tm)
		if !errors.Is(err, verbs.ErrNoRecv) || l.peerRNR != verbs.RNRWait {
			return err
		}
		t := time.NewTicker(holdCheck)
		held := true
		for held {
			select {
			case <-l.recvPosted:
				held = false
			case <-l.termC:
				t.Stop()
				return errHeldEnd
			case <-t.C:
				if peerClosed(l.fd) {
					t.Stop()
					return errPeerGone
				}
			}
		}
		t.Stop()
	}
}

var (
	errHeldEnd  = errors.New("tcp: connection ended while a message waited for a RECV")
	errPeerGone = errors.New("tcp: the peer closed the connection")
)

// payload is the Payload of a SEND or RDMA WRITE segment handed to
// Deliver: it reads the message's bytes from the socket into the memory
// Deliver gives it, checks the CRC of each FPDU before it hands over the
// FPDU's last bytes (so that a RECV never completes with bytes whose CRC
// failed), and follows a SEND into its next segments, checking that each
// continues the message (same MSN, the next message offset).
type payload struct {
	l     *link
	multi bool   // an untagged message, possibly of several segments
	op    uint8  // its opcode
	msn   uint32 // its MSN
	mo    uint32 // offset of the next byte
	ended bool   // the message's last FPDU has been checked
	err   error
}

func (p *payload) reset(h *header, multi bool) {
	*p = payload{l: p.l, multi: multi, op: h.op, msn: h.msn}
}

// begin checks a payload-less FPDU before Deliver sees it.
func (p *payload) begin(h *header) error {
	if h.payload == 0 && (h.last || !p.multi) {
		p.ended = true
		return p.l.dec.end()
	}
	return nil
}

func (p *payload) Read(b []byte) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	// b is memory of the application's (a RECV's buffer, a WRITE's target
	// region): Terminate waits while it is read into and checked (rxBusy),
	// so that once the queue pair is gone its owner can take the memory
	// back, and nothing is read into it after Terminate.
	l := p.l
	l.mu.Lock()
	if l.term {
		l.mu.Unlock()
		p.err = fmt.Errorf("payload read after Terminate: %w", os.ErrDeadlineExceeded)
		return 0, p.err
	}
	l.rxBusy = true
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.rxBusy = false
		l.cond.Broadcast()
		l.mu.Unlock()
	}()
	d := &l.dec
	for d.left == 0 {
		if p.ended {
			return 0, io.EOF
		}
		if err := p.next(); err != nil {
			p.err = err
			return 0, err
		}
	}
	n, err := d.read(b)
	p.mo += uint32(n)
	if err != nil {
		p.err = err
		return 0, err
	}
	if d.left == 0 && (d.h.last || !p.multi) && len(b) == n {
		// The last bytes the caller asked for: check the CRC before
		// handing them over.
		if err := d.end(); err != nil {
			p.err = err
			return 0, err
		}
		p.ended = true
	}
	return n, nil
}

// next ends the current FPDU and, if the message goes on, reads the next
// one's header.
func (p *payload) next() error {
	d := &p.l.dec
	if err := d.end(); err != nil {
		return err
	}
	if d.h.last || !p.multi {
		p.ended = true
		return nil
	}
	h, err := d.next()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	switch {
	case h.tagged || h.op != p.op:
		return violation(layerRDMAP, etypeRemoteOperation, codeUnexpectedOp, "opcode %d inside a message of opcode %d", h.op, p.op)
	case h.msn != p.msn:
		return violation(layerDDP, etypeUntagged, codeUBadMSN, "MSN %d inside message %d", h.msn, p.msn)
	case h.mo != p.mo:
		return violation(layerDDP, etypeUntagged, codeUBadMO, "message offset %d, want %d", h.mo, p.mo)
	case uint64(p.mo)+uint64(h.payload) > verbs.MaxMessage:
		return violation(layerDDP, etypeUntagged, codeUTooLong, "message longer than %d bytes", verbs.MaxMessage)
	}
	if h.payload == 0 && h.last {
		p.ended = true
		return d.end()
	}
	return nil
}

// finish ends a message Deliver accepted: it reads what Deliver left (a
// message that ended exactly at a RECV's end, say) and checks it.
func (p *payload) finish() error {
	if p.err != nil {
		return p.err
	}
	for !p.ended {
		if err := p.l.dec.discard(); err != nil {
			return err
		}
		if err := p.next(); err != nil {
			return err
		}
	}
	return nil
}

func (l *link) onTerminate(h *header) bool {
	var t termInfo
	ok := false
	if h.payload >= termCtlLen && h.payload <= maxTermLen && h.last {
		b := l.ctl[:h.payload]
		if err := l.dec.readFull(b); err == nil && l.dec.end() == nil {
			var perr error
			t, perr = parseTerm(b)
			ok = perr == nil
		}
	}
	l.peerTerminated(&t, ok)
	return false
}

// peerTerminated acts on the peer's Terminate: the message it names (if
// any) fails with the matching error, every message before it completes
// (the peer took them in order), and the endpoint learns the end.
func (l *link) peerTerminated(t *termInfo, ok bool) {
	err := errOfTerm(t)
	l.mu.Lock()
	var off *verbs.Message
	if ok && err != nil && !l.term {
		if i := l.findLocked(t); i >= 0 {
			for j := l.rh; j < i; j++ {
				r := &l.recs[j]
				if r.m != nil && (r.kind != recRead || r.got == r.n) {
					l.completions = append(l.completions, r.m)
				}
			}
			off = l.recs[i].m
			l.rh = i + 1
		}
	}
	l.peerEnded = true
	l.mu.Unlock()
	for k, m := range l.completions {
		l.ep.Complete(m, nil)
		l.completions[k] = nil
	}
	l.completions = l.completions[:0]
	what := describeTerm(t, ok)
	if off != nil {
		l.ep.Complete(off, fmt.Errorf("tcp: refused by the peer (%s): %w", what, err))
	}
	l.ep.Terminated(fmt.Errorf("%w: the peer sent a Terminate (%s)", verbs.ErrTerminated, what))
}

// findLocked returns the index of the record of the message whose header
// the Terminate copies, or -1.
func (l *link) findLocked(t *termInfo) int {
	if t.hdr == nil {
		return -1
	}
	ctl := binary.BigEndian.Uint16(t.hdr)
	if ctl&ctlTagged != 0 {
		if ctl&ctlOpcode != opWrite {
			return -1
		}
		stag, to := binary.BigEndian.Uint32(t.hdr[2:]), binary.BigEndian.Uint64(t.hdr[6:])
		for i := l.rh; i < len(l.recs); i++ {
			r := &l.recs[i]
			if r.kind == recWrite && r.stag == stag && to-r.to <= r.n {
				return i
			}
		}
		return -1
	}
	qn, msn := binary.BigEndian.Uint32(t.hdr[6:]), binary.BigEndian.Uint32(t.hdr[10:])
	for i := l.rh; i < len(l.recs); i++ {
		r := &l.recs[i]
		switch {
		case qn == qnSend && r.hasMSN && msn-r.msnLo <= r.msnHi-r.msnLo:
			return i
		case qn == qnRead && (r.kind == recRead || r.kind == recFence) && r.rmsn == msn:
			return i
		}
	}
	return -1
}

// refused ends the connection because the target refused a message
// (Deliver's error) or the peer broke a rule while sending it; h is the
// offending segment's header, rr a READ's request. A failure of the
// stream itself is no refusal: the connection is just over.
func (l *link) refused(err error, h *header, rr *readRequest) bool {
	var we *wireError
	t := termInfo{}
	switch {
	case errors.As(err, &we):
		t.layer, t.etype, t.code = we.layer, we.etype, we.code
	case errors.Is(err, mreg.ErrInvalidKey), errors.Is(err, mreg.ErrBounds), errors.Is(err, mreg.ErrAccess):
		t.layer, t.etype, t.code = protectionCode(err, h, rr)
	case errors.Is(err, verbs.ErrNoRecv):
		t.layer, t.etype, t.code = layerDDP, etypeUntagged, codeUNoBuffer
	case errors.Is(err, verbs.ErrTooLong):
		t.layer, t.etype, t.code = layerDDP, etypeUntagged, codeUTooLong
	case errors.Is(err, verbs.ErrRemoteOperation):
		t.layer, t.etype, t.code = layerRDMAP, etypeRemoteOperation, codeCatastrophic
	case errors.Is(err, verbs.ErrInvalid):
		t.layer, t.etype, t.code = layerRDMAP, etypeRemoteOperation, codeUnexpectedOp
	default:
		return l.streamEnded(err)
	}
	if h != nil && h.raw != nil {
		t.segLen = uint16(h.ulpdu)
		t.hdr = t.hdrBuf[:copy(t.hdrBuf[:], h.raw)]
	}
	if rr != nil {
		t.rdma = rr.put(t.rdmaBuf[:])
	}
	l.mu.Lock()
	l.rxTerm = &t
	l.termErr = !l.peerEnded
	l.mu.Unlock()
	// Deliver moved the queue pair to Error already, but for a SEND that
	// met no RECV (ErrNoRecv) and a violation found before Deliver.
	l.ep.Terminated(fmt.Errorf("%w: %w", verbs.ErrTerminated, err))
	return false
}

// violated ends the connection because the peer broke a rule.
func (l *link) violated(err error) bool {
	var we *wireError
	if !errors.As(err, &we) {
		return l.streamEnded(err)
	}
	return l.refused(err, &l.dec.h, nil)
}

// protectionCode returns the Terminate of a failed check of a one-sided
// operation: DDP tagged-buffer errors for an RDMA WRITE's placement,
// RDMAP remote-protection errors for an RDMA READ's source, and the RDMAP
// access-rights error for both (DDP has none).
func protectionCode(err error, h *header, rr *readRequest) (layer, etype, code uint8) {
	var to, n uint64
	if rr != nil {
		to, n = rr.srcTO, uint64(rr.size)
	} else if h != nil {
		to, n = h.to, uint64(h.payload)
	}
	wraps := to+n < to
	if errors.Is(err, mreg.ErrAccess) {
		return layerRDMAP, etypeRemoteProtection, codeAccess
	}
	if rr == nil {
		switch {
		case errors.Is(err, mreg.ErrInvalidKey):
			return layerDDP, etypeTagged, codeTInvalidSTag
		case wraps:
			return layerDDP, etypeTagged, codeTTOWrap
		}
		return layerDDP, etypeTagged, codeTBounds
	}
	switch {
	case errors.Is(err, mreg.ErrInvalidKey):
		return layerRDMAP, etypeRemoteProtection, codeInvalidSTag
	case wraps:
		return layerRDMAP, etypeRemoteProtection, codeTOWrap
	}
	return layerRDMAP, etypeRemoteProtection, codeBounds
}

// errOfTerm returns the error a Terminate means for the message it names,
// as Endpoint.Deliver would have returned it, or nil for a Terminate that
// blames no message.
func errOfTerm(t *termInfo) error {
	switch t.layer {
	case layerRDMAP:
		switch t.etype {
		case etypeRemoteProtection:
			switch t.code {
			case codeInvalidSTag, codeNotAssoc:
				return mreg.ErrInvalidKey
			case codeBounds, codeTOWrap:
				return mreg.ErrBounds
			case codeAccess:
				return mreg.ErrAccess
			}
		case etypeRemoteOperation:
			if t.code == codeUnexpectedOp || t.code == codeBadRDMAPVersion {
				return verbs.ErrInvalid
			}
			return verbs.ErrRemoteOperation
		}
	case layerDDP:
		switch t.etype {
		case etypeTagged:
			switch t.code {
			case codeTInvalidSTag, codeTNotAssoc:
				return mreg.ErrInvalidKey
			case codeTBounds, codeTTOWrap:
				return mreg.ErrBounds
			}
			return verbs.ErrInvalid
		case etypeUntagged:
			switch t.code {
			case codeUNoBuffer:
				return verbs.ErrNoRecv
			case codeUTooLong:
				return verbs.ErrTooLong
			}
			return verbs.ErrInvalid
		}
	}
	return nil
}

// describeTerm names a Terminate for error messages.
func describeTerm(t *termInfo, ok bool) string {
	if !ok {
		return "malformed"
	}
	layers := [...]string{"RDMAP", "DDP", "LLP"}
	layer := fmt.Sprintf("layer %d", t.layer)
	if int(t.layer) < len(layers) {
		layer = layers[t.layer]
	}
	return fmt.Sprintf("%s error type %d, code %#x", layer, t.etype, t.code)
}

// streamEnded handles the end of the byte stream: the peer closed it (at
// an FPDU boundary: a plain disconnect), it broke, or this side ended the
// link and the receiver stops.
func (l *link) streamEnded(err error) bool {
	var we *wireError
	if errors.As(err, &we) {
		// A violation found outside a message (a bad CRC, say).
		return l.refused(err, &l.dec.h, nil)
	}
	l.mu.Lock()
	if l.term {
		l.mu.Unlock()
		return false
	}
	l.peerEnded = true
	l.mu.Unlock()
	switch {
	case err == io.EOF, errors.Is(err, errPeerGone):
		l.ep.Terminated(verbs.ErrDisconnected)
	case errors.Is(err, syscall.ECONNRESET):
		l.ep.Terminated(fmt.Errorf("tcp: connection reset: %w", syscall.ECONNRESET))
	default:
		l.ep.Terminated(fmt.Errorf("tcp: connection lost: %w (%w)", syscall.ECONNRESET, err))
	}
	return false
}

// finishRx closes the connection once the receiver stops: a Terminate if
// this side ended it with an error, the writer's last bytes and FIN, then
// the peer's end (read and dropped, so that closing does not reset the
// connection), within the linger time.
func (l *link) finishRx() {
	l.mu.Lock()
	if !l.term {
		// The endpoint is gone without a Terminate (it was never set
		// up): end the link here.
		l.term = true
		l.detachLocked()
		close(l.termC)
	}
	if l.termErr && !l.peerEnded && l.txErr == nil {
		t := l.rxTerm
		if t == nil {
			t = &termInfo{layer: layerRDMAP, etype: etypeLocalCatastrophic, code: codeUnspecified}
		}
		it := l.item(itemCtl)
		b := appendTerm(it.hdr[2+untaggedHdr:2+untaggedHdr], t)
		putUntagged(it.hdr[:], opTerminate, true, qnTerm, 1, 0, len(b))
		l.pushCtlItem(it, 2+untaggedHdr+len(b))
	}
	l.gated = false
	l.finish = true
	l.flushLocked()
	l.cond.Broadcast()
	linger := time.Now().Add(l.p.opts.linger)
	l.c.SetWriteDeadline(linger)
	l.c.SetReadDeadline(linger)
	l.mu.Unlock()
	<-l.writerDone
	var scratch [4096]byte
	for {
		if _, err := l.c.Read(scratch[:]); err != nil {
			break
		}
	}
	l.c.Close()
	l.mu.Lock()
	for l.qh < len(l.q) {
		l.retire(l.q[l.qh])
		l.q[l.qh] = nil
		l.qh++
	}
	l.q, l.qh = l.q[:0], 0
	l.mu.Unlock()
	l.p.removeLink(l)
	close(l.done)
}

// abort makes the link's goroutines give up waiting for the peer.
func (l *link) abort() {
	l.c.SetDeadline(time.Unix(1, 0))
	l.Terminate(verbs.ErrDisconnected)
}
