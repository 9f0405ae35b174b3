package sim

import (
	"fmt"
	"syscall"

	"github.com/exsgo/exs/dynproto"
)

// verdicts of a message at its recv.
const (
	fits    = 1
	tooLong = 2
)

func (w *World) sendDone(i int, a dynproto.Action) {
	p := &w.ep[i]
	if a.ID >= uint64(len(p.sendDone)) || p.sendDone[a.ID] {
		w.failf("endpoint %c: send %d completed twice or never posted", 'A'+i, a.ID)
		return
	}
	if a.ID != uint64(p.sendsDone) {
		w.failf("endpoint %c: send %d completed before send %d, posted earlier", 'A'+i, a.ID, p.sendsDone)
		return
	}
	p.sendsDone++
	p.sendDone[a.ID] = true
	p.sendErr[a.ID] = a.Err
	n := p.sendLens[a.ID]
	switch {
	case a.Err == nil && a.Len != n:
		w.failf("endpoint %c: send %d of %d bytes completed with %d", 'A'+i, a.ID, n, a.Len)
	case a.Err == syscall.ECANCELED && p.closed, a.Err == syscall.ECONNRESET && w.ep[1-i].closed:
		// The connection went before the send completed.
	case a.Err != nil && a.Err != syscall.EMSGSIZE:
		w.failf("endpoint %c: send %d failed: %v", 'A'+i, a.ID, a.Err)
	case a.Err != nil && w.cfg.Engine[i].Type != dynproto.SeqPacket:
		w.failf("endpoint %c: send %d failed on a stream: %v", 'A'+i, a.ID, a.Err)
	case w.cfg.Engine[i].Type == dynproto.SeqPacket:
		w.checkVerdict(i, a.ID)
	}
}

// checkVerdict checks that message m of endpoint i's, sent in message mode,
// failed with EMSGSIZE at its sender if and only if it was longer than the
// recv it met, once both are known: a send that succeeded must have met a
// recv it fit (it completes only once its message has been received).
func (w *World) checkVerdict(i int, m uint64) {
	p := &w.ep[i]
	if !p.sendDone[m] {
		return
	}
	err := p.sendErr[m]
	if err != nil && err != syscall.EMSGSIZE {
		return // the connection went
	}
	var v uint8
	if m < uint64(len(p.verdict)) {
		v = p.verdict[m]
	}
	switch {
	case err == nil && v != fits:
		w.failf("endpoint %c: send %d (message %d of %d bytes) succeeded, but its message %s", 'A'+i, m, m, p.sendLens[m],
			map[uint8]string{0: "has met no recv yet", tooLong: "was longer than its recv"}[v])
	case err == syscall.EMSGSIZE && v == fits:
		w.failf("endpoint %c: send %d (message %d of %d bytes) failed with EMSGSIZE, but its message fit its recv", 'A'+i, m, m, p.sendLens[m])
	}
}

// setVerdict records what the recv of endpoint i that message m of the
// peer's met made of it, and checks the peer's send against it.
func (w *World) setVerdict(i int, m uint64, v uint8) {
	peer := &w.ep[1-i]
	for uint64(len(peer.verdict)) <= m {
		peer.verdict = append(peer.verdict, 0)
	}
	peer.verdict[m] = v
	if v == tooLong {
		w.seen |= SeenTooLong
	}
	w.checkVerdict(1-i, m)
}

// completedUnits returns how many units of endpoint i's stream its
// completed sends cover: bytes (stream) or messages (message mode), up to
// the last send that completed successfully. Sends complete in order. A
// message refused as too long completes at its sender before its refusal
// reaches the receiver, so it counts only when a later send completed (its
// announcement travelled behind the refusal).
func (w *World) completedUnits(i int) uint64 {
	p := &w.ep[i]
	var n uint64
	for k, done := range p.sendDone {
		err := p.sendErr[k]
		if !done || err != nil && err != syscall.EMSGSIZE {
			break
		}
		if err != nil {
			continue
		}
		if w.cfg.Engine[i].Type == dynproto.SeqPacket {
			n = uint64(k) + 1
		} else {
			n = p.sendStarts[k] + uint64(p.sendLens[k])
		}
	}
	return n
}

// streamEnded checks the close rule when a recv of endpoint i reports the
// end of the peer's stream, by FIN (err nil) or by reset.
func (w *World) streamEnded(i int, a dynproto.Action) {
	p := &w.ep[i]
	peer := &w.ep[1-i]
	if a.Err != nil {
		if a.Err != syscall.ECONNRESET || !peer.closed && !p.closed {
			w.failf("endpoint %c: recv %d failed: %v", 'A'+i, a.ID, a.Err)
			return
		}
		if p.closed {
			return // this end's own close discards what it holds
		}
		p.reset = true
	}
	if c := w.completedUnits(1 - i); p.delivered < c {
		w.failf("endpoint %c: recv %d reports the end of the peer's stream (%v) after %d units, but the peer's completed sends hold %d (lost at close)", 'A'+i, a.ID, a.Err, p.delivered, c)
	}
}

func (w *World) recvDone(i int, a dynproto.Action) {
	p := &w.ep[i]
	peer := &w.ep[1-i]
	if a.ID >= uint64(len(p.recvs)) || p.recvs[a.ID].done {
		w.failf("endpoint %c: recv %d completed twice or never posted", 'A'+i, a.ID)
		return
	}
	if a.ID != uint64(p.recvsDone) {
		w.failf("endpoint %c: recv %d completed before recv %d, posted earlier", 'A'+i, a.ID, p.recvsDone)
		return
	}
	p.recvsDone++
	r := &p.recvs[a.ID]
	r.done = true
	p.pending--
	if a.Err == syscall.ECANCELED && p.closed {
		return // canceled by this end's close
	}
	if a.EOF && (a.Err != nil || a.Len != 0) {
		w.failf("endpoint %c: recv %d marked EOF with (%d, %v)", 'A'+i, a.ID, a.Len, a.Err)
		return
	}
	if w.cfg.Engine[i].Type == dynproto.SeqPacket {
		w.recvMessage(i, r, a)
		return
	}
	switch {
	case a.Err != nil:
		w.streamEnded(i, a)
		return
	case a.Len < 0 || a.Len > len(r.data):
		w.failf("endpoint %c: recv %d of %d bytes completed with %d", 'A'+i, a.ID, len(r.data), a.Len)
		return
	case a.Len == 0:
		if !peer.shut || p.delivered != peer.sentBytes || !a.EOF {
			w.failf("endpoint %c: recv %d reports the end of the stream after %d of %d bytes (EOF %v)", 'A'+i, a.ID, p.delivered, peer.sentBytes, a.EOF)
		}
		p.eof = true
		w.streamEnded(i, a)
		return
	}
	for k := 0; k < a.Len; k++ {
		if want := streamByte(1-i, p.delivered+uint64(k)); r.data[k] != want {
			w.failf("endpoint %c: recv %d byte %d (stream byte %d) is %#x, want %#x", 'A'+i, a.ID, k, p.delivered+uint64(k), r.data[k], want)
			return
		}
	}
	p.delivered += uint64(a.Len)
	if p.delivered > peer.sentBytes {
		w.failf("endpoint %c: delivered %d bytes, only %d sent", 'A'+i, p.delivered, peer.sentBytes)
	}
	if p.recvWait[a.ID] && a.Len < len(r.data) {
		// MSG_WAITALL: short only where the stream ends (its FIN in,
		// nothing after this recv) or the connection went.
		if !peer.closed && !(p.finIn && peer.shut && p.delivered == peer.sentBytes) {
			w.failf("endpoint %c: MSG_WAITALL recv %d of %d bytes completed with %d before the end of the stream (%d of %d bytes delivered)",
				'A'+i, a.ID, len(r.data), a.Len, p.delivered, peer.sentBytes)
		}
		w.seen |= SeenShortWaitAll
	}
}

func (w *World) recvMessage(i int, r *recvBuf, a dynproto.Action) {
	p := &w.ep[i]
	peer := &w.ep[1-i]
	m := p.delivered
	if a.Err == syscall.ECONNRESET {
		w.streamEnded(i, a)
		return
	}
	if a.EOF {
		if !peer.shut || m != uint64(peer.nextSend) {
			w.failf("endpoint %c: recv %d reports the end of the stream after %d of %d messages", 'A'+i, a.ID, m, peer.nextSend)
		}
		p.eof = true
		w.streamEnded(i, a)
		return
	}
	if m >= uint64(peer.nextSend) {
		w.failf("endpoint %c: recv %d completed (%d, %v) with no message sent", 'A'+i, a.ID, a.Len, a.Err)
		return
	}
	n := peer.sendLens[m]
	p.delivered++
	if n > len(r.data) {
		if a.Err != syscall.EMSGSIZE {
			w.failf("endpoint %c: recv %d of %d bytes got message %d of %d bytes with (%d, %v), want EMSGSIZE", 'A'+i, a.ID, len(r.data), m, n, a.Len, a.Err)
			return
		}
		w.setVerdict(i, m, tooLong)
		return
	}
	w.setVerdict(i, m, fits)
	if a.Err != nil || a.Len != n {
		w.failf("endpoint %c: recv %d got message %d of %d bytes with (%d, %v)", 'A'+i, a.ID, m, n, a.Len, a.Err)
		return
	}
	for k := 0; k < n; k++ {
		if want := messageByte(1-i, m, k); r.data[k] != want {
			w.failf("endpoint %c: recv %d byte %d of message %d is %#x, want %#x", 'A'+i, a.ID, k, m, r.data[k], want)
			return
		}
	}
}

// relPhase is phase p of a stream that started in phase p0, counted from
// the start: the simulation's own serial arithmetic, so that the checks do
// not rest on the engine's Phase.Before. A phase before the start comes out
// negative.
func relPhase(p, p0 dynproto.Phase) int64 { return int64(int32(uint32(p) - uint32(p0))) }

// relSeq is sequence number s of a stream that started at s0, counted from
// the start (negative before it).
func relSeq(s, s0 dynproto.Seq) int64 { return int64(uint64(s) - uint64(s0)) }

// RelPhases returns endpoint i's sender and receiver phases, counted from
// the start of their streams (0: the initial phase).
func (w *World) RelPhases(i int) (ps, pr int64) {
	s := w.ep[i].eng.State()
	c := &w.cfg.Engine[i]
	return relPhase(s.PS, c.InitialPhase), relPhase(s.PR, c.PeerInitialPhase)
}

// checkPhases checks that neither half of endpoint i moved to an earlier
// phase, counting phases from the start of each stream.
func (w *World) checkPhases(i int) {
	p := &w.ep[i]
	ps, pr := w.RelPhases(i)
	if ps < p.maxPS || pr < p.maxPR {
		s := p.eng.State()
		w.failf("endpoint %c: phase went backwards (P_S %d, %d from its start, after %d; P_r %d, %d from its start, after %d)",
			'A'+i, s.PS, ps, p.maxPS, s.PR, pr, p.maxPR)
	}
	p.maxPS, p.maxPR = max(p.maxPS, ps), max(p.maxPR, pr)
}

// wrapped reports whether frame f of endpoint i's carries a sequence
// number or phase of a stream that has passed the wrap (smaller than the
// stream's start though counted after it).
func (w *World) wrapped(i int, f *dynproto.Frame) bool {
	c := &w.cfg.Engine[i]
	seq0, ph0 := c.InitialSeq, c.InitialPhase // this end's stream: transfers, FIN, PAUSE
	switch f.Type {
	case dynproto.FrameAdvert:
		seq0, ph0 = c.PeerInitialSeq, c.PeerInitialPhase // the peer's stream
	case dynproto.FrameDirect, dynproto.FrameIndirect, dynproto.FrameFin, dynproto.FramePause:
	default:
		return false
	}
	return f.Seq < seq0 && relSeq(f.Seq, seq0) > 0 || f.Phase < ph0 && relPhase(f.Phase, ph0) > 0
}

// CaughtUp reports whether endpoint i's receiver is caught up with its
// peer's sender, as the simulation sees them (none of it read from the
// engines): every write of the peer completed, every unit the peer put into
// a transfer delivered to a recv of i's, i's stream buffer empty, no recv
// of i's pending, the peer's FIN not delivered, and neither end closed.
// Whatever i advertises next then starts exactly at the next unit.
func (w *World) CaughtUp(i int) bool {
	r, s := &w.ep[i], &w.ep[1-i]
	return !r.closed && !s.closed && !r.finIn && s.writesDone == s.writesEmitted &&
		s.unitsSent == r.delivered && r.busy == 0 && r.pending == 0
}

// CheckCaughtUp checks the efficiency invariant at endpoint i's receiver,
// if it is caught up (CaughtUp): the ADVERT it would send for a new recv
// must be fresh, its sequence number the next unit to deliver and its phase
// not before the sender's. The ADVERT is the engine's own: a copy of the
// engine is given a recv (and, if it has none, frame credits) and its
// frame is read; the next unit is the count the simulation delivered,
// the phases are compared with the simulation's own arithmetic. The one
// engine variable read is the sender's P_S, which nothing on the wire shows
// between two transfers (it moves when the sender drops a stale ADVERT). In
// indirect-only mode nothing is advertised and nothing is checked.
func (w *World) CheckCaughtUp(i int) error {
	if !w.CaughtUp(i) || w.cfg.Engine[i].Mode == dynproto.IndirectOnly {
		return nil
	}
	c := &w.cfg.Engine[i]
	f, ok := w.nextAdvert(i)
	if !ok {
		return fmt.Errorf("endpoint %c is caught up after %d units, but would not advertise a new recv", 'A'+i, w.ep[i].delivered)
	}
	if got := relSeq(f.Seq, c.PeerInitialSeq); got != int64(w.ep[i].delivered) {
		return fmt.Errorf("endpoint %c is caught up after %d units, but its next ADVERT would carry S_A=%d, %d from the start of the stream: the sender must judge it stale or fill it at the wrong place",
			'A'+i, w.ep[i].delivered, f.Seq, got)
	}
	sender := w.ep[1-i].eng.State()
	pa, ps := relPhase(f.Phase, c.PeerInitialPhase), relPhase(sender.PS, c.PeerInitialPhase)
	if pa < ps {
		return fmt.Errorf("endpoint %c is caught up after %d units, but its next ADVERT would carry P_A=%d, before the sender's P_S=%d (%d and %d from the start): the sender must judge it stale",
			'A'+i, w.ep[i].delivered, f.Phase, sender.PS, pa, ps)
	}
	return nil
}

// probeRecv is the id of the recv a probe posts on a copy of an engine.
const probeRecv = 1 << 62

// nextAdvert returns the ADVERT endpoint i's engine would send for a new
// recv now: a copy of it is given a recv of its AdvertMin (at least 1) and,
// while it sends no ADVERT for lack of frame credits, every credit.
func (w *World) nextAdvert(i int) (dynproto.Frame, bool) {
	e := engineOps.Clone(w.ep[i].eng)
	acts := e.PostRecv(nil, probeRecv, max(1, w.cfg.Engine[i].AdvertMin), false)
	for try := 0; ; try++ {
		for _, a := range acts {
			if a.Kind == dynproto.SendFrame && a.Frame.Type == dynproto.FrameAdvert && a.ID == probeRecv {
				return a.Frame, true
			}
		}
		if try == 3 {
			return dynproto.Frame{}, false
		}
		engineOps.GrantFrames(e)
		acts = e.Pump(acts[:0])
	}
}

// Finished reports, for a quiescent world, whether everything ended well:
// every send posted and completed, every byte or message sent was delivered
// (when the receiving script had room for it), and no frame is in flight.
// Where an endpoint closed, its peer's drain recvs must have seen the end of
// its stream (end of stream or ECONNRESET) after every unit of its
// completed sends, and the closed end owes nothing more. It returns an
// error describing what is stranded otherwise.
func (w *World) Finished() error {
	if w.err != nil {
		return w.err
	}
	for i := range w.ep {
		p := &w.ep[i]
		peer := &w.ep[1-i]
		for id, done := range p.sendDone {
			if !done {
				return fmt.Errorf("endpoint %c: send %d never completed (deadlock)", 'A'+i, id)
			}
		}
		if len(w.ch[i]) > 0 {
			return fmt.Errorf("frames still in flight to endpoint %c", 'A'+i)
		}
		if p.closed {
			continue
		}
		if p.nextSend < len(p.script.Sends) {
			return fmt.Errorf("endpoint %c: scripted sends not posted", 'A'+i)
		}
		if peer.closed {
			if p.script.DrainLen > 0 && !p.eof && !p.reset {
				return fmt.Errorf("endpoint %c: the closed peer's stream never ended (%d units delivered)", 'A'+i, p.delivered)
			}
			if c := w.completedUnits(1 - i); p.script.DrainLen > 0 && p.delivered < c {
				return fmt.Errorf("endpoint %c: %d units delivered, the closed peer completed sends of %d (lost at close)", 'A'+i, p.delivered, c)
			}
			continue
		}
		if p.script.DrainLen > 0 {
			var want uint64 = peer.sentBytes
			if w.cfg.Engine[i].Type == dynproto.SeqPacket {
				want = uint64(peer.nextSend)
			}
			if p.delivered != want {
				return fmt.Errorf("endpoint %c: %d of %d units delivered (stranded data)", 'A'+i, p.delivered, want)
			}
			if peer.script.Shutdown && !p.eof {
				return fmt.Errorf("endpoint %c: end of stream never reported", 'A'+i)
			}
		}
	}
	return nil
}
