package tcp

// Receiving: the receiver goroutine (run), which reads FPDUs and acts on
// each: the peer's READ requests and fences, the responses to this side's
// READs and fences (which complete its messages), and the peer's WRITEs,
// SENDs and immediate data, handed to Endpoint.Deliver. The receiver
// goroutine alone touches the link's rx state.

import (
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"time"

	"github.com/exsgo/exs/internal/spin"
	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// RecvPosted makes the receiver deliver again the SEND it holds for want
// of a RECV.
func (l *link) RecvPosted() {
	select {
	case l.recvPosted <- struct{}{}:
	default:
	}
}

// run reads FPDUs and acts on them until the connection ends, then closes
// it (finish).
func (l *link) run() {
	defer l.finishRx()
	defer spin.Watch(l.input)()
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
			l.wcond.Signal()
			l.mu.Unlock()
		}
		if !l.frame(h) {
			return
		}
	}
}

// toGrace reports whether err is the interruption of Terminate, between
// FPDUs of a plain disconnect: the receiver then reads on, answering the
// fences that came after delivered messages, until the socket holds
// nothing more or something that is not a fence (graceReader).
func (l *link) toGrace(err error) bool {
	if l.grace || !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	l.mu.Lock()
	ok := l.term && !l.termErr && !l.peerEnded
	if ok {
		l.grace = true
		l.dec.r = graceReader{l}
		if !l.aborted {
			// The wait for a fence still on its way (graceReader);
			// abort and finishRx set their own deadline later.
			l.c.SetReadDeadline(time.Now().Add(l.p.opts.linger))
		}
		l.flushLocked()
	}
	l.mu.Unlock()
	return ok
}

// graceReader is the receiver's reader after Terminate. While a message
// delivered here has no answered fence after it (owed), it waits for the
// fence, at most the linger time: the sender sends one behind every
// message it must complete (after its unsignaled ones, a moment later),
// but its bytes may still be on their way when the application here,
// seeing the message, already disconnected; without the answer the
// sender would fail a message its target had, and a peer that received
// everything and closed would fail the sender's last sends. Otherwise it
// reads only what the socket holds now, so that the end of the stream
// goes at once.
type graceReader struct{ l *link }

func (g graceReader) Read(p []byte) (int, error) {
	if g.l.owed {
		return g.l.sock.Read(p)
	}
	return readNB(g.l.fd).Read(p)
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
// the socket holds (sockReader calls it before it waits). After a SEND
// that consumed a RECV, it first gives the application a moment to
// answer (awaitReplyLocked): the answers to the peer's fences then go
// with that message, in one write, instead of in a write of their own
// that the peer's receiver must wake for.
func (l *link) idle() {
	l.mu.Lock()
	if l.ctlHeld && l.replyLikely {
		l.awaitReplyLocked()
	}
	l.replyLikely = false
	if l.ctlHeld {
		l.ctlHeld = false
		l.flushLocked()
	}
	l.mu.Unlock()
}

// replyWait is how long, at most, the receiver waits at idle for the
// application to send after a SEND consumed one of its RECVs, before it
// writes the fence answers it holds; replySkip is how many such idles it
// answers at once after a wait in which nothing was sent (the application
// does not answer its messages at once: a stream one way).
const (
	replyWait = 20 * time.Microsecond
	replySkip = 16
)

// awaitReplyLocked waits, yielding the processor, until a Transmit wrote
// the held control FPDUs (the queue drained: ctlHeld is cleared), at most
// replyWait and not once the socket has input, unless recent waits were
// in vain. A goroutine woken by the SEND's completion often runs on this
// processor: yielding lets it run now. It is no spin.Spin, which ends
// while another watched socket's input waits for its parked reader, or
// after 5 us while the CPUs are contended: with spins that end at the
// first sight of such input, the answers went alone again in most round
// trips between two links of one process. l.mu is held; it is released
// while yielding.
func (l *link) awaitReplyLocked() {
	if l.replySkip > 0 {
		l.replySkip--
		return
	}
	start := time.Now()
	for k := 1; l.ctlHeld && !l.term && l.txErr == nil; k++ {
		l.mu.Unlock()
		runtime.Gosched()
		stop := k%inputEvery == 0 && (time.Since(start) >= replyWait || hasInput(l.fd))
		l.mu.Lock()
		if stop {
			break
		}
	}
	if l.ctlHeld {
		l.replySkip = replySkip
	}
}

// compactRecs is how many completed records, at least, the records of the
// messages in flight keep before the live ones move to the front (when
// the completed ones are at least half).
const compactRecs = 32

// inputEvery is how many yields of awaitReplyLocked pass between two looks
// at the clock and the socket.
const inputEvery = 8

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
	if !h.moLate && h.mo != 0 {
		return violation(layerDDP, etypeUntagged, codeUBadMO, "message offset %d in a message's first segment", h.mo)
	}
	return nil // a late MO is checked against 0 when it is read
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
			l.owed = false
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
	// region free to deregister. It confirms the messages before it.
	l.owed = false
	l.mu.Lock()
	l.flushLocked()
	l.mu.Unlock()
	return true
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
	switch {
	case l.rh == len(l.recs):
		l.recs, l.rh = l.recs[:0], 0
	case l.rh >= compactRecs && 2*l.rh >= len(l.recs):
		// Messages keep coming while earlier ones complete (unsignaled
		// ones, confirmed by a later fence, are always followed by the
		// next): the live records move to the front, or the slice would
		// grow with every message the link carries.
		n := copy(l.recs, l.recs[l.rh:])
		clear(l.recs[n:])
		l.recs, l.rh = l.recs[:n], 0
	}
	l.mu.Unlock()
	for k, m := range l.completions {
		l.ep.Complete(m, nil)
		l.completions[k] = nil
	}
	l.completions = l.completions[:0]
	return true
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
	l.owed = true
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
	l.replyLikely, l.owed = true, true
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
	l.replyLikely, l.owed = true, true
	return true
}

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
					if err := sockError(l.fd); err != nil {
						return err // the connection failed (ETIMEDOUT, say)
					}
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
