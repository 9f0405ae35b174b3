package sim

import (
	"fmt"
	"syscall"

	"github.com/exsgo/exs/dynproto"
)

func (w *World) sendDone(i int, a dynproto.Action) {
	p := &w.ep[i]
	if a.ID >= uint64(len(p.sendDone)) || p.sendDone[a.ID] {
		w.failf("endpoint %c: send %d completed twice or never posted", 'A'+i, a.ID)
		return
	}
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
	}
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
	r := &p.recvs[a.ID]
	r.done = true
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
		}
		return
	}
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

func (w *World) checkPhases(i int) {
	p := &w.ep[i]
	s := p.eng.State()
	if s.PS.Before(p.maxPS) || s.PR.Before(p.maxPR) {
		w.failf("endpoint %c: phase went backwards (P_S %d after %d, P_r %d after %d)", 'A'+i, s.PS, p.maxPS, s.PR, p.maxPR)
	}
	p.maxPS, p.maxPR = s.PS, s.PR
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
