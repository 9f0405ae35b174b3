package sim

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/exsgo/exs/dynproto"
	"github.com/exsgo/exs/internal/dynproto/hook"
)

// engineOps copies an engine and encodes its state, for Clone and AppendKey.
var engineOps = hook.Engine[dynproto.Engine]()

// Clone returns an independent copy of the world (Trace is not copied).
func (w *World) Clone() *World {
	c := &World{cfg: w.cfg, err: w.err}
	for i := range w.ep {
		p := &w.ep[i]
		q := &c.ep[i]
		*q = *p
		q.eng = engineOps.Clone(p.eng)
		q.sendStarts = append([]uint64(nil), p.sendStarts...)
		q.sendLens = append([]int(nil), p.sendLens...)
		q.recvWait = append([]bool(nil), p.recvWait...)
		q.sendDone = append([]bool(nil), p.sendDone...)
		q.sendErr = append([]error(nil), p.sendErr...)
		q.verdict = append([]uint8(nil), p.verdict...)
		q.adverts = append([]sentAdvert(nil), p.adverts...)
		q.pendingWrite = append([]write(nil), p.pendingWrite...) // write data is never mutated
		q.recvs = make([]recvBuf, len(p.recvs))
		for k, r := range p.recvs {
			r.data = append([]byte(nil), r.data...)
			r.direct = append([]bool(nil), r.direct...)
			q.recvs[k] = r
		}
		q.ring = append([]byte(nil), p.ring...)
		q.ringBusy = append([]bool(nil), p.ringBusy...)
		c.ch[i] = append([]message(nil), w.ch[i]...)
	}
	return c
}

// AppendKey appends a canonical encoding of the world's state to b. Worlds
// with equal keys (and the same Config) have the same future. Memory contents
// are left out: they are a function of the rest as long as no violation has
// been found, and every write and copy is checked when it happens.
func (w *World) AppendKey(b []byte) []byte {
	for i := range w.ep {
		p := &w.ep[i]
		b = engineOps.AppendKey(p.eng, b)
		b = binary.AppendUvarint(b, uint64(p.nextSend))
		b = binary.AppendUvarint(b, uint64(p.nextRecv))
		b = binary.AppendUvarint(b, uint64(p.drains))
		b = binary.AppendUvarint(b, uint64(p.writesPlaced))
		b = binary.AppendUvarint(b, uint64(p.writesDone))
		b = binary.AppendUvarint(b, p.delivered)
		b = binary.AppendUvarint(b, p.unitsSent)
		b = binary.AppendUvarint(b, uint64(p.writesEmitted))
		b = append(b, boolByte(p.shut), boolByte(p.eof), boolByte(p.closed), boolByte(p.reset), boolByte(p.finIn))
		b = binary.AppendUvarint(b, uint64(len(p.verdict)))
		b = append(b, p.verdict...)
		b = binary.AppendUvarint(b, p.unitsIn)
		b = binary.AppendUvarint(b, uint64(p.ringIn))
		b = binary.AppendUvarint(b, uint64(len(p.adverts)))
		for _, a := range p.adverts {
			b = binary.AppendUvarint(b, uint64(a.id))
			b = binary.AppendUvarint(b, uint64(a.phase))
			b = binary.AppendUvarint(b, a.recv)
			b = append(b, boolByte(a.overtaken))
		}
		for k, d := range p.sendDone {
			b = append(b, boolByte(d))
			b = binary.AppendUvarint(b, uint64(p.sendLens[k]))
		}
		for k, r := range p.recvs {
			b = append(b, boolByte(r.done), boolByte(r.copied), boolByte(r.directed), boolByte(p.recvWait[k]))
			b = binary.AppendUvarint(b, uint64(len(r.direct)))
			for _, d := range r.direct {
				b = append(b, boolByte(d))
			}
		}
		for _, busy := range p.ringBusy {
			b = append(b, boolByte(busy))
		}
		b = binary.AppendUvarint(b, uint64(len(p.pendingWrite)))
		b = binary.AppendUvarint(b, uint64(len(w.ch[i])))
		var fb [dynproto.FrameSize]byte
		for _, m := range w.ch[i] {
			if m.gone {
				b = append(b, 0xff)
				continue
			}
			m.frame.Encode(fb[:])
			b = append(b, fb[:]...)
			b = binary.AppendUvarint(b, uint64(len(m.writes)))
			for _, wr := range m.writes {
				b = binary.AppendUvarint(b, uint64(wr.kind))
				b = binary.AppendUvarint(b, uint64(wr.ringOff))
				b = binary.AppendUvarint(b, wr.recv)
				b = binary.AppendUvarint(b, uint64(wr.off))
				b = binary.AppendUvarint(b, uint64(len(wr.data)))
			}
		}
	}
	return b
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// Describe returns a one-line summary of both engines' protocol variables,
// for traces.
func (w *World) Describe() string {
	var sb strings.Builder
	for i := range w.ep {
		s := w.ep[i].eng.State()
		if i > 0 {
			sb.WriteString(" | ")
		}
		fmt.Fprintf(&sb, "%c: P_S=%d S_S=%d b_s=%d q_A=%d sends=%d  P_r=%d S_r=%d S'_r=%d b_r=%d k_a=%d k_b=%d recvs=%d fc=%d fin=%v/%v",
			'A'+i, s.PS, s.SS, s.BS, s.Adverts, s.Sends, s.PR, s.SR, s.SEst, s.BR, s.KA, s.KB, s.Recvs, s.FrameCredits, s.FinSent, s.FinReceived)
	}
	return sb.String()
}
