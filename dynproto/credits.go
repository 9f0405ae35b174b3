package dynproto

import (
	"fmt"

	"github.com/exsgo/exs/dynproto/internal/mut"
)

// frameCredits is frame flow control (departure 7). fc is the regular frame
// credits this end holds, owed the regular buffers it has reposted and not
// yet reported; slot says the peer's credit-slot buffer is free, slotOwed
// that ours was used and is to be reported.
type frameCredits struct {
	fc       int
	owed     int
	slot     bool
	slotOwed bool
	fstalled bool
}

// onAnyFrame takes in what every frame carries: the frame credits it
// returns and the use of a buffer of ours (departure 7), and FlagHeld
// (departure 11).
func (e *Engine) onAnyFrame(f *Frame) error {
	if f.Type == FrameCredit {
		if e.slotOwed {
			return fmt.Errorf("%w: second CREDIT frame before the slot was returned", ErrProtocol)
		}
		e.slotOwed = true
	} else {
		e.owed++
		if e.owed > e.cfg.Frames {
			return fmt.Errorf("%w: more frames than buffers", ErrProtocol)
		}
	}
	e.fc += int(f.Credits)
	if e.fc > e.cfg.PeerFrames {
		return fmt.Errorf("%w: %d frame credits returned, more than the peer's %d buffers", ErrProtocol, f.Credits, e.cfg.PeerFrames)
	}
	e.held = f.Flags&FlagHeld != 0
	if f.Flags&FlagSlot != 0 {
		if e.slot {
			return fmt.Errorf("%w: credit slot returned twice", ErrProtocol)
		}
		e.slot = true
	}
	return nil
}

// canFrame reports whether a regular frame may be sent now (it takes a
// credit), counting a stall when it may not (departure 7).
func (e *Engine) canFrame() bool {
	if e.fc > 0 {
		e.fstalled = false
		return true
	}
	if !e.fstalled {
		e.fstalled = true
		e.stats.FrameStalls++
	}
	return false
}

// frame emits a regular frame, taking a credit and returning this end's owed
// credits (and the slot, if it is owed) with it (departure 7); it carries
// FlagHeld when the receiver half holds (departure 11).
func (e *Engine) frame(out []Action, id uint64, f Frame) []Action {
	e.fc--
	f.Credits = uint16(e.owed)
	e.owed = 0
	if e.slotOwed {
		f.Flags |= FlagSlot
		e.slotOwed = false
	}
	f.Flags |= e.hint()
	return append(out, Action{Kind: SendFrame, ID: id, Frame: f})
}

// creditDue reports whether a CREDIT frame is to be sent into the peer's
// slot buffer: this end owes at least half its buffers and the slot is free
// (departure 7).
func (e *Engine) creditDue() bool {
	return e.owed >= max(1, e.cfg.Frames/2) && e.slot
}

// sendCredit sends a CREDIT frame into the peer's slot buffer, returning
// every credit owed (departure 7).
func (e *Engine) sendCredit(out []Action) []Action {
	e.slot = false
	e.stats.CreditFrames++
	f := Frame{Type: FrameCredit, Credits: uint16(e.owed)}
	e.owed = 0
	if e.slotOwed {
		f.Flags |= FlagSlot
		e.slotOwed = false
	}
	f.Flags |= e.hint()
	return append(out, Action{Kind: SendFrame, Frame: f})
}

// pumpAck returns stream-buffer space to the peer's sender: an ACK once at
// least AckThreshold bytes have been freed, in message mode one for every
// message consumed, with FlagTooLong if the last of them was too long for
// its recv (departures 6 and 8; algorithm 4's ACK, batched).
func (e *Engine) pumpAck(out []Action) []Action {
	for {
		if e.msgs == 0 && (e.unacked == 0 || e.unacked < e.cfg.AckThreshold) {
			return out
		}
		if !e.canFrame() {
			return out
		}
		f := Frame{Type: FrameAck, Len: uint32(e.unacked), Msgs: uint32(e.msgs)}
		if e.ackTooLong {
			f.Flags |= FlagTooLong
		}
		e.unacked, e.msgs, e.ackTooLong = 0, 0, false
		e.stats.AcksSent++
		out = e.frame(out, 0, f)
		if e.cfg.Type != SeqPacket || e.segs.Len() == 0 {
			return out
		}
		// Resume copying after a too-long message.
		out = e.copyMessages(out)
		out = e.finishAtEOF(out)
	}
}

// blamed reports whether the k-th (from 0) of the n messages an ACK with
// FlagTooLong reports consumed is the one that was too long: the last, since
// the receiver ends an ACK at a too-long message (departure 6).
func blamed(k, n int) bool {
	if mut.TooLongFirst {
		return k == 0
	}
	return k == n-1
}

// onAck takes in an ACK: byte credits back (b_s += the bytes freed,
// algorithm 1's credits, departure 8); in message mode, the messages sent
// through the stream buffer that the receiver consumed, whose sends may now
// complete (departure 6); and with FlagResume, the answer to this end's
// PAUSE (departure 11).
func (e *Engine) onAck(out []Action, f *Frame) ([]Action, error) {
	if f.Flags&FlagResume != 0 && e.paused && f.Seq == e.ss {
		e.paused, e.pauseSent = false, false
	}
	if e.bs+int(f.Len) > e.cfg.PeerRecvBuffer {
		return out, fmt.Errorf("%w: ACK returns more stream-buffer space than was used", ErrProtocol)
	}
	e.bs += int(f.Len)
	if f.Msgs == 0 {
		if f.Flags&FlagTooLong != 0 {
			return out, fmt.Errorf("%w: too-long flag on an ACK of no message", ErrProtocol)
		}
		return out, nil
	}
	// Message mode: the receiver consumed f.Msgs messages sent indirectly.
	left := int(f.Msgs)
	for i := 0; i < e.sends.Len() && left > 0; i++ {
		s := e.sends.At(i)
		if !s.awaitAck {
			continue
		}
		if !s.all {
			break
		}
		s.awaitAck = false
		left--
		if f.Flags&FlagTooLong != 0 && blamed(int(f.Msgs)-left-1, int(f.Msgs)) {
			s.err = errMsgSize
			e.stats.MessagesTooLong++
		}
	}
	if left > 0 {
		return out, fmt.Errorf("%w: ACK of %d messages not sent", ErrProtocol, left)
	}
	return e.completeSends(out), nil
}
