// Package sim runs two real dynproto engines against each other over
// simulated channels and memory, and checks every step against the
// protocol's safety properties independently of the engines' own checks.
//
// A World is deterministic: its enabled moves are listed by Moves and taken
// by Step, so that a randomized test can pick moves from a seeded generator,
// a fuzz target can pick them from the fuzzer's bytes, and a model checker
// can explore every interleaving (Clone and AppendKey support that).
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
//   - phases never decrease at either end;
//   - every send completes once, with its full length (or, once the
//     connection went, with ECANCELED at the end that closed and ECONNRESET
//     at the other);
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
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"syscall"

	"github.com/exsgo/exs/dynproto"
	"github.com/exsgo/exs/internal/dynproto/hook"
)

// engineOps copies an engine and encodes its state, for Clone and AppendKey.
var engineOps = hook.Engine[dynproto.Engine]()

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
)

var moveNames = [...]string{"", "send", "shutdown", "recv", "drain-recv", "copy", "deliver", "write-done", "close", "lose"}

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

	nextSend     int
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
	recvs     []recvBuf // by recv id
	recvWait  []bool    // MSG_WAITALL of each posted recv
	ring      []byte
	ringBusy  []bool
	delivered uint64 // stream bytes (stream) or messages (message) delivered
	eof       bool
	closed    bool // the application closed this endpoint
	reset     bool // a recv reported ECONNRESET

	maxPS, maxPR dynproto.Phase
}

// World is two endpoints and the two channels between them. Not safe for
// concurrent use.
type World struct {
	cfg  *Config
	ep   [2]endpoint
	ch   [2][]message // ch[i]: frames travelling into endpoint i
	acts []dynproto.Action
	err  error
	// Trace, when non-nil, receives one line per action taken.
	Trace func(string)
}

// New builds a world from cfg. It fails if either engine configuration is
// invalid.
func New(cfg *Config) (*World, error) {
	w := &World{cfg: cfg}
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

// streamByte is the content of byte k of the stream sent by endpoint from.
func streamByte(from int, k uint64) byte { return byte(k*131 + uint64(from)*71 + k>>8*17 + 7) }

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
		} else if p.script.DrainLen > 0 && !p.eof && !p.reset && p.eng.State().Recvs == 0 {
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
	}
	w.apply(i, acts)
	w.acts = acts[:0]
	w.checkPhases(i)
	return w.err
}

func (w *World) trace(i int, format string, args ...any) {
	if w.Trace != nil {
		w.Trace(fmt.Sprintf("%c: ", 'A'+i) + fmt.Sprintf(format, args...))
	}
}

// apply carries out endpoint i's actions.
func (w *World) apply(i int, acts []dynproto.Action) {
	p := &w.ep[i]
	peer := &w.ep[1-i]
	seqpacket := w.cfg.Engine[i].Type == dynproto.SeqPacket
	for _, a := range acts {
		w.trace(i, "%v", a)
		switch a.Kind {
		case dynproto.WriteDirect, dynproto.WriteIndirect:
			if a.ID >= uint64(len(p.sendStarts)) || a.Off < 0 || a.Off+a.Len > p.sendLens[a.ID] ||
				a.Len <= 0 && !(a.Len == 0 && a.Kind == dynproto.WriteDirect && seqpacket && p.sendLens[a.ID] == 0) {
				w.failf("endpoint %c: write of send %d [%d:+%d] outside the send", 'A'+i, a.ID, a.Off, a.Len)
				return
			}
			if peer.closed {
				// The closed end's memory is gone: the write never lands,
				// and its frame (dropped too) never completes it.
				continue
			}
			wr := write{kind: a.Kind, data: make([]byte, a.Len)}
			for k := range wr.data {
				if seqpacket {
					wr.data[k] = messageByte(i, a.ID, a.Off+k)
				} else {
					wr.data[k] = streamByte(i, p.sendStarts[a.ID]+uint64(a.Off+k))
				}
			}
			if a.Kind == dynproto.WriteIndirect {
				wr.ringOff = a.RingOff
				if a.RingOff < 0 || a.RingOff+a.Len > len(peer.ring) {
					w.failf("endpoint %c: indirect write [%d:+%d] outside the stream buffer of %d", 'A'+i, a.RingOff, a.Len, len(peer.ring))
					return
				}
				for k := a.RingOff; k < a.RingOff+a.Len; k++ {
					if peer.ringBusy[k] {
						w.failf("endpoint %c: indirect write over stream-buffer byte %d that is not free (overrun)", 'A'+i, k)
						return
					}
					peer.ringBusy[k] = true
				}
			} else {
				if a.RKey == 0 || uint64(a.RKey-1) >= uint64(len(peer.recvs)) {
					w.failf("endpoint %c: direct write with unknown key %#x", 'A'+i, a.RKey)
					return
				}
				r := &peer.recvs[a.RKey-1]
				off := int(a.Addr)
				switch {
				case r.done:
					w.failf("endpoint %c: direct write into recv %d, already complete", 'A'+i, r.id)
				case r.copied:
					w.failf("endpoint %c: direct write into recv %d, which was filled from the stream buffer", 'A'+i, r.id)
				case off < 0 || off+a.Len > len(r.data):
					w.failf("endpoint %c: direct write [%d:+%d] outside the advertised buffer of %d bytes", 'A'+i, off, a.Len, len(r.data))
				}
				if w.err != nil {
					return
				}
				for k := off; k < off+a.Len; k++ {
					if r.direct[k] {
						w.failf("endpoint %c: direct write over byte %d of recv %d, written before", 'A'+i, k, r.id)
						return
					}
					r.direct[k] = true
				}
				r.directed = true
				wr.recv, wr.off = r.id, off
			}
			p.pendingWrite = append(p.pendingWrite, wr)
		case dynproto.SendFrame:
			f := a.Frame
			if f.Type == dynproto.FrameAdvert {
				f.RKey = uint32(a.ID) + 1 // the world's key for recv a.ID
				f.Addr = 0
			}
			if !peer.closed {
				w.ch[1-i] = append(w.ch[1-i], message{frame: f, writes: p.pendingWrite})
			}
			p.pendingWrite = nil
		case dynproto.CopyOut:
			if a.ID >= uint64(len(p.recvs)) {
				w.failf("endpoint %c: copy into unknown recv %d", 'A'+i, a.ID)
				return
			}
			r := &p.recvs[a.ID]
			switch {
			case r.done:
				w.failf("endpoint %c: copy into recv %d, already complete", 'A'+i, r.id)
			case r.directed:
				w.failf("endpoint %c: copy from the stream buffer into recv %d, which received a direct write", 'A'+i, r.id)
			case a.Off < 0 || a.Off+a.Len > len(r.data) || a.RingOff < 0 || a.RingOff+a.Len > len(p.ring):
				w.failf("endpoint %c: copy ring [%d:+%d] -> recv %d [%d:+%d] out of bounds", 'A'+i, a.RingOff, a.Len, r.id, a.Off, a.Len)
			}
			if w.err != nil {
				return
			}
			for k := 0; k < a.Len; k++ {
				if !p.ringBusy[a.RingOff+k] {
					w.failf("endpoint %c: copy of stream-buffer byte %d that holds no data", 'A'+i, a.RingOff+k)
					return
				}
				p.ringBusy[a.RingOff+k] = false
			}
			copy(r.data[a.Off:], p.ring[a.RingOff:a.RingOff+a.Len])
			r.copied = true
		case dynproto.Discard:
			for k := a.RingOff; k < a.RingOff+a.Len; k++ {
				if k >= len(p.ring) || !p.ringBusy[k] {
					w.failf("endpoint %c: discard of stream-buffer byte %d that holds no data", 'A'+i, k)
					return
				}
				p.ringBusy[k] = false
			}
		case dynproto.SendDone:
			w.sendDone(i, a)
		case dynproto.RecvDone:
			w.recvDone(i, a)
		}
		if w.err != nil {
			return
		}
	}
}

// place applies the data of writes that arrive at endpoint i.
func (w *World) place(i int, ws []write) {
	p := &w.ep[i]
	for _, wr := range ws {
		if wr.kind == dynproto.WriteIndirect {
			copy(p.ring[wr.ringOff:], wr.data)
		} else {
			copy(p.recvs[wr.recv].data[wr.off:], wr.data)
		}
	}
}

func messageByte(from int, msg uint64, k int) byte {
	return byte(msg*29 + uint64(k)*131 + uint64(from)*71 + 3)
}

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

// Quiescent reports whether no move is enabled.
func (w *World) Quiescent() bool { return len(w.Moves(nil)) == 0 }

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

// Stats returns endpoint i's engine statistics.
func (w *World) Stats(i int) dynproto.Stats { return w.ep[i].eng.Stats() }

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
		b = append(b, boolByte(p.shut), boolByte(p.eof), boolByte(p.closed), boolByte(p.reset))
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
