package tcp

// Sending: Transmit, the FPDUs of a message queued under the link's mu,
// the non-blocking writes that drain the queue, and the writer goroutine
// that waits for room in the socket.

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/exsgo/exs/verbs"
)

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
	// An unsignaled SEND or WRITE goes without a fence of its own: a
	// later one covers it (lazyFenceLocked).
	lazy := m.Unconfirmed()
	if !lazy {
		// A fence not yet written at the queue's tail goes: the one
		// after this message (or its own response, for a READ) covers
		// the same.
		l.dropFenceLocked()
	}
	start := len(l.q)
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
	switch {
	case m.Op == verbs.OpRead:
		l.lazy = false // its response confirms what went before
	case lazy:
		l.lazyFenceLocked()
	default:
		l.pushFenceLocked(0)
	}
	if l.crc {
		l.sumOwnLocked(start)
	}
	l.flushLocked()
	return false, nil
}

// sumOwnLocked computes the CRCs of the FPDUs Transmit queued from
// l.q[start] on outside mu, while the goroutine writing (if any, or the
// writer goroutine once the socket has room) writes the FPDUs before
// them: it stops before an FPDU whose CRC is being computed (summing).
// Its scratch, l.own, is Transmit's alone (verbs calls Transmit from one
// goroutine at a time). l.mu is held; it is released meanwhile, and
// Terminate waits for it (waitWriteLocked).
func (l *link) sumOwnLocked(start int) {
	own := l.own[:0]
	for _, it := range l.q[start:] {
		if it.sumLater {
			it.summing = true
			own = append(own, it)
		}
	}
	if len(own) == 0 {
		return
	}
	l.summers++
	l.mu.Unlock()
	for _, it := range own {
		it.sum()
	}
	l.mu.Lock()
	for _, it := range own {
		it.summing = false
	}
	clear(own)
	l.own = own[:0]
	l.summers--
	if l.wwait {
		l.wwait = false
		l.cond.Broadcast()
	}
}

// dropFenceLocked takes back the fence at the queue's tail if none of it
// was written: its record is the last, its MSN the last taken.
func (l *link) dropFenceLocked() {
	if l.qh == len(l.q) {
		return
	}
	it := l.q[len(l.q)-1]
	if !it.fence || it.started || len(l.q)-1 < l.wEnd {
		return
	}
	l.q[len(l.q)-1] = nil
	l.q = l.q[:len(l.q)-1]
	l.retire(it)
	l.recs[len(l.recs)-1] = record{}
	l.recs = l.recs[:len(l.recs)-1]
	l.readMSN--
}

// lazyFenceLocked records that a message went without a fence and, if
// none is due yet, arms the timer that sends one (fenceIdle) after
// lazyConfirm.
func (l *link) lazyFenceLocked() {
	l.lazy = true
	if l.lazyArmed {
		return
	}
	l.lazyArmed = true
	if l.lazyTimer == nil {
		l.lazyTimer = time.AfterFunc(l.p.opts.lazy, l.fenceIdle)
	} else {
		l.lazyTimer.Reset(l.p.opts.lazy)
	}
}

// fenceIdle sends a fence for the messages that went without one, if no
// later fence or READ covered them meanwhile.
func (l *link) fenceIdle() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lazyArmed = false
	if !l.lazy || l.term {
		return
	}
	l.pushFenceLocked(0)
	l.flushLocked()
}

// pushFenceLocked queues a zero-length READ of no memory (params is its
// Data Source Tagged Offset: zero for a fence, the parameters for the
// ready-to-receive message) and records it.
func (l *link) pushFenceLocked(params uint64) {
	l.lazy = false
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
		l.ctlAddedLocked()
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
	if n > l.pay[1] {
		l.followMSSLocked()
	}
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
		for k := chunk; k > 0; {
			b := segs[si][so:]
			if len(b) > k {
				b = b[:k]
			}
			if len(b) > 0 {
				it.vec = append(it.vec, b)
			}
			k -= len(b)
			so += len(b)
			if so == len(segs[si]) {
				si, so = si+1, 0
			}
		}
		// The CRC, if CRCs are on, is computed outside mu: by Transmit
		// (sumOwnLocked), else by the goroutine that writes the FPDU
		// (flushLocked).
		it.vec = append(it.vec, trailer(it.tail[:], 0, len(h)-2+chunk, false))
		it.sumLater, it.ulpdu = l.crc, len(h)-2+chunk
		it.iov = it.vec
		l.q = append(l.q, it)
		if kind == itemCtl {
			l.ctlAddedLocked()
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
// One goroutine writes at a time (writing): it releases mu during each
// writev of unlockWrite bytes or more, so that the receiver completing messages, or a Transmit
// queueing more, does not wait behind a write of up to maxWrite bytes; a
// flushLocked called meanwhile returns at once, its FPDUs written by the
// goroutine writing, which goes on while the queue holds any. The items
// of the write in flight (l.q[l.qh:l.wEnd]) are neither dropped nor
// detached until it returns (dropFenceLocked, waitWriteLocked).
func (l *link) flushLocked() {
	if l.writing {
		return
	}
	l.writing = true
	defer l.wroteLocked()
	for l.qh < len(l.q) && !l.gated && l.txErr == nil && !l.closing && !l.wwait {
		bufs := l.gather[:0]
		size := 0
		i := l.qh
		for ; i < len(l.q) && !l.q[i].summing && len(bufs)+len(l.q[i].iov) <= maxIov && size < maxWrite; i++ {
			it := l.q[i]
			for _, b := range it.iov {
				size += len(b)
			}
			if it.region != nil && len(it.iov) > 1 {
				// The last FPDU of a READ response: its trailer goes
				// in a write of its own, after the region's reference
				// is dropped, so that the READ cannot complete (and
				// its requester deregister the region) while this
				// side still holds it.
				bufs = append(bufs, it.iov[:len(it.iov)-1]...)
				i++
				break
			}
			bufs = append(bufs, it.iov...)
		}
		if i == l.qh {
			break // its CRC is being computed: its Transmit writes it
		}
		l.gather = bufs
		l.wEnd = i
		inflight := l.q[l.qh:i]
		unlock := size >= unlockWrite
		if unlock {
			l.mu.Unlock()
		}
		for _, it := range inflight {
			if it.sumLater {
				it.sum()
			}
		}
		n, err := l.iov.writev(l.fd, bufs)
		if unlock {
			l.mu.Lock()
		}
		clear(bufs)
		if err == errWouldBlock {
			l.wEnd = l.qh
			if !l.blocked {
				l.blocked = true
				l.wcond.Signal()
			}
			return
		}
		if err != nil {
			l.wEnd = l.qh
			l.txErr = err
			l.cond.Broadcast()
			l.wcond.Signal()
			return
		}
		l.advanceLocked(n)
		l.wEnd = l.qh
	}
	l.blocked = false
}

// sum computes the CRC of an FPDU queued by pushData and puts it in its
// trailer. Its goroutine alone writes the FPDU (flushLocked's writing),
// before any byte of it is written.
func (it *txItem) sum() {
	var s uint32
	for _, b := range it.vec[:len(it.vec)-1] {
		s = crcUpdate(s, b)
	}
	trailer(it.tail[:], s, it.ulpdu, true)
	it.sumLater = false
}

// unlockWrite is the size from which flushLocked releases l.mu during a
// writev: a shorter one takes less time than the release and the wake of
// a goroutine waiting for l.mu (the round trip of small messages, whose
// receiver waits for a reply's Transmit to write its held answers).
const unlockWrite = 64 << 10

// wroteLocked ends flushLocked's turn at writing.
func (l *link) wroteLocked() {
	l.writing = false
	l.wEnd = l.qh
	if l.blocked || l.finish {
		l.wcond.Signal() // the writer may wait for this write's end
	}
	if l.wwait {
		l.wwait = false
		l.cond.Broadcast()
	}
}

// waitWriteLocked waits until no goroutine is in a writev of this link's
// queue (a non-blocking call: the wait is short) nor computes the CRCs of
// queued FPDUs (sumOwnLocked). l.mu is held.
func (l *link) waitWriteLocked() {
	for l.writing || l.summers > 0 {
		l.wwait = true
		l.cond.Wait()
	}
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
	l.ctlHeld = false
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
		// While another goroutine writes, the writer waits for its end
		// (wroteLocked), not for room: that goroutine's EAGAIN may have
		// come before the room the writer was woken for, which wakes the
		// poller no more.
		for (l.writing || !(l.blocked && !l.gated) && !l.finish) && l.txErr == nil {
			l.wcond.Wait()
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
			if l.writing {
				return true
			}
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

// ctlAddedLocked counts a control FPDU queued. l.mu is held.
func (l *link) ctlAddedLocked() {
	l.ctlQueued++
	l.ctlPeak = max(l.ctlPeak, l.ctlQueued)
}
