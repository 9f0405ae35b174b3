package shm

// Sending: Transmit, the direct path (a one-sided operation done by the
// initiator alone), and the writing of request and response records into
// the rings this side produces, all under the link's tx lock.

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/exsgo/exs/internal/bigcopy"
	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
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
	l.tx.Lock()
	if l.tx.term || l.tx.dead {
		l.tx.Unlock()
		return true, verbs.ErrClosed
	}
	if l.tx.pendReq.empty() && l.p.opts.directMin <= verbs.MaxMessage &&
		(l.tx.inflight.n == 0 && (m.Op == verbs.OpRead || m.Op == verbs.OpWrite) ||
			l.relaxed && m.Op == verbs.OpWrite && l.tx.inflight.oneSided == 0) {
		if done, err := l.directLocked(m, l.tx.inflight.n == 0); done {
			l.tx.Unlock()
			return true, err
		}
	}
	id := l.tx.nextID
	l.tx.nextID++
	l.tx.inflight.push(flight{id: id, m: m})
	it := item{kind: recReq, m: m, id: id}
	if !l.tx.pendReq.empty() || !l.writeReqLocked(&it) {
		l.tx.pendReq.push(it)
		l.stalledLocked()
	}
	l.peer.ring()
	l.tx.Unlock()
	l.st.ringMsgs.Add(1)
	return false, nil
}

// directLocked runs a one-sided operation without the peer's CPU, if it can:
// the check of the peer's published registration, then a plain copy when
// the region lies in a shared-allocator arena mapped here, otherwise (for
// READs and WRITEs of at least directMin bytes, with cross-memory attach)
// one process_vm_writev (or readv). It reports false, having done nothing,
// when the operation is to go through the ring: no path applies, or only
// the plain copy did and the checks failed (the target then reports the
// violation, as for any message through the ring); so it does, with
// nothing done or the bytes to be written again, when alone is false
// (messages are in flight before it) and the operation fails, and when the
// peer has terminated (its TERM ends the connection). It is called with tx
// held, so that Terminate waits for it and no arena is unmapped under it.
func (l *link) directLocked(m *verbs.Message, alone bool) (bool, error) {
	access, write := mreg.RemoteWrite, true
	if m.Op == verbs.OpRead {
		access, write = mreg.RemoteRead, false
	}
	cma := l.cma && (m.Op == verbs.OpRead || m.Len >= l.p.opts.directMin)
	if !cma && len(l.tx.peerArenas) == 0 {
		return false, nil
	}
	l.peer.access.Add(1)
	defer l.peer.access.Add(-1)
	if l.peer.closed.Load() != 0 {
		// The peer terminated: its TERM ends the connection, read after
		// the outcomes it wrote before it, as Endpoint.Terminated asks.
		// Failing here could come first: a peer that refuses a message
		// terminates before it writes the outcome, and the receiver
		// takes the message off inflight (leaving this one alone) before
		// it completes it, so the refused work request was flushed and
		// the queue pair recorded a disconnect.
		return false, nil
	}
	var err error
	if e := &l.theirs[slotOf(m.RKey)]; e.state.Load() != entryLive {
		err = mreg.ErrInvalidKey
	} else {
		ri := verbs.RegionInfo{
			LKey: mreg.Key(e.lkey.Load()), RKey: mreg.Key(e.rkey.Load()),
			Addr: e.addr.Load(), Len: e.n.Load(), Access: mreg.Access(e.access.Load()),
		}
		err = ri.Check(m.RKey, m.RAddr, uint64(m.Len), access)
		if err == nil {
			if span, ok := l.arenaSpanLocked(e, ri, m.RAddr, m.Len); ok {
				// A transfer of bigcopy.Min bytes or more is copied, piece
				// by piece, as runtime.memmove copies one such block, with
				// non-temporal stores, unless it is a WRITE into memory
				// this link wrote moments before, likely in the cache (from
				// the second repeat on: a first write went around it).
				cp := copyFn
				if write && m.Len > 0 {
					cp = l.tx.recent.Copier(uintptr(unsafe.Pointer(&span[0])), int(m.Len))
				} else if m.Len >= bigcopy.Min {
					cp = bigcopy.Copy
				}
				if write {
					for _, s := range m.Segments() {
						span = span[cp(span, s):]
					}
				} else {
					for _, s := range m.Segments() {
						span = span[cp(s, span):]
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
	v := &l.tx.iov
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

// writeReqLocked writes as much of a request as fits, and reports whether all
// of it is written. Called with tx held.
func (l *link) writeReqLocked(it *item) bool {
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
		b := l.tx.reqOut.reserve(reqHdr + body)
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
		l.tx.reqOut.commit(len(b))
		it.started = true
	}
	if it.mode != modeInline {
		return true
	}
	for it.off < m.Len {
		chunk := min(m.Len-it.off, l.maxReq-recHdr)
		room := l.tx.reqOut.room() - recHdr
		if room < chunk && room < 4096 {
			return false
		}
		chunk = min(chunk, room)
		b := l.tx.reqOut.reserve(recHdr + chunk)
		if b == nil {
			return false
		}
		putHdr(b, recFrag)
		copySegs(b[recHdr:], m.Segments(), it.off)
		it.off += chunk
		l.tx.reqOut.commit(len(b))
	}
	return true
}

// writeRespLocked writes a response record (or as much of recRData's bytes as
// fits) and reports whether it is complete. Called with tx held.
func (l *link) writeRespLocked(it *item) bool {
	switch it.kind {
	case recRData:
		for it.off < len(it.data) || !it.started {
			chunk := min(len(it.data)-it.off, l.maxResp-respHdr)
			room := l.tx.respOut.room() - respHdr
			if room < chunk && room < 4096 {
				return false
			}
			chunk = min(chunk, room)
			b := l.tx.respOut.reserve(respHdr + chunk)
			if b == nil {
				return false
			}
			putHdr(b, recRData)
			binary.LittleEndian.PutUint32(b[8:], it.id)
			binary.LittleEndian.PutUint32(b[12:], 0)
			placeCopy(b[respHdr:], it.data[it.off:it.off+chunk])
			it.off += chunk
			it.started = true
			l.tx.respOut.commit(len(b))
		}
		return true
	case recTerm:
		text := it.data[:min(len(it.data), 256)]
		b := l.tx.respOut.reserve(respHdr + len(text))
		if b == nil {
			return false
		}
		putHdr(b, recTerm)
		binary.LittleEndian.PutUint32(b[8:], it.code)
		binary.LittleEndian.PutUint32(b[12:], 0)
		copy(b[respHdr:], text)
		l.tx.respOut.commit(len(b))
		return true
	}
	b := l.tx.respOut.reserve(respHdr)
	if b == nil {
		return false
	}
	putHdr(b, it.kind)
	binary.LittleEndian.PutUint32(b[8:], it.id)
	binary.LittleEndian.PutUint32(b[12:], it.code)
	l.tx.respOut.commit(respHdr)
	return true
}

// emitLocked sends a response record, or queues it behind those waiting.
// While one waits the receiver takes no more requests (respPend), so that
// a peer that does not read its response ring makes this side hold at
// most the answers to one request: an acknowledgement, an outcome, and
// one READ's data (copied here, since the caller's bytes do not outlive
// the call), and the peer's request ring fills up instead.
func (l *link) emitLocked(it item) {
	if l.tx.pendResp.empty() && l.writeRespLocked(&it) {
		return
	}
	if it.kind == recRData {
		// The caller's bytes (a READ's source region) do not outlive
		// the call.
		d := make([]byte, len(it.data)-it.off)
		placeCopy(d, it.data[it.off:])
		it.data, it.off = d, 0
	}
	l.tx.pendResp.push(it)
	l.respPend.Store(true)
	l.stalledLocked()
}

// pumpLocked writes waiting records while there is room and reports
// whether it wrote any.
func (l *link) pumpLocked() bool {
	reqTail, respTail := l.tx.reqOut.tail, l.tx.respOut.tail
	for !l.tx.pendResp.empty() {
		if !l.writeRespLocked(l.tx.pendResp.front()) {
			break
		}
		l.tx.pendResp.pop()
	}
	for !l.tx.pendReq.empty() {
		if !l.writeReqLocked(l.tx.pendReq.front()) {
			break
		}
		l.tx.pendReq.pop()
	}
	progress := l.tx.reqOut.tail != reqTail || l.tx.respOut.tail != respTail
	if l.tx.pendResp.empty() && l.respPend.Swap(false) {
		// The receiver takes requests again: wake it if it went to
		// sleep while it did not (this may run on another goroutine,
		// after the peer made room without ringing this side's bell).
		l.me.ring()
	}
	if l.tx.pendReq.empty() && l.tx.pendResp.empty() {
		l.hasPend.Store(false)
		l.me.wantSpace.Store(0)
	}
	if progress {
		l.peer.ring()
	}
	return progress
}

// copyFn is copy() as a function value.
func copyFn(dst, src []byte) int { return copy(dst, src) }

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

// flushAckLocked sends the pending acknowledgement.
func (l *link) flushAckLocked() {
	if l.tx.ackPend {
		l.tx.ackPend = false
		l.emitLocked(item{kind: recAck, id: l.tx.ackID})
	}
}
