package shm

// Receiving: the receiver goroutine (run), its spinning and sleeping, and
// the processing of the records it reads: the outcomes of this side's
// messages, and the peer's requests, handed to Endpoint.Deliver. The
// receiver goroutine alone touches the link's rx state.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/exsgo/exs/internal/spin"
	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// How long one sleep of a receiver on its futex lasts at most: a safety
// net, wake-ups do not depend on it (the tests stretch it to minutes, so
// that a lost wake-up shows as a hang).
var sleepCap = 100 * time.Millisecond

// RecvPosted makes the receiver deliver again the request it holds for
// want of a RECV.
func (l *link) RecvPosted() {
	l.recvPosted.Store(true)
	l.tx.Lock()
	if !l.tx.dead {
		l.me.ringAlways()
	}
	l.tx.Unlock()
}

// run is the receiver: it takes records from the peer's rings and waits
// on its bell when there are none, after spinning for the provider's spin
// time, or, for a queue pair created with verbs.QPConfig.BusyPoll, spins
// until the connection ends. It alone does the receive work.
func (l *link) run() {
	defer l.exit()
	sp := spin.For(l.p.opts.spin)
	if l.busy {
		sp = spin.Spin{} // no spin time and no deadline: never Block
	}
	for !l.stop.Load() {
		if l.poll() {
			sp.Reset()
			continue
		}
		if l.peerGone.Load() {
			l.onPeerGone()
			return
		}
		if sp.Next() == spin.Block {
			l.sleep()
			sp.Reset()
		}
	}
}

// poll does what there is to do and reports whether it did anything.
func (l *link) poll() bool {
	work := l.pumpIfPending()
	if l.rx.respIn.ready() {
		l.processResp()
		work = true
	}
	if l.rx.held && l.recvPosted.Swap(false) {
		l.rx.held = false
	}
	if l.takesReqs() && l.rx.reqIn.ready() {
		l.processReq()
		work = true
	}
	return work
}

// takesReqs reports whether the receiver takes the peer's requests now:
// none is held for want of a RECV, the connection has not failed, and no
// response waits for room in the response ring (emitLocked).
func (l *link) takesReqs() bool { return !l.rx.held && !l.rx.stopped && !l.respPend.Load() }

// sleep blocks on the bell until something may have changed.
func (l *link) sleep() {
	l.me.sleeping.Store(sleepNormal)
	v := l.me.bell.Load()
	if !l.stop.Load() && !l.peerGone.Load() && !l.rx.respIn.ready() &&
		(!l.takesReqs() || !l.rx.reqIn.ready()) &&
		!(l.rx.held && l.recvPosted.Load()) && !l.pumpIfPending() {
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
	l.tx.Lock()
	defer l.tx.Unlock()
	return !l.tx.dead && l.pumpLocked()
}

// fail ends the connection because the peer broke the protocol.
func (l *link) fail(err error) {
	l.rx.stopped = true
	l.ep.Terminated(fmt.Errorf("%w: %w", verbs.ErrTerminated, err))
	l.stop.Store(true)
}

// processResp reads the response ring: outcomes of this side's messages,
// READ data, the peer's TERM.
func (l *link) processResp() {
	defer l.publishIn(&l.rx.respIn)
	for range 256 {
		rec, err := l.rx.respIn.peek()
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
			l.rx.respIn.advance(len(rec))
			l.rx.peerTerm = true
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
		l.rx.respIn.advance(len(rec))
	}
}

// deliverBeforeTerm delivers the requests the peer wrote into the request
// ring before its TERM of a plain disconnect, as long as they need none of
// its memory (a single inline record, as every small SEND is): the peer
// posted them before it went, and verbs lets work in flight at a
// disconnect arrive. A protocol whose last messages are small SENDs (an
// acknowledgement posted just before a close) then has them arrive, rather
// than lost to the order in which this side reads its two rings. It
// delivers them whatever waits for room in the response ring (the peer is
// going), and at most a ring's worth: a peer that goes on writing requests
// after its TERM does not keep the receiver here.
func (l *link) deliverBeforeTerm() {
	defer l.publishIn(&l.rx.reqIn)
	end := l.rx.reqIn.head + l.rx.reqIn.r.size
	for !l.rx.held && !l.rx.stopped && l.rx.reqIn.head < end {
		rec, err := l.rx.reqIn.peek()
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
	l.tx.Lock()
	if l.tx.term {
		l.tx.Unlock()
		return nil
	}
	if int32(l.tx.nextID-1-id) < 0 {
		l.tx.Unlock()
		return errCorrupt
	}
	for {
		f, ok := l.tx.inflight.front()
		if !ok || int32(id-f.id) < 0 {
			break
		}
		l.tx.inflight.pop()
		l.rx.acked = append(l.rx.acked, f.m)
	}
	l.tx.Unlock()
	for i, m := range l.rx.acked {
		l.ep.Complete(m, nil)
		l.rx.acked[i] = nil
	}
	l.rx.acked = l.rx.acked[:0]
	return nil
}

// completeOne completes the message in flight with id, which must be the
// oldest.
func (l *link) completeOne(id uint32, err error) error {
	l.tx.Lock()
	if l.tx.term {
		l.tx.Unlock()
		return nil
	}
	f, ok := l.tx.inflight.front()
	if !ok || f.id != id {
		l.tx.Unlock()
		return errCorrupt
	}
	l.tx.inflight.pop()
	l.tx.Unlock()
	l.ep.Complete(f.m, err)
	return nil
}

// readData places bytes of a READ's response into the oldest message in
// flight, the READ, under tx so that Terminate waits for it.
func (l *link) readData(id uint32, b []byte) error {
	l.tx.Lock()
	defer l.tx.Unlock()
	if l.tx.term {
		return nil
	}
	f, ok := l.tx.inflight.front()
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
	defer l.publishIn(&l.rx.reqIn)
	for range 64 {
		if l.respPend.Load() {
			break
		}
		rec, err := l.rx.reqIn.peek()
		if err != nil {
			l.fail(err)
			break
		}
		if rec == nil || !l.deliver(rec) {
			break
		}
	}
	// Under tx: Terminate may have flushed the acknowledgement.
	l.tx.Lock()
	if l.tx.ackPend && !l.tx.dead {
		l.flushAckLocked()
		l.peer.ring()
	}
	l.tx.Unlock()
}

// deliver hands one request to the endpoint and reports whether the
// receiver may go on with the next.
func (l *link) deliver(rec []byte) bool {
	h, err := parseReqHdr(rec)
	if err == nil {
		err = l.rx.rd.reset(h.op, h.mode, rec, h.n, h.nseg)
	}
	if err != nil {
		l.fail(err)
		return false
	}
	op, id := h.op, h.id
	l.rx.tm = verbs.Message{Op: op, Imm: h.imm, RKey: h.rkey, RAddr: h.raddr, Len: h.n}
	if op == verbs.OpRead {
		l.rx.sk.reset(h.mode, id, l.rx.rd.iov, h.n)
		l.rx.tm.Sink = &l.rx.sk
	} else {
		l.rx.tm.Payload = &l.rx.rd
	}
	l.delivering.Store(true)
	err = l.ep.Deliver(&l.rx.tm)
	if err == nil && l.rx.rd.rem > 0 && op != verbs.OpRead {
		err = l.rx.rd.discard()
	}
	l.tx.Lock()
	l.delivering.Store(false)
	defer l.tx.Unlock()
	l.rx.tm = verbs.Message{}
	if l.tx.dead {
		l.rx.stopped = true
		return false
	}
	goOn := true
	switch {
	case err == nil:
		l.rx.reqIn.advance(l.rx.rd.recLen)
		l.tx.ackID, l.tx.ackPend = id, true
	case errors.Is(err, verbs.ErrNoRecv) && l.peerRNR != verbs.RNRFail:
		// Held, and delivered again on RecvPosted; once terminated,
		// never: the peer flushes it.
		l.rx.held = !l.tx.term
		l.rx.stopped = l.tx.term
		goOn = false
	default:
		l.flushAckLocked()
		l.emitLocked(item{kind: recDone, id: id, code: codeOf(err)})
		l.rx.stopped = true
		goOn = false
	}
	if l.tx.termPend {
		l.tx.termPend = false
		l.flushAckLocked()
		l.emitLocked(item{kind: recTerm, code: l.tx.termKind, data: []byte(l.tx.termText)})
	}
	if !goOn {
		l.peer.ring()
	}
	return goOn
}

// reqFields are the header fields of a request record.
type reqFields struct {
	op    verbs.Opcode
	mode  byte // modeInline, modeIov, modeRData (checked by payloadReader.reset)
	nseg  int  // iovecs in the body (modeIov)
	id    uint32
	imm   uint32
	rkey  mreg.Key
	raddr uint64
	n     int // bytes sent, written or read: at most verbs.MaxMessage
}

// parseReqHdr decodes the header of a request record, as peek returned
// it. It returns errCorrupt for a record that is not a request, is
// shorter than the header, or says more than verbs.MaxMessage bytes;
// payloadReader.reset checks the body against the header.
func parseReqHdr(rec []byte) (reqFields, error) {
	if len(rec) < reqHdr || rec[4] != recReq {
		return reqFields{}, errCorrupt
	}
	n := binary.LittleEndian.Uint64(rec[32:])
	if n > verbs.MaxMessage {
		return reqFields{}, errCorrupt
	}
	return reqFields{
		op: verbs.Opcode(rec[5]), mode: rec[6], nseg: int(rec[7]),
		id: binary.LittleEndian.Uint32(rec[8:]), imm: binary.LittleEndian.Uint32(rec[12:]),
		rkey: mreg.Key(binary.LittleEndian.Uint32(rec[16:])), raddr: binary.LittleEndian.Uint64(rec[24:]),
		n: int(n),
	}, nil
}
