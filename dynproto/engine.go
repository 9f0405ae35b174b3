package dynproto

import (
	"fmt"

	"github.com/exsgo/exs/internal/fifo"
)

// Engine is one end of a connection running the dynamic protocol: a sender
// half for the outgoing stream and a receiver half for the incoming one.
//
// The engine is pure: it performs no I/O, starts no goroutines, reads no
// clock and logs nothing. Each input is a method call; each method appends
// the actions it decides on to the caller's slice and returns it, so that a
// caller reusing its slice allocates nothing in steady state. The caller
// carries the actions out in order.
//
// An Engine is not safe for concurrent use: the caller serialises calls.
//
// Sender half (per transfer, after IPDPS 2014, algorithm 1):
//
//	          fresh ADVERT at head of q_A               no usable ADVERT, b_s > 0
//	indirect ─────────────────────────────► direct ─────────────────────────────► indirect
//	(P_S even)  P_S = P_A                   (P_S odd)   P_S = NEXT_PHASE(P_S)
//	   │ stale ADVERT (P_A < P_S or S_A < S_S): drop it; if P_S < P_A, P_S = NEXT_PHASE(P_A)
//
// Receiver half (algorithms 2-4): a recv is advertised only when the stream
// buffer is empty, no recv advertised in an earlier direct phase is still
// to be filled from it (b_r = k_a = 0) and no earlier recv waits
// unadvertised, moving P_r to a direct phase; an indirect transfer moves P_r
// to an indirect phase and makes every outstanding ADVERT stale (k_a).
type Engine struct {
	cfg Config

	// The end of the connection (departure 10).
	dead    bool  // aborted
	deadErr error // the abort's error
	gone    bool  // the connection is gone (PeerGone); the stream buffer still delivers
	goneErr error // PeerGone's error

	frameCredits // frame flow control, both ways (credits.go)
	sender       // the sender half (sender.go)
	receiver     // the receiver half (receiver.go)

	stats Stats
}

// New returns an engine for one end of a connection.
func New(cfg Config) (*Engine, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.AckThreshold == 0 {
		cfg.AckThreshold = max(1, cfg.RecvBuffer/2)
	}
	if cfg.MaxGather == 0 {
		cfg.MaxGather = 8
	}
	return &Engine{
		cfg:          cfg,
		frameCredits: frameCredits{fc: cfg.PeerFrames, slot: true},
		sender:       sender{bs: cfg.PeerRecvBuffer, ss: cfg.InitialSeq, ps: cfg.InitialPhase},
		receiver: receiver{
			sr: cfg.PeerInitialSeq, sest: cfg.PeerInitialSeq, arr: cfg.PeerInitialSeq,
			pr: cfg.PeerInitialPhase,
		},
	}, nil
}

// Config returns the engine's configuration, with defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats { return e.stats }

// Dead reports whether the engine was aborted.
func (e *Engine) Dead() bool { return e.dead }

// Gone reports whether PeerGone was called (and Abort was not).
func (e *Engine) Gone() bool { return e.gone && !e.dead }

// Done reports whether both directions have ended in order: this end's FIN
// has been sent and all its sends completed, and the peer's FIN has arrived
// and every byte before it has been copied out.
func (e *Engine) Done() bool {
	return e.finSent && e.sends.Len() == 0 && e.fin && e.br == 0 && e.segs.Len() == 0
}

// Pump lets the engine act on its current state: send ACKs, judge new recvs
// for ADVERTs (algorithm 2), start transfers for queued sends (algorithm 1),
// send a FIN after the last byte once shut down, answer a PAUSE, and return
// frame credits. Every input method pumps; call Pump directly after
// QueueSend.
func (e *Engine) Pump(out []Action) []Action {
	if e.dead {
		return out
	}
	out = e.finishAtEOF(out)
	if e.gone {
		return e.finishGone(out)
	}
	out = e.pumpAck(out)
	out = e.pumpAdverts(out)
	out = e.pumpSends(out)
	if e.finDue() {
		out = e.sendFin(out)
	}
	out = e.pumpResume(out)
	if e.creditDue() {
		out = e.sendCredit(out)
	}
	return out
}

// OnFrame handles a frame from the peer. The caller must repost the frame's
// receive buffer before the peer can use it again; the engine counts it as
// reposted and reports it to the peer as a credit. An error means the peer
// broke the protocol: the caller should Abort.
func (e *Engine) OnFrame(out []Action, f *Frame) ([]Action, error) {
	if e.dead {
		return out, nil
	}
	if e.gone {
		return out, fmt.Errorf("%w: frame after the connection went", ErrProtocol)
	}
	if err := e.onAnyFrame(f); err != nil {
		return out, err
	}
	var err error
	switch f.Type {
	case FrameAdvert:
		err = e.onAdvert(f)
	case FrameAck:
		out, err = e.onAck(out, f)
	case FrameDirect:
		out, err = e.onDirect(out, f)
	case FrameIndirect:
		err = e.onIndirect(f)
	case FrameFin:
		out, err = e.onFin(out, f)
	case FramePause:
		err = e.onPause(f)
	case FrameCredit:
	default:
		err = fmt.Errorf("%w: frame type %v", ErrProtocol, f.Type)
	}
	if err != nil {
		return out, err
	}
	return e.Pump(out), nil
}

// Abort fails the connection: every posted send and recv completes with err
// (in post order: sends first, then recvs), and so does every later post.
// Outstanding writes need no WriteDone any more.
func (e *Engine) Abort(out []Action, err error) []Action {
	if e.dead {
		return out
	}
	e.dead, e.deadErr = true, err
	for e.sends.Len() > 0 {
		s := e.sends.Pop()
		out = append(out, Action{Kind: SendDone, ID: s.id, Err: err})
	}
	for e.recvs.Len() > 0 {
		r := e.recvs.Pop()
		out = append(out, Action{Kind: RecvDone, ID: r.id, Len: r.filled, Err: err})
	}
	e.cur, e.adv = 0, 0
	e.writes = fifo.Queue[uint64]{}
	return out
}

// hinting reports whether this connection uses the held-recv hint
// (departure 11): dynamic mode on a stream, unless turned off.
func (e *Engine) hinting() bool {
	return e.cfg.Mode == Dynamic && e.cfg.Type == Stream && !e.cfg.NoHeldHint
}

// hintMin is Config.HintMin for a stream buffer of ring bytes.
func (e *Engine) hintMin(ring int) int {
	if e.cfg.HintMin > 0 {
		return e.cfg.HintMin
	}
	return max(1, ring/32)
}
