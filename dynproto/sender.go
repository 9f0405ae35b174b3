package dynproto

import (
	"fmt"

	"github.com/exsgo/exs/dynproto/internal/mut"
	"github.com/exsgo/exs/internal/fifo"
)

// sendReq is a send posted and not yet complete.
type sendReq struct {
	id       uint64
	no       uint64 // serial number, for matching write completions
	n        int
	issued   int  // bytes handed to transfers
	all      bool // every transfer it needs has been emitted
	writes   int  // writes emitted and not yet done
	awaitAck bool // message sent indirectly, not yet consumed by the receiver
	err      error
}

// advert is an ADVERT the sender holds in q_A.
type advert struct {
	phase   Phase
	seq     Seq
	id      uint32
	n       int
	filled  int
	waitAll bool
	rkey    uint32
	addr    uint64
}

// sender is the sender half's state: the sends not yet complete and the
// variables of algorithm 1 (q_A, P_S, S_S, b_s).
type sender struct {
	sends     fifo.Queue[sendReq] // incomplete sends, in post order
	cur       int                 // index in sends of the first send not fully issued
	nextNo    uint64
	writes    fifo.Queue[uint64] // serial numbers of the sends of outstanding writes
	adverts   fifo.Queue[advert] // q_A
	ps        Phase              // P_S
	ss        Seq                // S_S
	bs        int                // b_s: byte credits for the peer's stream buffer
	wpos      int                // next write offset in the peer's stream buffer
	cstalled  bool
	shutdown  bool // Shutdown was called
	finSent   bool
	msgInRing bool // message mode: a message is partly written to the stream buffer
	held      bool // the peer's last frame carried FlagHeld
	paused    bool // waiting for the ADVERTs FlagHeld promised (departure 11)
	pauseSent bool // the PAUSE frame for this pause has been sent
	hstalled  bool
}

// QueueSend adds a send of n bytes with the caller's identifier id to the
// send queue without starting any transfer; a caller that queues several
// sends and then calls Pump lets the engine coalesce them. Use PostSend to
// queue and pump at once.
func (e *Engine) QueueSend(out []Action, id uint64, n int) []Action {
	switch {
	case e.dead:
		return append(out, Action{Kind: SendDone, ID: id, Err: e.deadErr})
	case e.shutdown:
		return append(out, Action{Kind: SendDone, ID: id, Err: errPipe})
	case e.gone:
		return append(out, Action{Kind: SendDone, ID: id, Err: e.goneErr})
	case n < 0:
		return append(out, Action{Kind: SendDone, ID: id, Err: errInval})
	}
	s := sendReq{id: id, no: e.nextNo, n: n}
	e.nextNo++
	if n == 0 && e.cfg.Type == Stream && !mut.EmptySendQueued {
		s.all = true // nothing to transfer
	}
	e.sends.Push(s)
	if s.all {
		e.skipIssued()
		out = e.completeSends(out)
	}
	return out
}

// PostSend is QueueSend followed by Pump.
func (e *Engine) PostSend(out []Action, id uint64, n int) []Action {
	out = e.QueueSend(out, id, n)
	return e.Pump(out)
}

// Shutdown ends this end's outgoing stream: sends already posted are still
// transferred, then a FIN follows the last byte. Sends posted afterwards
// complete with EPIPE.
func (e *Engine) Shutdown(out []Action) []Action {
	if e.dead || e.gone || e.shutdown {
		return out
	}
	e.shutdown = true
	return e.Pump(out)
}

// finDue reports whether the FIN is to be sent now: the stream is shut down
// and every byte before it has been handed to a transfer (departure 10),
// and a frame credit is at hand.
func (e *Engine) finDue() bool {
	return e.shutdown && !e.finSent && e.cur == e.sends.Len() && e.canFrame()
}

// sendFin sends the FIN after the last byte (departure 10).
func (e *Engine) sendFin(out []Action) []Action {
	e.finSent = true
	return e.frame(out, 0, Frame{Type: FrameFin, Seq: e.ss})
}

// WriteDone reports that the oldest outstanding write has completed.
func (e *Engine) WriteDone(out []Action) ([]Action, error) {
	return e.WritesDone(out, 1)
}

// WritesDone reports that the n oldest outstanding writes have completed,
// such as the writes of one transfer, which complete with its frame. It
// appends the actions of n calls of WriteDone, in the same order, and
// leaves the engine in the same state, but pumps once: a write's
// completion only completes sends, which lets Pump do nothing new. With
// fewer than n writes outstanding it completes those and returns the
// error WriteDone returns for the first one too many. n <= 0 does nothing.
func (e *Engine) WritesDone(out []Action, n int) ([]Action, error) {
	if e.dead || e.gone || n <= 0 {
		return out, nil
	}
	var err error
	if n > e.writes.Len() {
		n = e.writes.Len()
		err = fmt.Errorf("%w: write completion with no write outstanding", ErrProtocol)
		if n == 0 {
			return out, err
		}
	}
	head := e.sends.At(0).no
	for range n {
		no := e.writes.Pop()
		e.sends.At(int(no-head)).writes--
	}
	out = e.completeSends(out)
	return e.Pump(out), err
}

// completeSends completes, in order, every send at the head of the queue
// whose transfers are all done.
func (e *Engine) completeSends(out []Action) []Action {
	for e.sends.Len() > 0 {
		s := e.sends.At(0)
		if !s.all || s.writes > 0 || s.awaitAck {
			break
		}
		a := Action{Kind: SendDone, ID: s.id, Len: s.n, Err: s.err}
		if s.err != nil {
			a.Len = 0
		}
		out = append(out, a)
		e.sends.Pop()
		if e.cur > 0 {
			e.cur--
		}
	}
	return out
}

// skipIssued moves e.cur past sends that need no (more) transfers: empty
// sends on a stream.
func (e *Engine) skipIssued() {
	for e.cur < e.sends.Len() && e.sends.At(e.cur).all {
		e.cur++
	}
}

// onAdvert queues an ADVERT in q_A. Whether it is fresh is judged only when
// the sender picks a transfer (departure 3); here it is only checked
// (departure 9).
func (e *Engine) onAdvert(f *Frame) error {
	if e.cfg.Mode == IndirectOnly {
		return fmt.Errorf("%w: ADVERT in indirect-only mode", ErrProtocol)
	}
	if f.Len == 0 {
		return fmt.Errorf("%w: empty ADVERT", ErrProtocol)
	}
	if !f.Phase.IsDirect() {
		return fmt.Errorf("%w: ADVERT in indirect phase %d", ErrProtocol, f.Phase)
	}
	e.stats.AdvertsReceived++
	e.adverts.Push(advert{
		phase:   f.Phase,
		seq:     f.Seq,
		id:      f.ID,
		n:       int(f.Len),
		waitAll: f.Flags&FlagWaitAll != 0,
		rkey:    f.RKey,
		addr:    f.Addr,
	})
	return nil
}

// pumpSends starts transfers for queued sends, one at a time, each with a
// frame credit (departure 7).
//
// Algorithm 1 (S: choose a transfer for the next l_w bytes):
//  1. a fresh ADVERT at the head of q_A: write directly into it
//     (freshAdvert drops the stale ones first);
//  2. otherwise, if b_s > 0: move to an indirect phase and write into the
//     stream buffer; in dynamic mode on a stream, not while the receiver
//     holds recvs (departure 11: pause instead);
//  3. otherwise wait for an ADVERT, an ACK or a frame credit.
func (e *Engine) pumpSends(out []Action) []Action {
	for e.skipIssued(); e.cur < e.sends.Len(); e.skipIssued() {
		if !e.canFrame() {
			return out
		}
		// Step 1. A message begun in the stream buffer ends there
		// (departure 6).
		if !e.msgInRing {
			if a := e.freshAdvert(); a != nil {
				out = e.direct(out, a)
				continue
			}
		}
		// Step 2.
		if e.cfg.Mode == DirectOnly {
			return out
		}
		if e.pauseForHeld() {
			return e.pause(out)
		}
		e.hstalled = false
		if e.bs == 0 && !(e.cfg.Type == SeqPacket && e.sends.At(e.cur).n == 0) {
			// Step 3: no credits (an empty message needs none).
			if !e.cstalled {
				e.cstalled = true
				e.stats.CreditStalls++
			}
			return out
		}
		e.cstalled = false
		if e.ps.IsDirect() {
			e.ps = e.ps.Next()
			e.stats.SenderPhaseSwitches++
		}
		out = e.indirect(out)
	}
	return out
}

// pauseForHeld reports whether the sender, with no usable ADVERT, holds back
// an indirect transfer (departure 11): it is paused and has not been told to
// resume, or the receiver's last frame said it has ADVERTs out or to come
// without more data (FlagHeld) and the next send has at least HintMin bytes
// left. (canFrame has been checked: a PAUSE frame can go at once.)
func (e *Engine) pauseForHeld() bool {
	if !e.hinting() || !(e.held || e.paused) {
		return false
	}
	s := e.sends.At(e.cur)
	return e.paused || s.n-s.issued >= e.hintMin(e.cfg.PeerRecvBuffer)
}

// pause holds the sender back for the ADVERTs the receiver's FlagHeld
// promised, sending one PAUSE{S_S} for the pause (departure 11).
func (e *Engine) pause(out []Action) []Action {
	if !e.hstalled {
		e.hstalled = true
		e.stats.HeldPauses++
	}
	e.paused = true
	if !e.pauseSent {
		e.pauseSent = true
		e.stats.PauseFrames++
		out = e.frame(out, 0, Frame{Type: FramePause, Seq: e.ss})
	}
	return out
}

// freshAdvert drops stale ADVERTs from the head of q_A and returns the head
// if it is usable, switching the sender to a direct phase (algorithm 1,
// step 1). In a direct phase the head is usable as it is: the ADVERTs of
// one direct phase are used in order.
func (e *Engine) freshAdvert() *advert {
	for e.adverts.Len() > 0 {
		a := e.adverts.At(0)
		if !e.ps.IsDirect() && e.stale(a) {
			e.jumpPast(a)
			e.adverts.Pop()
			e.stats.AdvertsDiscarded++
			continue
		}
		if !e.ps.IsDirect() {
			e.ps = a.phase
			e.stats.SenderPhaseSwitches++
		}
		return a
	}
	return nil
}

// jumpPast moves the sender past the phase of a stale ADVERT: if
// P_S < P_A, P_S = NEXT_PHASE(P_A), so that the later ADVERTs of that same
// direct phase are recognised as stale too (algorithm 1, step 1).
func (e *Engine) jumpPast(a *advert) {
	if e.ps.Before(a.phase) && !mut.NoPhaseJump {
		e.ps = a.phase.Next()
	}
}

// stale is the sender's test for an ADVERT met in an indirect phase
// (algorithm 1, step 1): P_A < P_S or S_A < S_S.
func (e *Engine) stale(a *advert) bool {
	if a.phase.Before(e.ps) && !mut.NoPhaseCheck {
		return true
	}
	return a.seq.Before(e.ss) && !mut.AcceptOldSeq
}

// direct emits one direct transfer into ADVERT a: l_w = min(queued bytes,
// room in a); S_S += l_w (algorithm 1, step 1). A WAITALL ADVERT stays at
// the head of q_A until it is full (departure 5); in message mode a message
// fills one ADVERT, or is refused if it is longer (departure 6).
func (e *Engine) direct(out []Action, a *advert) []Action {
	e.paused, e.pauseSent = false, false
	f := Frame{Type: FrameDirect, Phase: e.ps, Seq: e.ss, ID: a.id}
	if e.cfg.Type == SeqPacket {
		s := e.sends.At(e.cur)
		f.Flags = FlagEOM
		if s.n > a.n {
			// The message does not fit: refuse it at both ends.
			f.Flags |= FlagTooLong
			s.err = errMsgSize
			e.stats.MessagesTooLong++
		} else {
			// An empty message too: its write of 0 bytes moves nothing,
			// but its WriteDone, after the frame, completes the send
			// once the message has arrived (not before, or a close that
			// follows could lose a message whose send completed).
			f.Len = uint32(s.n)
			out = e.write(out, WriteDirect, s, 0, s.n, a.rkey, a.addr, 0)
			e.stats.BytesDirect += uint64(s.n)
		}
		s.issued, s.all = s.n, true
		e.cur++
		e.ss++
		e.adverts.Pop()
		e.stats.AdvertsUsed++
		e.stats.TransfersDirect++
		out = e.frame(out, 0, f)
		return e.completeSends(out)
	}
	room := a.n - a.filled
	var n int
	out, n = e.gather(out, WriteDirect, room, a.rkey, a.addr+uint64(a.filled), 0)
	f.Len = uint32(n)
	if a.waitAll {
		f.Flags |= FlagWaitAll
	}
	a.filled += n
	e.ss = e.ss.Add(uint64(n))
	e.stats.BytesDirect += uint64(n)
	e.stats.TransfersDirect++
	if !a.waitAll || a.filled == a.n {
		e.adverts.Pop()
		e.stats.AdvertsUsed++
	}
	return e.frame(out, 0, f)
}

// indirect emits one indirect transfer into the peer's stream buffer:
// S_S += l_w; b_s -= l_w (algorithm 1, step 2). In message mode a message
// may span several transfers, the last marked end-of-message, and its send
// completes when the receiver's ACK says it was consumed (departure 6).
func (e *Engine) indirect(out []Action) []Action {
	room := e.indirectRoom()
	f := Frame{Type: FrameIndirect, Phase: e.ps, Seq: e.ss, RingOff: uint32(e.wpos)}
	var n int
	if e.cfg.Type == SeqPacket {
		s := e.sends.At(e.cur)
		n = min(room, s.n-s.issued)
		if n > 0 {
			out = e.write(out, WriteIndirect, s, s.issued, n, 0, 0, e.wpos)
		}
		s.issued += n
		if s.issued == s.n {
			f.Flags |= FlagEOM
			s.all, s.awaitAck = true, true
			e.cur++
			e.ss++
			e.msgInRing = false
		} else {
			e.msgInRing = true
		}
	} else {
		out, n = e.gather(out, WriteIndirect, room, 0, 0, e.wpos)
		e.ss = e.ss.Add(uint64(n))
	}
	f.Len = uint32(n)
	e.bs -= n
	e.wpos += n
	if e.wpos == e.cfg.PeerRecvBuffer {
		e.wpos = 0
	}
	e.stats.BytesIndirect += uint64(n)
	e.stats.TransfersIndirect++
	return e.frame(out, 0, f)
}

// indirectRoom is the most an indirect transfer may carry now:
// min(b_s, the contiguous room to the end of the ring), and at most
// MaxIndirect (departure 8).
func (e *Engine) indirectRoom() int {
	room := e.bs
	if !mut.RingOverrun {
		room = min(room, e.peerRing()-e.wpos)
	} else {
		room = e.peerRing() - e.wpos
	}
	if e.cfg.MaxIndirect > 0 {
		room = min(room, e.cfg.MaxIndirect)
	}
	return room
}

// peerRing is the size of the peer's stream buffer, into which this end
// writes.
func (e *Engine) peerRing() int {
	if mut.OwnRing {
		return e.cfg.RecvBuffer
	}
	return e.cfg.PeerRecvBuffer
}

// gather emits writes of up to room bytes taken from the queued sends
// starting at e.cur, from at most MaxGather sends (stream mode): many small
// sends become one transfer with a scatter/gather list (departure 4).
func (e *Engine) gather(out []Action, k Kind, room int, rkey uint32, addr uint64, ringOff int) ([]Action, int) {
	total := 0
	for pieces := 0; room > 0 && e.cur < e.sends.Len() && pieces < e.cfg.MaxGather; pieces++ {
		s := e.sends.At(e.cur)
		if s.all {
			e.cur++
			continue
		}
		n := min(room, s.n-s.issued)
		out = e.write(out, k, s, s.issued, n, rkey, addr+uint64(total), ringOff+total)
		s.issued += n
		total += n
		room -= n
		if s.issued == s.n {
			s.all = true
			e.cur++
		}
	}
	return out, total
}

// LimitGather lowers to n (at least 1) the most sends a transfer gathers
// from (Config.MaxGather), for the transfers that start from now on; it
// never raises it. A user whose sends may span many buffers lowers it, so
// that one transfer's writes keep within its send queue.
func (e *Engine) LimitGather(n int) {
	if n >= 1 && n < e.cfg.MaxGather {
		e.cfg.MaxGather = n
	}
}

// write emits one write from send s and records it, for its WriteDone.
func (e *Engine) write(out []Action, k Kind, s *sendReq, off, n int, rkey uint32, addr uint64, ringOff int) []Action {
	s.writes++
	e.writes.Push(s.no)
	a := Action{Kind: k, ID: s.id, Off: off, Len: n}
	if k == WriteDirect {
		a.RKey, a.Addr = rkey, addr
	} else {
		a.RingOff = ringOff
	}
	return append(out, a)
}
