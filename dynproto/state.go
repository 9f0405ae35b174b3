package dynproto

import (
	"encoding/binary"
	"errors"
	"syscall"
)

// State is a snapshot of an engine's protocol variables, named as in the
// IPDPS 2014 algorithms, for tests, traces and model checkers.
type State struct {
	// Sender half.
	PS      Phase // P_S
	SS      Seq   // S_S
	BS      int   // b_s: byte credits for the peer's stream buffer
	Adverts int   // ADVERTs in q_A
	Sends   int   // sends not yet complete
	Writes  int   // writes outstanding
	Held    bool  // the peer's last frame carried FlagHeld
	Paused  bool  // waiting for the ADVERTs FlagHeld promised

	// Receiver half.
	PR       Phase // P_r
	SR       Seq   // S_r
	SEst     Seq   // S'_r
	BR       int   // b_r
	KA       int   // k_a
	KB       int   // k_b
	Recvs    int   // recvs not yet complete
	PausedAt bool  // a PAUSE arrived and is not yet answered

	FrameCredits int // regular frames this end may send
	Owed         int // frame credits to return to the peer
	FinSent      bool
	FinReceived  bool
	Dead         bool
	Gone         bool // PeerGone: the connection went, the stream buffer still delivers
}

// State returns a snapshot of the engine's protocol variables.
func (e *Engine) State() State {
	return State{
		PS: e.ps, SS: e.ss, BS: e.bs, Adverts: e.adverts.len(), Sends: e.sends.len(), Writes: e.writes.len(), Held: e.held, Paused: e.paused,
		PR: e.pr, SR: e.sr, SEst: e.sest, BR: e.br, KA: e.ka, KB: e.kb, Recvs: e.recvs.len(), PausedAt: e.pausedAt,
		FrameCredits: e.fc, Owed: e.owed, FinSent: e.finSent, FinReceived: e.fin, Dead: e.dead, Gone: e.gone,
	}
}

// Clone returns an independent copy of the engine, sharing no mutable state
// with it. Model checkers use it to branch.
func (e *Engine) Clone() *Engine {
	c := *e
	c.sends = e.sends.clone()
	c.writes = e.writes.clone()
	c.adverts = e.adverts.clone()
	c.recvs = e.recvs.clone()
	c.segs = e.segs.clone()
	return &c
}

// AppendKey appends a canonical encoding of the engine's state to b: two
// engines with the same configuration behave identically from now on if and
// only if their keys are equal (statistics excluded). Model checkers use it
// to recognise states already visited.
func (e *Engine) AppendKey(b []byte) []byte {
	u := func(v uint64) { b = binary.AppendUvarint(b, v) }
	i := func(v int) { b = binary.AppendVarint(b, int64(v)) }
	t := func(v bool) {
		if v {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	}
	t(e.dead)
	u(errCode(e.deadErr))
	t(e.gone)
	u(errCode(e.goneErr))
	i(e.fc)
	i(e.owed)
	t(e.slot)
	t(e.slotOwed)
	// Sender half.
	i(e.sends.len())
	for k := 0; k < e.sends.len(); k++ {
		s := e.sends.at(k)
		u(s.id)
		u(s.no)
		i(s.n)
		i(s.issued)
		t(s.all)
		i(s.writes)
		t(s.awaitAck)
		u(errCode(s.err))
	}
	i(e.cur)
	u(e.nextNo)
	i(e.writes.len())
	for k := 0; k < e.writes.len(); k++ {
		u(*e.writes.at(k))
	}
	i(e.adverts.len())
	for k := 0; k < e.adverts.len(); k++ {
		a := e.adverts.at(k)
		u(uint64(a.phase))
		u(uint64(a.seq))
		u(uint64(a.id))
		i(a.n)
		i(a.filled)
		t(a.waitAll)
		u(uint64(a.rkey))
		u(a.addr)
	}
	u(uint64(e.ps))
	u(uint64(e.ss))
	i(e.bs)
	i(e.wpos)
	t(e.shutdown)
	t(e.finSent)
	t(e.msgInRing)
	t(e.held)
	t(e.paused)
	t(e.pauseSent)
	// Receiver half.
	i(e.recvs.len())
	for k := 0; k < e.recvs.len(); k++ {
		r := e.recvs.at(k)
		u(r.id)
		i(r.n)
		t(r.waitAll)
		i(r.filled)
		b = append(b, r.state)
		t(r.stale)
		u(uint64(r.advert))
		u(uint64(r.phase))
		t(r.tooLong)
	}
	i(e.adv)
	u(uint64(e.pr))
	u(uint64(e.sr))
	u(uint64(e.sest))
	u(uint64(e.arr))
	i(e.br)
	i(e.ka)
	i(e.kb)
	i(e.rpos)
	i(e.rwpos)
	i(e.segs.len())
	for k := 0; k < e.segs.len(); k++ {
		s := e.segs.at(k)
		i(s.n)
		t(s.eom)
	}
	i(e.unacked)
	i(e.msgs)
	t(e.ackTooLong)
	u(uint64(e.nextAdvert))
	t(e.fin)
	t(e.pausedAt)
	t(e.probing)
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
