package tcp

// The end of a connection: Terminate, the peer's Terminate, the Terminate
// this side sends for a refused message or a violation, the end of the
// stream, and the receiver's exit, which closes the socket.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/exsgo/exs/internal/errno"
	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// Terminate ends the connection. A plain disconnect answers the fences
// the peer sent after messages that were delivered, waiting for them if
// they are still on their way (graceReader), then closes
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
	l.stopWatchLocked()
	if !l.peerEnded && !errors.Is(cause, verbs.ErrDisconnected) {
		l.termErr = true
	}
	lazy := l.lazy
	l.detachLocked()
	if lazy && !l.termErr && !l.peerEnded {
		// Messages went without a fence, and the timer that would have
		// sent one is stopped: the fence goes now, for the peer's
		// receiver, which waits for it before it ends its stream
		// (graceReader), as this side's waits for the peer's.
		l.pushReadLocked(&readRequest{})
		l.q[len(l.q)-1].fence = true
		l.flushLocked()
	}
	for l.rxBusy {
		l.c.SetReadDeadline(time.Unix(1, 0))
		l.cond.Wait()
	}
	// The receiver stops waiting for the peer; if it is between FPDUs it
	// reads on, to answer fences (see run). Under mu, so that finishRx's
	// later deadline is not overwritten, and not once the receiver is in
	// its grace (it got there while this waited for rxBusy): that would
	// end its wait for a fence at once.
	if !l.grace {
		l.c.SetReadDeadline(time.Unix(1, 0))
	}
	close(l.termC)
	l.cond.Broadcast()
	l.mu.Unlock()
}

// detachLocked drops what refers to message memory: the records, and the
// queued FPDUs of messages and READ responses, but for the one being
// written, whose rest is copied so that the stream stays well framed.
func (l *link) detachLocked() {
	l.waitWriteLocked()
	if l.lazyTimer != nil {
		l.lazyTimer.Stop()
	}
	l.lazy = false
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
			l.ctlAddedLocked()
			keep = append(keep, it)
		default:
			l.retire(it)
		}
	}
	l.q, l.qh = keep, 0
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
	if h == &l.dec.h && h.moLate {
		// A SEND refused before its payload was read (no RECV, say):
		// its MO, waited for as any header byte (Terminate's deadline
		// ends the wait), for the Terminate's copy of its header; a
		// wrong one is reported rather than the refusal, as the
		// header's fault.
		l.dec.fillLate()
		before := errors.Is(err, verbs.ErrNoRecv) || errors.Is(err, verbs.ErrTooLong) || errors.Is(err, verbs.ErrRemoteOperation)
		if before && !h.moLate && h.mo != l.dec.wantMO {
			err = violation(layerDDP, etypeUntagged, codeUBadMO, "message offset %d, want %d", h.mo, l.dec.wantMO)
		}
	}
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
	if err == io.EOF || errors.Is(err, errPeerGone) {
		// A connection the kernel aborted reads as ended: its error went
		// to whichever system call came first, a write's perhaps.
		l.waitWriteLocked()
		if errors.Is(l.txErr, syscall.ETIMEDOUT) {
			err = l.txErr
		}
	}
	l.mu.Unlock()
	switch {
	case errors.Is(err, syscall.ETIMEDOUT):
		// The peer timeout (TCP_USER_TIMEOUT, keepalive) or TCP's
		// retransmissions gave up: the peer is gone without a word.
		l.ep.Terminated(fmt.Errorf("%w: tcp: %w%s", verbs.ErrTerminated, errPeerSilent, l.silence()))
	case err == io.EOF, errors.Is(err, errPeerGone):
		l.ep.Terminated(verbs.ErrDisconnected)
	case errors.Is(err, syscall.ECONNRESET):
		l.ep.Terminated(fmt.Errorf("tcp: connection reset: %w", syscall.ECONNRESET))
	default:
		l.ep.Terminated(fmt.Errorf("tcp: connection lost: %w (%w)", syscall.ECONNRESET, err))
	}
	return false
}

// errPeerSilent is the cause of a connection the kernel timed out: the
// peer timeout (TCP_USER_TIMEOUT, keepalive) or TCP's retransmissions
// gave up. It matches syscall.ETIMEDOUT.
var errPeerSilent error = errno.NewTimeout("no answer from the peer", syscall.ETIMEDOUT)

// silence says how long the peer was silent.
func (l *link) silence() string {
	if d := l.p.opts.peer; d > 0 {
		return fmt.Sprintf(" for %v", d)
	}
	return " (TCP's retransmissions gave up)"
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
		l.stopWatchLocked()
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
	l.wcond.Signal()
	linger := time.Now().Add(l.p.opts.linger)
	if l.aborted {
		linger = time.Unix(1, 0)
	}
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
	l.mu.Lock()
	l.closing = true
	l.waitWriteLocked()
	l.mu.Unlock()
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

// abort makes the link's goroutines give up waiting for the peer, the
// linger of its end included.
func (l *link) abort() {
	l.mu.Lock()
	l.aborted = true
	l.c.SetDeadline(time.Unix(1, 0))
	l.mu.Unlock()
	l.Terminate(verbs.ErrDisconnected)
}
