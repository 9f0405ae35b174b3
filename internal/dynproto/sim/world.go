// Package sim runs two real dynproto engines against each other over
// simulated channels and memory, and checks every step against the
// protocol's safety properties independently of the engines' own checks.
//
// A World is deterministic: its enabled moves are listed by Moves and taken
// by Step, so that a randomized test can pick moves from a seeded generator,
// a fuzz target can pick them from the fuzzer's bytes, and a model checker
// can explore every interleaving (Clone and AppendKey support that). It is
// internal to this module: dynproto's randomized tests and fuzzer, and the
// model checker in proofs, use it.
//
// The model: endpoint 0 and endpoint 1 each run one Engine. Each direction
// has one FIFO channel carrying frames; the RDMA WRITEs a sender emits before
// a frame travel with that frame and are placed when it is delivered (RC
// ordering: a SEND is delivered only after every earlier WRITE is placed).
// Each endpoint's application follows a script: a list of send lengths (then
// shutdown) and a list of recvs; once its script's recvs are used up it posts
// "drain" recvs, one at a time, until the end of the stream. A script may
// also close its endpoint, at any point: the engine is aborted, frames on
// their way to it are dropped, and the peer learns that the connection went
// (PeerGone) after any prefix of the frames the closed end had sent, the
// rest being lost, as verbs allows for work requests not yet complete.
//
// Properties checked on every step (a violation stops the world):
//   - the bytes each recv completes with are exactly the next bytes of the
//     sent stream (stream mode), or exactly the next message (message mode),
//     in order, each byte once; a message longer than its recv fails both the
//     send and the recv with EMSGSIZE;
//   - a direct write lands only in a recv buffer that is posted, not yet
//     completed, never filled from the stream buffer, within its bounds and
//     into bytes not written before; no copy out of the stream buffer goes into
//     a recv that received a direct write;
//   - an indirect write lands only on stream-buffer bytes that are free (not
//     holding data not yet copied out, nor data still in flight);
//   - phases never decrease at either end (counted from the start of each
//     stream with the simulation's own arithmetic);
//   - every send completes once, with its full length (or, once the
//     connection went, with ECANCELED at the end that closed and ECONNRESET
//     at the other), sends and recvs in the order they were posted;
//   - a MSG_WAITALL recv completes with its full length, but at the end of
//     the stream or once the connection went;
//   - a message send fails with EMSGSIZE if and only if its message was
//     longer than the recv it met, and succeeds only once it met one;
//   - each transfer's frame announces exactly the bytes its writes carry,
//     from at most MaxGather sends on a stream, at most MaxIndirect bytes
//     into the stream buffer;
//   - the close rule: when a recv reports that the peer's stream ended
//     (end of stream or ECONNRESET), every byte (message) of every send the
//     peer completed has been delivered; ECONNRESET only after the peer
//     closed, and the end of stream only after its FIN and every byte;
//   - EOF marks exactly the recvs that report the end of the stream;
//   - the engines report no protocol error.
//
// Liveness is judged by the caller: Quiescent reports a state with no move
// left, and Finished whether everything was delivered and completed then.
package sim

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"syscall"

	"github.com/exsgo/exs/dynproto"
)

// Events are things that happened in a world, for a checker to report
// what its configurations reach: a bit is set once its event happened on
// the way to the current state.
type Events uint16

// The events a World records.
const (
	SeenEmptySend      Events = 1 << iota // a send of no bytes was posted
	SeenGather                            // a transfer gathered from several sends
	SeenTooLong                           // a message was longer than its recv
	SeenBatchedAck                        // one ACK reported several messages consumed
	SeenBatchedTooLong                    // ... the last of them too long
	SeenRepeatedPause                     // a sender paused a second time
	SeenShortWaitAll                      // a MSG_WAITALL recv completed short at the end of the stream
	SeenWrap                              // a frame carried a sequence number or phase past the wrap
)

var eventNames = [...]string{"empty-send", "gather", "too-long", "batched-ack", "batched-too-long", "repeated-pause", "short-waitall", "wrap"}

// String lists the events, separated by commas.
func (e Events) String() string {
	var names []string
	for k, n := range eventNames {
		if e&(1<<k) != 0 {
			names = append(names, n)
		}
	}
	return strings.Join(names, ",")
}

// Seen returns the events that happened on the way to this state.
func (w *World) Seen() Events { return w.seen }

// RecvOp is one recv in an application script.
type RecvOp struct {
	Len     int
	WaitAll bool
}

// Choose, as the length of a send or a recv in a Script, makes the
// application choose it when it posts: a send takes any length of
// SendChoices, a recv any of RecvChoices, and each choice is a move of its
// own, so that a checker explores every one.
const Choose = -1

// Script is what one endpoint's application does.
type Script struct {
	Sends    []int    // lengths of the sends it posts, in order (or Choose)
	Shutdown bool     // shut down after the last send
	Recvs    []RecvOp // recvs it posts, in order (a Len of Choose: chosen)
	// SendChoices and RecvChoices are the lengths (and flags) a send or
	// recv whose length is Choose may take.
	SendChoices []int
	RecvChoices []RecvOp
	// DrainLen is the length of the drain recvs posted after Recvs are
	// used up, while the peer's stream has not ended; 0 means none.
	DrainLen int
	// Close lets the application close its endpoint at any point.
	Close bool
}

// Config configures a World.
type Config struct {
	Engine  [2]dynproto.Config // per endpoint; must mirror each other
	Scripts [2]Script
	// Forge[i] makes endpoint i an adversary: in every state, each wrong
	// frame it could send next (CheckForgeries) must be refused by its
	// peer. Its engine is still the correct one: a forged frame is not a
	// move, since its peer, refusing it, ends the connection.
	Forge [2]bool
}

// MoveKind names a kind of step.
type MoveKind uint8

// Moves an endpoint's application or network can make.
const (
	MoveSend      MoveKind = iota + 1 // post the next scripted send
	MoveShutdown                      // shut down after the scripted sends
	MoveRecv                          // post the next scripted recv
	MoveDrainRecv                     // post a drain recv
	MoveCopy                          // copy out of the stream buffer
	MoveDeliver                       // deliver the head frame of the channel into this endpoint
	MoveWriteDone                     // complete this endpoint's oldest write whose data was placed
	MoveClose                         // the application closes this endpoint
	MoveLose                          // the frames in flight to this endpoint from its closed peer are lost
	// MoveWritesDone completes at once every write of this endpoint whose
	// data was placed, when there are two or more (Engine.WritesDone), and
	// checks that this is what as many MoveWriteDone do.
	MoveWritesDone
)

var moveNames = [...]string{"", "send", "shutdown", "recv", "drain-recv", "copy", "deliver", "write-done", "close", "lose", "writes-done"}

func (k MoveKind) String() string { return moveNames[k] }

// Move is one enabled step: a kind of step at an endpoint. A send or recv
// whose length the script leaves to a choice carries the chosen length (and
// flag) and has Chosen set.
type Move struct {
	End     uint8
	Kind    MoveKind
	Chosen  bool
	WaitAll bool
	Len     uint16
}

// String returns the move as "A:send", or with a chosen length as
// "A:send(2)" or "B:recv(3w)".
func (m Move) String() string {
	if !m.Chosen {
		return fmt.Sprintf("%c:%v", 'A'+m.End, m.Kind)
	}
	w := ""
	if m.WaitAll {
		w = "w"
	}
	return fmt.Sprintf("%c:%v(%d%s)", 'A'+m.End, m.Kind, m.Len, w)
}

type write struct {
	kind    dynproto.Kind
	data    []byte // snapshot of the source bytes
	ringOff int
	recv    uint64 // direct: target recv id
	off     int    // direct: offset in the recv
}

type message struct {
	frame  dynproto.Frame
	writes []write
	gone   bool // not a frame: the sender closed (PeerGone at delivery)
}

type recvBuf struct {
	id       uint64
	data     []byte
	direct   []bool // byte written by a direct write
	copied   bool   // received a copy from the stream buffer
	directed bool   // received a direct write
	done     bool
}

type endpoint struct {
	eng    *dynproto.Engine
	script Script

	// What the simulation saw of this endpoint's outgoing stream: every
	// unit it put into a transfer (bytes written on a stream, messages whose
	// last transfer went in message mode), every write it emitted.
	unitsSent     uint64
	writesEmitted int
	// The transfer being emitted: its writes so far (its frame follows
	// them) and their bytes.
	tWrites, tBytes int
	// verdict[m] is what the peer's recv made of message m of this
	// endpoint's (message mode): 0 not yet known, fits or tooLong.
	verdict []uint8
	pauses  int // PAUSE frames sent (coverage only)

	nextSend     int
	sendsDone    int   // sends completed (in post order)
	sendLens     []int // length of each posted send
	shut         bool
	sendStarts   []uint64 // stream offset (stream) or message number of each send
	sentBytes    uint64   // stream bytes posted
	sendDone     []bool
	sendErr      []error
	pendingWrite []write // writes emitted since the last frame
	writesPlaced int     // writes whose data reached the peer
	writesDone   int

	nextRecv  int
	drains    int
	recvsDone int       // recvs completed (in post order)
	recvs     []recvBuf // by recv id
	recvWait  []bool    // MSG_WAITALL of each posted recv
	pending   int       // recvs posted and not complete
	ring      []byte
	ringBusy  []bool
	busy      int    // stream-buffer bytes busy (data not copied out, or a write on its way)
	delivered uint64 // stream bytes (stream) or messages (message) delivered
	finIn     bool   // the peer's FIN was delivered
	eof       bool
	closed    bool // the application closed this endpoint
	reset     bool // a recv reported ECONNRESET

	// The highest phases seen of this endpoint's sender and receiver
	// halves, counted from the start of their streams (relPhase).
	maxPS, maxPR int64

	// What arrived of the peer's stream: units (bytes, or messages whose
	// last transfer arrived) and the stream-buffer offset the next indirect
	// transfer writes at.
	unitsIn uint64
	ringIn  int
	// The ADVERTs this endpoint sent, when its peer is an adversary.
	adverts []sentAdvert
}

// sentAdvert is an ADVERT an endpoint sent: its number, phase and recv, and
// whether an indirect transfer overtook it (arrived after it, before its
// recv received a direct write), which makes it stale.
type sentAdvert struct {
	id        uint32
	phase     dynproto.Phase
	recv      uint64
	overtaken bool
}

// World is two endpoints and the two channels between them. Not safe for
// concurrent use.
type World struct {
	cfg  *Config
	ep   [2]endpoint
	ch   [2][]message // ch[i]: frames travelling into endpoint i
	acts []dynproto.Action
	err  error
	seen Events
	// Trace, when non-nil, receives one line per action taken.
	Trace func(string)
}

// New builds a world from cfg. It fails if either engine configuration is
// invalid or the two do not mirror each other.
func New(cfg *Config) (*World, error) {
	w := &World{cfg: cfg}
	if err := checkMirror(&cfg.Engine); err != nil {
		return nil, err
	}
	for i := range w.ep {
		eng, err := dynproto.New(cfg.Engine[i])
		if err != nil {
			return nil, err
		}
		if err := checkScript(&cfg.Scripts[i]); err != nil {
			return nil, fmt.Errorf("endpoint %c: %w", 'A'+i, err)
		}
		p := &w.ep[i]
		p.eng = eng
		p.script = cfg.Scripts[i]
		p.ring = make([]byte, cfg.Engine[i].RecvBuffer)
		p.ringBusy = make([]bool, cfg.Engine[i].RecvBuffer)
	}
	return w, nil
}

// checkMirror checks that each engine's view of its peer is the peer's
// own configuration.
func checkMirror(c *[2]dynproto.Config) error {
	for i := range 2 {
		a, b := &c[i], &c[1-i]
		if a.PeerRecvBuffer != b.RecvBuffer || a.PeerFrames != b.Frames ||
			a.PeerInitialSeq != b.InitialSeq || a.PeerInitialPhase != b.InitialPhase || a.Mode != b.Mode || a.Type != b.Type {
			return fmt.Errorf("endpoint %c's configuration does not mirror endpoint %c's", 'A'+i, 'A'+1-i)
		}
	}
	return nil
}

// checkScript checks that every length a script may post is one a Move
// can carry, and that every Choose has something to choose from.
func checkScript(sc *Script) error {
	ok := func(n int) bool { return n >= 0 && n <= math.MaxUint16 }
	for _, n := range sc.SendChoices {
		if !ok(n) {
			return fmt.Errorf("send choice %d out of range", n)
		}
	}
	for _, op := range sc.RecvChoices {
		if !ok(op.Len) {
			return fmt.Errorf("recv choice %d out of range", op.Len)
		}
	}
	for _, n := range sc.Sends {
		if n == Choose && len(sc.SendChoices) == 0 {
			return errors.New("a send to choose, with no choices")
		}
		if n != Choose && !ok(n) {
			return fmt.Errorf("send of %d out of range", n)
		}
	}
	for _, op := range sc.Recvs {
		if op.Len == Choose && len(sc.RecvChoices) == 0 {
			return errors.New("a recv to choose, with no choices")
		}
		if op.Len != Choose && !ok(op.Len) {
			return fmt.Errorf("recv of %d out of range", op.Len)
		}
	}
	return nil
}

// Err returns the first violation found, or nil.
func (w *World) Err() error { return w.err }

// Engine returns endpoint i's engine (for inspection only).
func (w *World) Engine(i int) *dynproto.Engine { return w.ep[i].eng }

// Stats returns endpoint i's engine statistics.
func (w *World) Stats(i int) dynproto.Stats { return w.ep[i].eng.Stats() }

// streamByte is the content of byte k of the stream sent by endpoint from.
func streamByte(from int, k uint64) byte { return byte(k*131 + uint64(from)*71 + k>>8*17 + 7) }

func messageByte(from int, msg uint64, k int) byte {
	return byte(msg*29 + uint64(k)*131 + uint64(from)*71 + 3)
}

// Moves appends the enabled moves to ms and returns it.
func (w *World) Moves(ms []Move) []Move {
	if w.err != nil {
		return ms
	}
	for i := range w.ep {
		p := &w.ep[i]
		e := uint8(i)
		if p.closed {
			continue
		}
		if p.script.Close {
			ms = append(ms, Move{End: e, Kind: MoveClose})
		}
		if p.nextSend < len(p.script.Sends) {
			if p.script.Sends[p.nextSend] == Choose {
				for _, n := range p.script.SendChoices {
					ms = append(ms, Move{End: e, Kind: MoveSend, Chosen: true, Len: uint16(n)})
				}
			} else {
				ms = append(ms, Move{End: e, Kind: MoveSend})
			}
		} else if p.script.Shutdown && !p.shut {
			ms = append(ms, Move{End: e, Kind: MoveShutdown})
		}
		if p.nextRecv < len(p.script.Recvs) {
			if p.script.Recvs[p.nextRecv].Len == Choose {
				for _, op := range p.script.RecvChoices {
					ms = append(ms, Move{End: e, Kind: MoveRecv, Chosen: true, Len: uint16(op.Len), WaitAll: op.WaitAll})
				}
			} else {
				ms = append(ms, Move{End: e, Kind: MoveRecv})
			}
		} else if p.script.DrainLen > 0 && !p.eof && !p.reset && p.pending == 0 {
			ms = append(ms, Move{End: e, Kind: MoveDrainRecv})
		}
		if p.eng.CanCopy() {
			ms = append(ms, Move{End: e, Kind: MoveCopy})
		}
		if len(w.ch[i]) > 0 {
			ms = append(ms, Move{End: e, Kind: MoveDeliver})
			if len(w.ch[i]) > 1 && w.ch[i][len(w.ch[i])-1].gone {
				ms = append(ms, Move{End: e, Kind: MoveLose})
			}
		}
		if p.writesDone < p.writesPlaced {
			ms = append(ms, Move{End: e, Kind: MoveWriteDone})
		}
		if p.writesDone+1 < p.writesPlaced {
			ms = append(ms, Move{End: e, Kind: MoveWritesDone})
		}
	}
	return ms
}

func (w *World) failf(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf(format, args...)
	}
}

// Step takes move m, which must be enabled, and checks the properties.
func (w *World) Step(m Move) error {
	if w.err != nil {
		return w.err
	}
	i := int(m.End)
	p := &w.ep[i]
	acts := w.acts[:0]
	var err error
	switch m.Kind {
	case MoveSend:
		n := p.script.Sends[p.nextSend]
		if n == Choose {
			n = int(m.Len)
		}
		id := uint64(p.nextSend)
		p.nextSend++
		if w.cfg.Engine[i].Type == dynproto.SeqPacket {
			p.sendStarts = append(p.sendStarts, uint64(len(p.sendStarts)))
		} else {
			p.sendStarts = append(p.sendStarts, p.sentBytes)
		}
		p.sentBytes += uint64(n)
		if n == 0 {
			w.seen |= SeenEmptySend
		}
		p.sendLens = append(p.sendLens, n)
		p.sendDone = append(p.sendDone, false)
		p.sendErr = append(p.sendErr, nil)
		acts = p.eng.PostSend(acts, id, n)
	case MoveShutdown:
		p.shut = true
		acts = p.eng.Shutdown(acts)
	case MoveRecv, MoveDrainRecv:
		var op RecvOp
		if m.Kind == MoveRecv {
			op = p.script.Recvs[p.nextRecv]
			if op.Len == Choose {
				op = RecvOp{Len: int(m.Len), WaitAll: m.WaitAll}
			}
			p.nextRecv++
		} else {
			op = RecvOp{Len: p.script.DrainLen}
			p.drains++
		}
		id := uint64(len(p.recvs))
		p.recvs = append(p.recvs, recvBuf{id: id, data: make([]byte, op.Len), direct: make([]bool, op.Len)})
		p.recvWait = append(p.recvWait, op.WaitAll)
		p.pending++
		acts = p.eng.PostRecv(acts, id, op.Len, op.WaitAll)
	case MoveCopy:
		acts = p.eng.Copy(acts)
	case MoveClose:
		p.closed = true
		p.pendingWrite = nil
		w.ch[i] = nil
		if !w.ep[1-i].closed {
			w.ch[1-i] = append(w.ch[1-i], message{gone: true})
		}
		acts = p.eng.Abort(acts, syscall.ECANCELED)
	case MoveLose:
		w.ch[i] = w.ch[i][:0]
		acts = p.eng.PeerGone(acts, syscall.ECONNRESET)
	case MoveDeliver:
		msg := w.ch[i][0]
		w.ch[i] = w.ch[i][1:]
		if msg.gone {
			acts = p.eng.PeerGone(acts, syscall.ECONNRESET)
			break
		}
		w.place(i, msg.writes)
		w.ep[1-i].writesPlaced += len(msg.writes)
		f := msg.frame
		w.arrived(i, &msg)
		acts, err = p.eng.OnFrame(acts, &f)
		if err != nil {
			w.failf("endpoint %c rejected %v: %v", 'A'+i, msg.frame, err)
		}
	case MoveWriteDone:
		p.writesDone++
		acts, err = p.eng.WriteDone(acts)
		if err != nil {
			w.failf("endpoint %c: %v", 'A'+i, err)
		}
	case MoveWritesDone:
		n := p.writesPlaced - p.writesDone
		p.writesDone += n
		acts = w.writesDone(i, acts, n)
	}
	w.apply(i, acts)
	w.acts = acts[:0]
	w.checkPhases(i)
	return w.err
}

// writesDone completes n writes of endpoint i with one WritesDone and
// checks it against n calls of WriteDone on a copy of the engine: the same
// actions, in the same order, and the same state after.
func (w *World) writesDone(i int, acts []dynproto.Action, n int) []dynproto.Action {
	p := &w.ep[i]
	c := engineOps.Clone(p.eng)
	var want []dynproto.Action
	var err error
	for range n {
		if want, err = c.WriteDone(want); err != nil {
			w.failf("endpoint %c: %v", 'A'+i, err)
			return acts
		}
	}
	acts, err = p.eng.WritesDone(acts, n)
	if err != nil {
		w.failf("endpoint %c: %v", 'A'+i, err)
		return acts
	}
	if !slices.EqualFunc(acts, want, sameAction) {
		w.failf("endpoint %c: WritesDone(%d) gave %v, %d WriteDone gave %v", 'A'+i, n, acts, n, want)
	} else if !bytes.Equal(engineOps.AppendKey(p.eng, nil), engineOps.AppendKey(c, nil)) {
		w.failf("endpoint %c: WritesDone(%d) left another state than %d WriteDone", 'A'+i, n, n)
	}
	return acts
}

// sameAction reports whether two actions are equal, their errors by
// identity.
func sameAction(a, b dynproto.Action) bool { return a == b }

func (w *World) trace(i int, format string, args ...any) {
	if w.Trace != nil {
		w.Trace(fmt.Sprintf("%c: ", 'A'+i) + fmt.Sprintf(format, args...))
	}
}

// Quiescent reports whether no move is enabled.
func (w *World) Quiescent() bool { return len(w.Moves(nil)) == 0 }
