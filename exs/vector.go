package exs

import (
	"fmt"
	"sort"

	"github.com/exsgo/exs/dynproto"
	"github.com/exsgo/exs/verbs"
)

// IOVec is one buffer of a vectored send or recv (SendMsg, RecvMsg): a
// struct iovec with its memory handle. Buf lies inside the memory handle
// MH, or MH is nil and the library registers Buf for that one operation,
// as Send and Recv do with a nil handle. An empty Buf is allowed and
// skipped.
type IOVec struct {
	Buf []byte
	MH  *MHandle
}

// MaxIOV is the most buffers one SendMsg or RecvMsg takes, empty ones
// included.
const MaxIOV = 64

// piece is a non-empty buffer of a vectored operation, with its memory.
type piece struct {
	buf  []byte
	addr uint64
	off  int // offset of its first byte in the operation's bytes
	mh   *MHandle
	mr   *verbs.MR // its registration on the socket's device (nil for a recv's own)
	tmp  bool      // mr was registered for this operation alone
}

// SendMsg posts a send of the bytes of the buffers of iov, in order, as
// one send (exs_sendmsg): on a stream socket they follow each other in the
// stream, and on a seqpacket socket they are one message. Each buffer lies
// inside its own memory handle, which must allow AccessRead, or has none
// (it is then registered for this send alone, at the cost Send describes);
// empty buffers are skipped. iov holds 1 to MaxIOV buffers, of at most
// MaxTransfer bytes in all; on a stream socket at least one must not be
// empty, and on a seqpacket socket a vector of empty buffers sends an empty
// message, as Send of an empty buffer does. flags must be 0.
//
// The bytes are not copied to be sent: each transfer the protocol engine
// chooses (directly into a recv buffer the peer advertised, or into its
// stream buffer) is carried by RDMA WRITEs whose scatter/gather lists
// gather from the buffers it spans, up to 8 entries per WRITE: a direct
// transfer that spans 4 buffers is one WRITE. Buffers that follow each
// other in memory under one handle are one entry. A provider without
// RDMA hardware (in-process, same-host) copies each entry by itself:
// buffers apart cost one copy each, which for large transfers can be
// slower than one copy of the same bytes (Go's memmove streams moves of
// 1 MiB and more past the cache; BenchmarkSendMsgPaired measures it).
//
// The send completes with one EventSendMsg whose N is the total length,
// and fails as Send does. A call that returns an error posted nothing: an
// empty or too long vector, a buffer outside its handle (mreg.ErrBounds) or
// flags other than 0 match ErrInvalid, a handle without the access needed
// ErrAccess. No buffer of iov may be modified until the event is posted;
// iov itself may be reused once SendMsg returns.
func (s *Socket) SendMsg(q *Queue, iov []IOVec, flags Flags, user any) error {
	return s.postVec(opSend, q, iov, flags, user)
}

// RecvMsg posts a recv into the buffers of iov, filled in order, as one
// recv (exs_recvmsg): on a stream socket the bytes that one Recv of their
// total length would take, on a seqpacket socket one message, which fails
// with EMSGSIZE if longer than the buffers in all. Each buffer lies inside
// its own memory handle, which must allow AccessWrite, or has none; empty
// buffers are skipped, and at least one must not be empty. iov holds 1 to
// MaxIOV buffers, of at most MaxTransfer bytes in all. flags may hold
// MsgWaitAll, which waits for every buffer to be full (or the stream to
// end).
//
// What the peer may place directly: an ADVERT names one region of memory.
// A recv into one non-empty buffer is a Recv: advertised, the peer may
// place the bytes directly into it. A stream recv with MsgWaitAll fills
// each buffer in full before the next, so it is taken as one MSG_WAITALL
// recv per buffer, each advertised as a Recv is (buffers without a handle
// are registered for it): the peer may place directly into every one. Any
// other recv into several buffers (without MsgWaitAll, or seqpacket) is
// not advertised: its bytes come through the stream buffer and are copied
// from it into the buffers, which need no registration; a socket in
// ModeDirectOnly has no stream buffer and refuses it (ErrInvalid).
//
// The recv completes with one EventRecvMsg whose N is the total length
// received, and ends as Recv does (EOF, EMSGSIZE, ECONNRESET). A call that
// returns an error posted nothing, for the reasons SendMsg lists. No buffer
// of iov may be read or written until the event is posted; iov itself may
// be reused once RecvMsg returns.
func (s *Socket) RecvMsg(q *Queue, iov []IOVec, flags Flags, user any) error {
	return s.postVec(opRecv, q, iov, flags, user)
}

// postVec checks a vectored send or recv and posts it: as a plain op if at
// most one of its buffers is not empty, with its pieces otherwise.
func (s *Socket) postVec(kind opKind, q *Queue, iov []IOVec, flags Flags, user any) error {
	name := kind.String() + "msg"
	if err := s.checkQueue(q); err != nil {
		return opErr(name, "", err)
	}
	need := AccessRead
	if kind == opRecv {
		need = AccessWrite
	}
	if err := s.checkVec(kind, iov, flags, need); err != nil {
		return opErr(name, "", err)
	}
	o := op{kind: kind, waitAll: flags&MsgWaitAll != 0, q: q, user: user, msg: true}
	nonEmpty := 0
	for i := range iov {
		if len(iov[i].Buf) > 0 {
			nonEmpty++
			o.buf, o.mh = iov[i].Buf, iov[i].MH
		}
	}
	if nonEmpty > 1 {
		// A stream recv with MsgWaitAll fills each buffer in full before
		// the next: the engine takes it as one MSG_WAITALL recv per
		// buffer, each advertised like any recv (but in
		// ModeIndirectOnly, which advertises nothing).
		o.vst.split = kind == opRecv && s.typ == SockStream && o.waitAll && s.cfg.mode != ModeIndirectOnly
		if kind == opRecv && !o.vst.split && s.cfg.mode == ModeDirectOnly {
			return opErr(name, "", fmt.Errorf("%w: a recv into %d buffers needs a stream buffer, which ModeDirectOnly has not", ErrInvalid, nonEmpty))
		}
		o.buf, o.mh = nil, nil
		o.vec = make([]piece, 0, nonEmpty)
		off := 0
		for i := range iov {
			if b := iov[i].Buf; len(b) > 0 {
				o.vec = append(o.vec, piece{buf: b, addr: addrOf(b), off: off, mh: iov[i].MH})
				off += len(b)
			}
		}
	}
	o.addr = addrOf(o.buf)
	return s.postOp(name, o, need)
}

// checkVec checks the arguments of a vectored send or recv.
func (s *Socket) checkVec(kind opKind, iov []IOVec, flags Flags, need Access) error {
	switch {
	case kind == opSend && flags != 0:
		return fmt.Errorf("%w: send flags %#x", ErrInvalid, uint8(flags))
	case kind == opRecv && flags&^MsgWaitAll != 0:
		return fmt.Errorf("%w: recv flags %#x", ErrInvalid, uint8(flags))
	case len(iov) == 0:
		return fmt.Errorf("%w: empty vector", ErrInvalid)
	case len(iov) > MaxIOV:
		return fmt.Errorf("%w: vector of %d buffers, at most %d", ErrInvalid, len(iov), MaxIOV)
	}
	total := 0
	for i := range iov {
		v := &iov[i]
		if v.MH != nil {
			if err := v.MH.check(s.st, v.Buf, need); err != nil {
				return fmt.Errorf("buffer %d: %w", i, err)
			}
		}
		if total += len(v.Buf); total > MaxTransfer {
			return fmt.Errorf("%w: vector of more than %d bytes", ErrInvalid, MaxTransfer)
		}
	}
	if total == 0 && (kind == opRecv || s.typ == SockStream) {
		return fmt.Errorf("%w: vector of %d empty buffers", ErrInvalid, len(iov))
	}
	return nil
}

// takeVecMem takes the memory of o's pieces: it acquires their handles and
// registers those of a send that have none. On failure it has taken
// nothing. Called under s.mu, with s.dev set.
func (s *Socket) takeVecMem(o *op, need Access) error {
	for i := range o.vec {
		p := &o.vec[i]
		var err error
		switch {
		case p.mh != nil:
			if err = p.mh.acquire(); err == nil {
				p.mr = p.mh.mrs[s.dev.idx]
			}
		case o.kind == opSend || o.vst.split:
			// An unadvertised recv's pieces are only copied into, and
			// need no registration.
			if p.mr, err = s.dev.pd.RegisterMR(p.buf, need.verbs()); err == nil {
				p.tmp = true
			}
		}
		if err != nil {
			o.vec = o.vec[:i]
			o.releaseVec()
			return err
		}
	}
	return nil
}

// releaseVec drops what o's pieces hold of their memory (see releaseMem).
func (o *op) releaseVec() {
	for i := range o.vec {
		p := &o.vec[i]
		if p.mh != nil {
			p.mh.release()
		}
		if p.tmp {
			deregisterWait(p.mr)
		}
		p.mr, p.tmp = nil, false
	}
}

// size returns the length of the operation's bytes.
func (o *op) size() int {
	if o.vec != nil {
		last := &o.vec[len(o.vec)-1]
		return last.off + len(last.buf)
	}
	return len(o.buf)
}

// pieceAt returns the index of the piece that holds byte off.
func (o *op) pieceAt(off int) int {
	return sort.Search(len(o.vec), func(i int) bool { return o.vec[i].off+len(o.vec[i].buf) > off })
}

// appendSGEs appends the scatter/gather entries of the n bytes at off of
// o's pieces to sg, one per piece, or one for pieces that follow each
// other in memory under the same key.
func (o *op) appendSGEs(sg []verbs.SGE, off, n int) []verbs.SGE {
	for i := o.pieceAt(off); n > 0; i++ {
		p := &o.vec[i]
		at := off - p.off
		k := min(n, len(p.buf)-at)
		e := verbs.SGE{Addr: p.addr + uint64(at), Len: uint32(k), LKey: p.mr.LKey()}
		if len(sg) > 0 && adjacent(&sg[len(sg)-1], &e) {
			sg[len(sg)-1].Len += e.Len // buffers adjacent in memory: one entry
		} else {
			sg = append(sg, e)
		}
		off += k
		n -= k
	}
	return sg
}

// scatter copies src into o's pieces from byte off on, for the engine's
// recv id: off counts from the start of the recv's piece if o is split.
func (o *op) scatter(id uint64, off int, src []byte) {
	if o.vst.split {
		copy(o.vec[id>>32].buf[off:], src)
		return
	}
	for i := o.pieceAt(off); len(src) > 0; i++ {
		p := &o.vec[i]
		k := copy(p.buf[off-p.off:], src)
		off += k
		src = src[k:]
	}
}

// msgEvent makes ev, the event of a SendMsg or RecvMsg, say so.
func (o *op) msgEvent(ev *Event) {
	if o.kind == opSend {
		ev.Type = EventSendMsg
	} else {
		ev.Type = EventRecvMsg
	}
	if e, ok := ev.Err.(*OpError); ok {
		e.Op += "msg"
	}
}

// vecState is the progress of a RecvMsg that the engine takes as one
// MSG_WAITALL recv per buffer (split): the engine recv of piece k has the
// identifier slot | k<<32, and they complete in order.
type vecState struct {
	split bool
	done  int   // pieces complete
	got   int   // bytes received into them
	ended bool  // a piece ended short, or failed: its outcome is the recv's
	err   error // that piece's error
	eof   bool  // that piece met the end of the stream
}

// postVecRecv hands the RecvMsg o, in slot idx, to the engine.
func (c *conn) postVecRecv(idx int32, o *op) {
	if !o.vst.split {
		// An ADVERT names one region: a recv into several buffers is
		// filled from the stream buffer.
		c.acts = c.eng.PostRecvUnadvertised(c.acts, uint64(idx), o.size(), o.waitAll)
		return
	}
	for k := range o.vec {
		c.acts = c.eng.PostRecv(c.acts, uint64(idx)|uint64(k)<<32, len(o.vec[k].buf), true)
	}
}

// pieceDone takes the completion of one piece of a split RecvMsg, and once
// the last one is complete returns the completion of the whole: N is the
// bytes of every piece, and the outcome (error, end of stream) that of the
// first piece that ended short, as a MSG_WAITALL recv ends. After the
// peer went (gone), a recv that holds bytes completes with them and no
// error (the close rule): so does a RecvMsg whose earlier pieces hold
// bytes when a later one fails.
func (o *op) pieceDone(a *dynproto.Action, gone bool) (dynproto.Action, bool) {
	v := &o.vst
	k := int(a.ID >> 32)
	v.done++
	v.got += a.Len
	if !v.ended && (a.Err != nil || a.Len < len(o.vec[k].buf)) {
		v.ended, v.err, v.eof = true, a.Err, a.EOF
		if gone && v.got > 0 {
			v.err = nil
		}
	}
	if v.done < len(o.vec) {
		return dynproto.Action{}, false
	}
	return dynproto.Action{Kind: dynproto.RecvDone, ID: uint64(uint32(a.ID)), Len: v.got, Err: v.err, EOF: v.eof && v.got == 0}, true
}

// advertised returns the key and address of the memory the ADVERT of the
// engine's recv id names: o's buffer, or its piece's if o is split.
func (o *op) advertised(id uint64) (uint32, uint64) {
	if o.vst.split {
		p := &o.vec[id>>32]
		return uint32(p.mr.RKey()), p.addr
	}
	return uint32(o.mr.RKey()), o.addr
}
