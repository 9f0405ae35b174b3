package dynproto

// State is a snapshot of an engine's protocol variables, named as in the
// IPDPS 2014 algorithms: for diagnostics and traces, and for a caller that
// needs to know where the connection stands (exs reads FinSent, Sends and
// FinReceived to tell whether a shutdown has completed).
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
	KB       int   // k_b: recvs waiting unadvertised (counted, not kept)
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
		PS: e.ps, SS: e.ss, BS: e.bs, Adverts: e.adverts.Len(), Sends: e.sends.Len(), Writes: e.writes.Len(), Held: e.held, Paused: e.paused,
		PR: e.pr, SR: e.sr, SEst: e.sest, BR: e.br, KA: e.ka, KB: e.waiting(), Recvs: e.recvs.Len(), PausedAt: e.pausedAt,
		FrameCredits: e.fc, Owed: e.owed, FinSent: e.finSent, FinReceived: e.fin, Dead: e.dead, Gone: e.gone,
	}
}

// waiting counts the recvs waiting unadvertised (k_b): the engine keeps no
// count of its own, since pumpAdverts reads the recvs themselves.
func (e *Engine) waiting() int {
	n := 0
	for i := e.adv; i < e.recvs.Len(); i++ {
		if e.recvs.At(i).state == recvWaiting {
			n++
		}
	}
	return n
}
