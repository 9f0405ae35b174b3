package dynproto

import (
	"fmt"

	"github.com/exsgo/exs/dynproto/internal/mut"
	"github.com/exsgo/exs/internal/fifo"
)

// recv states.
const (
	recvWaiting    uint8 = iota // not advertised (yet): k_b counts them
	recvAdvertised              // an ADVERT was sent for it
	recvPlain                   // never to be advertised (IndirectOnly mode, or after FIN)
)

// recvReq is a recv posted and not yet complete.
type recvReq struct {
	id      uint64
	n       int
	waitAll bool
	filled  int
	state   uint8
	stale   bool // advertised, but to be filled from the stream buffer (counted in k_a)
	advert  uint32
	phase   Phase // of its ADVERT
	tooLong bool  // message mode: the message arriving is longer than the recv
	// unadvertised marks a recv never to be advertised (PostRecvUnadvertised):
	// it waits as a recv shorter than AdvertMin does (departure 12).
	unadvertised bool
}

// segment is an indirect transfer's data in the stream buffer (message mode).
type segment struct {
	n   int
	eom bool
}

// receiver is the receiver half's state: the recvs not yet complete, the
// variables of algorithms 2-4 (P_r, S_r, S'_r, b_r, k_a) and the stream
// buffer's bookkeeping. The algorithms' k_b, the recvs waiting unadvertised,
// is no variable of its own: the recvs in state recvWaiting are those, in
// order, and pumpAdverts reads them there (departure 2); State counts them.
type receiver struct {
	recvs      fifo.Queue[recvReq]
	adv        int   // index of the first recv not advertised
	pr         Phase // P_r
	sr         Seq   // S_r: next unit to deliver
	sest       Seq   // S'_r
	arr        Seq   // next unit expected to arrive
	br         int   // b_r: bytes in the stream buffer not yet copied out
	ka         int   // k_a: stale recvs to fill from the stream buffer
	rpos       int   // next read offset in the stream buffer
	rwpos      int   // next write offset expected from the peer
	segs       fifo.Queue[segment]
	unacked    int  // bytes freed and not yet ACKed
	msgs       int  // messages consumed and not yet ACKed
	ackTooLong bool // the last of msgs was too long
	nextAdvert uint32
	fin        bool // the peer's FIN arrived
	pausedAt   bool // a PAUSE arrived, not yet answered nor followed by data
	probing    bool // this direct phase's first ADVERT is out, no DIRECT yet
}

// PostRecv adds a recv of n bytes (n >= 1) with the caller's identifier id.
// With waitAll (MSG_WAITALL, stream mode only) the recv completes only when
// n bytes have arrived or the stream has ended.
func (e *Engine) PostRecv(out []Action, id uint64, n int, waitAll bool) []Action {
	return e.postRecv(out, id, n, waitAll, false)
}

// PostRecvUnadvertised is PostRecv for a recv that is never advertised, such
// as a recv into several buffers, which no ADVERT can name (an ADVERT names
// one region): it is filled from the stream buffer only. In dynamic mode it
// waits as a recv shorter than AdvertMin does (departure 12), and the recvs
// after it wait for it; in IndirectOnly mode it is any recv. DirectOnly mode
// has no stream buffer: the recv completes at once with an error.
func (e *Engine) PostRecvUnadvertised(out []Action, id uint64, n int, waitAll bool) []Action {
	return e.postRecv(out, id, n, waitAll, true)
}

func (e *Engine) postRecv(out []Action, id uint64, n int, waitAll, unadvertised bool) []Action {
	switch {
	case e.dead:
		return append(out, Action{Kind: RecvDone, ID: id, Err: e.deadErr})
	case n < 1, unadvertised && e.cfg.Mode == DirectOnly:
		return append(out, Action{Kind: RecvDone, ID: id, Err: errInval})
	}
	if e.cfg.Type == SeqPacket {
		waitAll = false // a message is whole anyway
	}
	r := recvReq{id: id, n: n, waitAll: waitAll, state: recvWaiting, unadvertised: unadvertised}
	if e.cfg.Mode == IndirectOnly || e.fin || e.gone {
		r.state = recvPlain
	}
	e.recvs.Push(r)
	return e.Pump(out)
}

// pumpAdverts advertises waiting recvs, oldest first.
//
// Algorithm 2 (R: may an ADVERT be sent for a recv): not while the receiver
// holds off (b_r > 0 or k_a > 0); otherwise move to a direct phase if in an
// indirect one, send the ADVERT with P_A = P_r and S_A = S'_r, and advance
// S'_r by the recv's length with MSG_WAITALL, by 1 otherwise.
//
// A recv posted during a hold-off waits (k_b counts it), and is advertised
// like a new recv once the hold-off ends, provided it has received nothing
// from the stream buffer (departure 2). A later recv is never advertised
// while an earlier one waits: the sender fills ADVERTs in order. In dynamic
// mode a recv shorter than AdvertMin waits (departure 12), and on a stream
// a direct phase opens with one ADVERT (departure 11).
func (e *Engine) pumpAdverts(out []Action) []Action {
	for i := e.adv; i < e.recvs.Len(); i++ {
		r := e.recvs.At(i)
		if r.state != recvWaiting {
			continue
		}
		if e.holdOff() {
			break
		}
		if e.waitsUnadvertised(r) {
			if e.keepsOrder(r) {
				break
			}
			continue
		}
		if e.probing && e.recvs.At(0).state == recvAdvertised {
			// One ADVERT opens a direct phase; the rest follow its
			// DIRECT (departure 11).
			break
		}
		if !e.canFrame() {
			break
		}
		if !e.pr.IsDirect() {
			e.pr = e.pr.Next()
			e.stats.ReceiverPhaseSwitches++
			e.probing = e.hinting() && r.n >= e.hintMin(e.cfg.RecvBuffer)
		}
		r.state = recvAdvertised
		r.advert = e.nextAdvert
		r.phase = e.pr
		e.nextAdvert++
		f := Frame{Type: FrameAdvert, Phase: e.pr, Seq: e.sest, ID: r.advert, Len: uint32(r.n)}
		if r.waitAll {
			f.Flags |= FlagWaitAll
			e.sest = e.sest.Add(uint64(r.n))
		} else {
			e.sest++
		}
		e.stats.AdvertsSent++
		out = e.frame(out, r.id, f)
	}
	for e.adv < e.recvs.Len() && e.recvs.At(e.adv).state == recvAdvertised {
		e.adv++
	}
	return out
}

// holdOff reports whether the receiver must not advertise (algorithm 2):
// data is waiting in the stream buffer (b_r > 0), or recvs advertised in an
// earlier direct phase are still to be filled from it (k_a > 0).
func (e *Engine) holdOff() bool {
	return (e.br > 0 && !mut.NoHoldOffBr) || (e.ka > 0 && !mut.NoHoldOffKa)
}

// waitsUnadvertised reports whether the waiting recv r is to be filled from
// the stream buffer instead of advertised: it is too small to be worth a
// direct transfer of its own (departure 12), or it has taken bytes from the
// stream buffer already and the rest comes from there too (departure 2).
func (e *Engine) waitsUnadvertised(r *recvReq) bool {
	return e.tooSmallToAdvert(r) || r.filled > 0
}

// keepsOrder reports that the recvs after r, which waits unadvertised, wait
// too: a later recv is never advertised while an earlier one waits
// (departures 2 and 12).
func (e *Engine) keepsOrder(r *recvReq) bool {
	if e.tooSmallToAdvert(r) {
		return !mut.AdvertPastSmall
	}
	return !mut.NoHoldOffKb
}

// tooSmallToAdvert reports whether recv r is shorter than AdvertMin in
// dynamic mode (departure 12).
func (e *Engine) tooSmallToAdvert(r *recvReq) bool {
	return (r.n < e.cfg.AdvertMin || r.unadvertised) && e.cfg.Mode == Dynamic
}

// onDirect takes in a direct transfer of n units (algorithm 3): it must be
// for the oldest pending recv, whose ADVERT it names, in the receiver's
// current phase and at the next unit expected (departure 9); S_r += n, and
// without WAITALL S'_r += n - 1 and the recv completes. In message mode it
// carries one message, or says that the message was refused as too long
// (departure 6).
func (e *Engine) onDirect(out []Action, f *Frame) ([]Action, error) {
	if e.recvs.Len() == 0 {
		return out, fmt.Errorf("%w: direct transfer with no recv posted", ErrProtocol)
	}
	r := e.recvs.At(0)
	switch {
	case r.state != recvAdvertised || r.advert != f.ID:
		return out, fmt.Errorf("%w: direct transfer for ADVERT %d, but the next recv is not that ADVERT's", ErrProtocol, f.ID)
	case r.stale:
		return out, fmt.Errorf("%w: direct transfer into stale ADVERT %d", ErrProtocol, f.ID)
	case f.Phase != r.phase || f.Phase != e.pr:
		return out, fmt.Errorf("%w: direct transfer in phase %d, ADVERT %d in phase %d, receiver in phase %d", ErrProtocol, f.Phase, f.ID, r.phase, e.pr)
	case f.Seq != e.arr:
		return out, fmt.Errorf("%w: direct transfer at sequence %d, expected %d", ErrProtocol, f.Seq, e.arr)
	case int(f.Len) > r.n-r.filled:
		return out, fmt.Errorf("%w: direct transfer of %d bytes into %d free", ErrProtocol, f.Len, r.n-r.filled)
	}
	n := int(f.Len)
	e.pausedAt, e.probing = false, false
	if e.cfg.Type == SeqPacket {
		e.arr++
		e.sr++
		r.filled = n
		var err error
		if f.Flags&FlagTooLong != 0 {
			err = errMsgSize
			e.stats.MessagesTooLong++
		}
		return e.completeRecv(out, err), nil
	}
	if n == 0 {
		return out, fmt.Errorf("%w: empty direct transfer", ErrProtocol)
	}
	e.arr = e.arr.Add(uint64(n))
	e.sr = e.sr.Add(uint64(n))
	r.filled += n
	if !r.waitAll {
		e.correctEstimate(n)
		return e.completeRecv(out, nil), nil
	}
	if r.filled == r.n {
		return e.completeRecv(out, nil), nil
	}
	return out, nil
}

// correctEstimate corrects S'_r when a direct transfer of n bytes completes
// a recv advertised without WAITALL: its ADVERT counted 1, so S'_r += n - 1
// (algorithm 3).
func (e *Engine) correctEstimate(n int) {
	switch {
	case mut.EstimateOver:
		e.sest = e.sest.Add(uint64(n))
	case !mut.NoEstimateCorrection:
		e.sest = e.sest.Add(uint64(n - 1))
	}
}

// onIndirect takes in an indirect transfer (algorithm 3): checked against
// the stream buffer's offset and free space (departure 9), it moves a
// receiver in a direct phase out of it, and its bytes join the stream
// buffer: b_r += n. Data arriving after a PAUSE means the sender has moved
// on: the PAUSE needs no answer (departure 11).
func (e *Engine) onIndirect(f *Frame) error {
	n := int(f.Len)
	switch {
	case e.cfg.Mode == DirectOnly:
		return fmt.Errorf("%w: indirect transfer in direct-only mode", ErrProtocol)
	case f.Phase.IsDirect():
		return fmt.Errorf("%w: indirect transfer in direct phase %d", ErrProtocol, f.Phase)
	case f.Seq != e.arr:
		return fmt.Errorf("%w: indirect transfer at sequence %d, expected %d", ErrProtocol, f.Seq, e.arr)
	case int(f.RingOff) != e.rwpos && !mut.NoRingOffCheck:
		return fmt.Errorf("%w: indirect transfer at stream-buffer offset %d, expected %d", ErrProtocol, f.RingOff, e.rwpos)
	case n > e.cfg.RecvBuffer-e.rwpos || e.br+e.unacked+n > e.cfg.RecvBuffer:
		return fmt.Errorf("%w: indirect transfer of %d bytes overruns the stream buffer", ErrProtocol, n)
	case e.cfg.Type == Stream && (n == 0 || f.Flags&FlagEOM != 0):
		return fmt.Errorf("%w: empty or message-marked indirect transfer on a stream", ErrProtocol)
	}
	if err := e.leaveDirect(); err != nil {
		return err
	}
	e.pausedAt = false
	e.br += n
	e.rwpos += n
	if e.rwpos == e.cfg.RecvBuffer {
		e.rwpos = 0
	}
	if e.cfg.Type == SeqPacket {
		eom := f.Flags&FlagEOM != 0
		e.segs.Push(segment{n: n, eom: eom})
		if eom {
			e.arr++
		}
	} else {
		e.arr = e.arr.Add(uint64(n))
	}
	return nil
}

// leaveDirect moves a receiver in a direct phase to the next (indirect)
// phase when an indirect transfer arrives, which makes every outstanding
// ADVERT stale (k_a): the sender will discard it, and its recv will be
// filled from the stream buffer (algorithm 3).
func (e *Engine) leaveDirect() error {
	if !e.pr.IsDirect() || mut.NoLeaveDirect {
		return nil
	}
	e.pr = e.pr.Next()
	e.stats.ReceiverPhaseSwitches++
	for i := 0; i < e.recvs.Len(); i++ {
		r := e.recvs.At(i)
		if r.state == recvAdvertised && !r.stale {
			if r.filled > 0 {
				return fmt.Errorf("%w: indirect transfer while ADVERT %d is partly filled", ErrProtocol, r.advert)
			}
			r.stale = true
			e.ka++
		}
	}
	return nil
}

// CanCopy reports whether Copy would move data out of the stream buffer.
func (e *Engine) CanCopy() bool {
	if e.dead || e.recvs.Len() == 0 {
		return false
	}
	if e.cfg.Type == SeqPacket {
		// After a too-long message, copying waits for its ACK to go.
		return e.segs.Len() > 0 && (!e.ackTooLong || e.gone)
	}
	return e.br > 0
}

// Copy copies data from the stream buffer into posted recvs, completing
// recvs as they fill, then pumps.
//
// Algorithm 4 (R: copy l_c bytes out of the stream buffer into the oldest
// recv): l_c = min(b_r, room in the recv); b_r -= l_c; S_r += l_c; S'_r as
// estimateCopied says; the recv completes (a WAITALL recv only when full);
// the freed space goes back to the sender in ACKs (pumpAck).
func (e *Engine) Copy(out []Action) []Action {
	if e.dead {
		return out
	}
	if e.cfg.Type == SeqPacket {
		out = e.copyMessages(out)
	} else {
		out = e.copyStream(out)
	}
	return e.Pump(out)
}

// copyStream is algorithm 4 on a stream.
func (e *Engine) copyStream(out []Action) []Action {
	for e.br > 0 && e.recvs.Len() > 0 {
		r := e.recvs.At(0)
		lc := min(e.br, r.n-r.filled)
		out = e.copyOut(out, r, lc)
		e.sr = e.sr.Add(uint64(lc))
		e.estimateCopied(r, lc)
		if !r.waitAll || r.filled == r.n {
			out = e.completeRecv(out, nil)
		}
	}
	return out
}

// copyMessages is algorithm 4 in message mode: a recv takes exactly one
// message, whose transfers (segments) may be several; a message longer
// than its recv is dropped as it arrives, and the recv fails with EMSGSIZE
// once the whole message is in (departure 6).
func (e *Engine) copyMessages(out []Action) []Action {
	for e.segs.Len() > 0 && e.recvs.Len() > 0 {
		if e.ackTooLong && !e.gone {
			// An ACK reporting a too-long message is still to be sent:
			// wait, so that each such ACK names exactly one message.
			break
		}
		seg := e.segs.At(0)
		r := e.recvs.At(0)
		if !r.tooLong && seg.n > r.n-r.filled {
			// Longer than the recv: the recv fails once the whole
			// message has arrived and been dropped.
			r.tooLong = true
			e.stats.MessagesTooLong++
		}
		if r.tooLong {
			if seg.n > 0 {
				out = append(out, Action{Kind: Discard, Len: seg.n, RingOff: e.rpos})
			}
			e.consume(seg.n)
		} else {
			out = e.copyOut(out, r, seg.n)
		}
		eom := seg.eom
		e.segs.Pop()
		if !eom {
			continue
		}
		u := e.messageUnits(r)
		e.estimateCopied(r, u)
		e.sr = e.sr.Add(uint64(u))
		e.msgs++
		var err error
		if r.tooLong {
			e.ackTooLong = true
			err = errMsgSize
		}
		out = e.completeRecv(out, err)
	}
	return out
}

// messageUnits is the units a message copied out of the stream buffer into
// recv r counts for in S_r and S'_r: one.
func (e *Engine) messageUnits(r *recvReq) int {
	if mut.MessageUnitsBytes {
		return max(r.filled, 1)
	}
	return 1
}

// estimateCopied advances S'_r for n units copied out of the stream buffer
// into recv r, which they complete or leave waiting for more (algorithm 4):
// by n - 1 if r was advertised without WAITALL (its ADVERT counted one
// unit), by n if r was never advertised (departure 1: the slides leave S'_r
// behind S_r there), and not at all for a WAITALL ADVERT, which counted
// every unit.
func (e *Engine) estimateCopied(r *recvReq, n int) {
	switch {
	case r.state == recvAdvertised && !r.waitAll:
		e.sest = e.sest.Add(uint64(n - 1))
	case r.state != recvAdvertised && !mut.LiteralCopyOut:
		e.sest = e.sest.Add(uint64(n))
	}
}

// copyOut emits the copy of lc bytes from the head of the stream buffer to
// recv r (two copies when the data wraps around the end of the buffer).
func (e *Engine) copyOut(out []Action, r *recvReq, lc int) []Action {
	for left := lc; left > 0; {
		c := min(left, e.cfg.RecvBuffer-e.rpos)
		out = append(out, Action{Kind: CopyOut, ID: r.id, Off: r.filled, Len: c, RingOff: e.rpos})
		r.filled += c
		e.consume(c)
		left -= c
	}
	e.stats.BytesCopied += uint64(lc)
	return out
}

// consume frees n bytes at the head of the stream buffer.
func (e *Engine) consume(n int) {
	e.br -= n
	e.unacked += n
	e.rpos += n
	if e.rpos == e.cfg.RecvBuffer {
		e.rpos = 0
	}
}

// completeRecv completes the head recv with its filled bytes.
func (e *Engine) completeRecv(out []Action, err error) []Action {
	r := e.recvs.Pop()
	if r.stale {
		e.ka--
	}
	if e.adv > 0 {
		e.adv--
	}
	a := Action{Kind: RecvDone, ID: r.id, Len: r.filled, Err: err}
	if err != nil {
		a.Len = 0
	}
	return append(out, a)
}

// hint returns the FlagHeld bit for a frame this end sends now
// (departure 11).
func (e *Engine) hint() uint8 {
	if e.holding() {
		return FlagHeld
	}
	return 0
}

// holding reports whether the receiver has ADVERTs out or to come without
// more data from the stream buffer (departure 11): in dynamic mode on a
// stream, either the oldest pending recv is advertised and not stale (a
// direct phase: the sender has its ADVERT or will have it), or copying out
// what the stream buffer holds now would complete every pending recv up to
// one that is waiting and empty, which is then advertised (b_r = k_a = 0).
// It is false whenever the receiver needs more data from the stream buffer
// to make progress: a sender that pauses for the hint is then told to go on.
func (e *Engine) holding() bool {
	if !e.hinting() || e.fin {
		return false
	}
	rem := e.br
	for i := 0; i < e.recvs.Len(); i++ {
		r := e.recvs.At(i)
		switch {
		case r.state == recvAdvertised && !r.stale:
			return true
		case r.state == recvWaiting && r.filled == 0 && rem == 0 && e.advertisedOnceDrained(r):
			return true
		case needsData(r, rem):
			return false
		}
		rem -= min(rem, r.n-r.filled)
	}
	return false
}

// advertisedOnceDrained reports whether the waiting, empty recv r will be
// advertised once the stream buffer is drained: not if it is shorter than
// AdvertMin (departure 12), for a sender paused for the hint would wait for
// an ADVERT that never comes.
func (e *Engine) advertisedOnceDrained(r *recvReq) bool {
	return r.n >= e.cfg.AdvertMin && !r.unadvertised || mut.HeldSmall
}

// needsData reports whether recv r, with rem bytes of the stream buffer
// left for it, needs more data from the stream buffer to complete: rem is 0,
// or r is a MSG_WAITALL recv that rem cannot fill.
func needsData(r *recvReq, rem int) bool {
	return (rem == 0 || (r.waitAll && rem < r.n-r.filled)) && !mut.HeldNeedsData
}

// onPause: the peer's sender waits, at f.Seq, for the ADVERTs this end's
// FlagHeld promised (departure 11). A PAUSE arrives after every byte sent
// before it, so the receiver now knows the whole stream: if it holds, it
// advertises without outside help; once it does not, pumpResume answers.
func (e *Engine) onPause(f *Frame) error {
	switch {
	case e.cfg.Mode != Dynamic || e.cfg.Type != Stream:
		return fmt.Errorf("%w: PAUSE in %v %v mode", ErrProtocol, e.cfg.Mode, e.cfg.Type)
	case f.Seq != e.arr:
		return fmt.Errorf("%w: PAUSE at sequence %d, expected %d", ErrProtocol, f.Seq, e.arr)
	case e.pausedAt:
		return fmt.Errorf("%w: second PAUSE at sequence %d", ErrProtocol, f.Seq)
	}
	e.pausedAt = true
	return nil
}

// pumpResume answers a PAUSE once the receiver no longer holds: an ACK with
// FlagResume at the sequence number the PAUSE named lets the sender go on
// through the stream buffer (departure 11).
func (e *Engine) pumpResume(out []Action) []Action {
	if !e.resumeDue() || !e.canFrame() {
		return out
	}
	e.pausedAt = false
	f := Frame{Type: FrameAck, Flags: FlagResume, Len: uint32(e.unacked), Seq: e.arr}
	e.unacked = 0
	e.stats.AcksSent++
	e.stats.ResumeFrames++
	return e.frame(out, 0, f)
}

// resumeDue reports whether a PAUSE awaits its answer: one arrived, and the
// receiver no longer holds (departure 11).
func (e *Engine) resumeDue() bool {
	return e.pausedAt && !e.holding() && !mut.NoResume
}

// onFin takes in the end of the peer's stream (departure 10): once the
// stream buffer is drained, every pending recv completes with what it has,
// and so does every later one.
func (e *Engine) onFin(out []Action, f *Frame) ([]Action, error) {
	if e.fin {
		return out, fmt.Errorf("%w: second FIN", ErrProtocol)
	}
	if f.Seq != e.arr {
		return out, fmt.Errorf("%w: FIN at sequence %d, expected %d", ErrProtocol, f.Seq, e.arr)
	}
	e.fin = true
	// Recvs not advertised yet never will be.
	for i := 0; i < e.recvs.Len(); i++ {
		if r := e.recvs.At(i); r.state == recvWaiting {
			r.state = recvPlain
		}
	}
	return e.finishAtEOF(out), nil
}

// finishAtEOF completes the pending recvs once the peer's stream has ended and
// its stream buffer is drained.
func (e *Engine) finishAtEOF(out []Action) []Action {
	if !e.fin || e.br > 0 || e.segs.Len() > 0 {
		return out
	}
	for e.recvs.Len() > 0 {
		eof := e.recvs.At(0).filled == 0
		out = e.completeRecv(out, nil)
		out[len(out)-1].EOF = eof
	}
	return out
}

// PeerGone reports that the connection is gone while this end still
// stands: the peer closed or reset it, or died. No frame will arrive and
// none can leave. What already arrived is kept (a byte whose send
// completed at the peer is never lost because the peer went): the recvs
// still take every byte (every whole message) the stream buffer holds, in
// order, and then the end of the stream if the peer's FIN arrived, or err
// if it did not. In stream mode a recv holding bytes completes with them
// (a short MSG_WAITALL recv) and err goes to the next one; in message mode
// a message the peer had not finished is dropped. Every send not yet
// complete fails with err, and so does every later send; later recvs
// complete as above. Outstanding writes need no WriteDone any more. (This is
// the close rule of docs/protocol.md, departure 10.)
func (e *Engine) PeerGone(out []Action, err error) []Action {
	if e.dead || e.gone {
		return out
	}
	if mut.GoneDiscards {
		return e.Abort(out, err) // the mutant: as if this end aborted
	}
	e.gone, e.goneErr = true, err
	for e.sends.Len() > 0 {
		s := e.sends.Pop()
		out = append(out, Action{Kind: SendDone, ID: s.id, Err: err})
	}
	e.cur = 0
	e.writes = fifo.Queue[uint64]{}
	e.adverts = fifo.Queue[advert]{}
	e.paused, e.pauseSent = false, false
	// Nothing more will be advertised.
	for i := e.adv; i < e.recvs.Len(); i++ {
		if r := e.recvs.At(i); r.state == recvWaiting {
			r.state = recvPlain
		}
	}
	if e.cfg.Type == SeqPacket {
		// The segments after the last whole message will never be
		// completed by the rest of their message.
		keep := e.segs.Len()
		for keep > 0 && !e.segs.At(keep-1).eom {
			keep--
			e.br -= e.segs.At(keep).n
		}
		e.segs.Truncate(keep)
	}
	return e.finishGone(out)
}

// finishGone completes the pending recvs of a connection that is gone once
// its stream buffer has nothing more for them.
func (e *Engine) finishGone(out []Action) []Action {
	if !e.gone || e.fin || e.br > 0 || e.segs.Len() > 0 {
		return out
	}
	if mut.GoneEOF {
		e.fin = true // the mutant: as if the peer's FIN had arrived
		return e.finishAtEOF(out)
	}
	for e.recvs.Len() > 0 {
		r := e.recvs.At(0)
		if e.cfg.Type == Stream && r.filled > 0 {
			out = e.completeRecv(out, nil)
			continue
		}
		out = e.completeRecv(out, e.goneErr)
	}
	return out
}
