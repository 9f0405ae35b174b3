package dynproto

import (
	"encoding/binary"
	"errors"
	"syscall"

	"github.com/exsgo/exs/dynproto/internal/mut"
	"github.com/exsgo/exs/internal/dynproto/hook"
)

// The model checker (proofs) and the simulator it drives
// (internal/dynproto/sim) need to copy an engine, to encode its state and to
// know which deliberate fault is compiled in. That is no part of the API: it
// is registered with the module's internal hook package instead of being
// exported.
func init() {
	hook.Register(hook.Ops[Engine]{Clone: (*Engine).clone, AppendKey: (*Engine).appendKey, GrantFrames: (*Engine).grantFrames})
	hook.Active = mut.Active
	hook.Mutants = make([]hook.Mutant, len(mut.All))
	for i, m := range mut.All {
		hook.Mutants[i] = hook.Mutant{Tag: m.Tag, Description: m.Description}
	}
}

// clone returns an independent copy of the engine, sharing no mutable state
// with it (hook.Ops.Clone).
func (e *Engine) clone() *Engine {
	c := *e
	c.sends = e.sends.Clone()
	c.writes = e.writes.Clone()
	c.adverts = e.adverts.Clone()
	c.recvs = e.recvs.Clone()
	c.segs = e.segs.Clone()
	return &c
}

// grantFrames gives the engine every frame credit the peer's buffers allow
// (hook.Ops.GrantFrames): for a copy that the simulation probes.
func (e *Engine) grantFrames() { e.fc = e.cfg.PeerFrames }

// appendKey appends a canonical encoding of the engine's state to b: two
// engines with the same configuration behave identically from now on if and
// only if their keys are equal (statistics excluded; hook.Ops.AppendKey).
func (e *Engine) appendKey(b []byte) []byte {
	// Each appends its values in order.
	u := func(vs ...uint64) {
		for _, v := range vs {
			b = binary.AppendUvarint(b, v)
		}
	}
	i := func(vs ...int) {
		for _, v := range vs {
			b = binary.AppendVarint(b, int64(v))
		}
	}
	t := func(vs ...bool) {
		for _, v := range vs {
			if v {
				b = append(b, 1)
			} else {
				b = append(b, 0)
			}
		}
	}
	t(e.dead)
	u(errCode(e.deadErr))
	t(e.gone)
	u(errCode(e.goneErr))
	i(e.fc, e.owed)
	t(e.slot, e.slotOwed)
	// Sender half.
	i(e.sends.Len())
	for k := 0; k < e.sends.Len(); k++ {
		s := e.sends.At(k)
		u(s.id, s.no)
		i(s.n, s.issued)
		t(s.all)
		i(s.writes)
		t(s.awaitAck)
		u(errCode(s.err))
	}
	i(e.cur)
	u(e.nextNo)
	i(e.writes.Len())
	for k := 0; k < e.writes.Len(); k++ {
		u(*e.writes.At(k))
	}
	i(e.adverts.Len())
	for k := 0; k < e.adverts.Len(); k++ {
		a := e.adverts.At(k)
		u(uint64(a.phase), uint64(a.seq), uint64(a.id))
		i(a.n, a.filled)
		t(a.waitAll)
		u(uint64(a.rkey), a.addr)
	}
	u(uint64(e.ps), uint64(e.ss))
	i(e.bs, e.wpos)
	t(e.shutdown, e.finSent, e.msgInRing, e.held, e.paused, e.pauseSent)
	// Receiver half.
	i(e.recvs.Len())
	for k := 0; k < e.recvs.Len(); k++ {
		r := e.recvs.At(k)
		u(r.id)
		i(r.n)
		t(r.waitAll)
		i(r.filled)
		b = append(b, r.state)
		t(r.stale)
		u(uint64(r.advert), uint64(r.phase))
		t(r.tooLong)
		t(r.unadvertised)
	}
	i(e.adv)
	u(uint64(e.pr), uint64(e.sr), uint64(e.sest), uint64(e.arr))
	i(e.br, e.ka, e.rpos, e.rwpos, e.segs.Len())
	for k := 0; k < e.segs.Len(); k++ {
		s := e.segs.At(k)
		i(s.n)
		t(s.eom)
	}
	i(e.unacked, e.msgs)
	t(e.ackTooLong)
	u(uint64(e.nextAdvert))
	t(e.fin, e.pausedAt, e.probing)
	return b
}

// errCode maps an error to a number for state keys: its errno if it has one.
func errCode(err error) uint64 {
	if err == nil {
		return 0
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return uint64(errno)
	}
	return 1 << 32
}
