package dynproto_test

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/exsgo/exs/dynproto"
)

// Transition table of the engine: each row puts a pair of engines (sender S,
// receiver R) into a state, applies one input, and compares the actions that
// input emits (and the protocol variables after it) with what the algorithms
// prescribe.
//
//	| from                          | cause                          | to / actions                                    |
//	| S indirect, no ADVERT, room   | send                           | write into stream buffer, INDIRECT              |
//	| S direct, no ADVERT           | send                           | P_S = NEXT_PHASE(P_S), indirect                 |
//	| S indirect, fresh ADVERT      | send                           | P_S = P_A, write directly, DIRECT               |
//	| S indirect, stale by S_A      | send                           | drop it, P_S = NEXT_PHASE(P_A), indirect        |
//	| S indirect, stale by P_A      | send                           | drop it, P_S unchanged                          |
//	| S, R just below the wrap      | stale ADVERT, send             | dropped, P_S jumps across the wrap to 0         |
//	| S, R just below the wrap      | fresh ADVERT, send             | direct at S 2^64-2 in phase 2^32-1              |
//	| S direct in phase 2^32-1      | send                           | next phase 0, indirect                          |
//	| S direct, S_A < S_S           | send                           | still direct (no staleness in a direct phase)   |
//	| S no byte credits             | send                           | nothing (stall)                                 |
//	| S stalled                     | ACK                            | the waiting bytes go                            |
//	| S direct-only, no ADVERT      | send                           | nothing (wait)                                  |
//	| S direct-only, send waiting   | ADVERT                         | P_S = P_A, write directly, DIRECT               |
//	| S write outstanding           | write done                     | send done with its length                       |
//	| S WAITALL ADVERT part filled  | send                           | rest written at the next offset, same ADVERT    |
//	| S message > ADVERT            | send                           | DIRECT toolong, send fails EMSGSIZE             |
//	| S several small sends queued  | pump                           | one INDIRECT frame for all (coalescing)         |
//	| S at the end of the ring      | send                           | only the contiguous room is written             |
//	| S no frame credit             | send                           | nothing                                         |
//	| S shut down, sends done       | shutdown                       | FIN                                             |
//	| S shut down                   | send                           | send fails EPIPE                                |
//	| any                           | abort                          | every posted op fails with the error            |
//	| R caught up, indirect phase   | recv                           | P_r = NEXT_PHASE(P_r), ADVERT{P_r, S'_r}, +1     |
//	| R caught up                   | WAITALL recv                   | ADVERT waitall, S'_r += n                        |
//	| R b_r > 0                     | recv                           | no ADVERT, k_b += 1                             |
//	| R direct phase, ADVERTs out   | INDIRECT                       | P_r = NEXT_PHASE(P_r), k_a = outstanding         |
//	| R ADVERT out                  | DIRECT n bytes                 | recv done n, S'_r += n-1                        |
//	| R data buffered, advertised   | copy                           | copy, recv done, S'_r += l_c-1, ACK             |
//	| R data buffered, unadvertised | copy                           | copy, recv done, S'_r += l_c, ACK               |
//	| R held recv, then caught up   | copy                           | the held recv is advertised                     |
//	| R freed < ACK threshold       | copy                           | copy, recv done, no ACK                         |
//	| R freed reaches the threshold | copy                           | copy, recv done, one ACK for all freed bytes    |
//	| R ADVERTs stale (k_a > 0)     | DIRECT into a stale ADVERT     | refused: ErrProtocol (EPROTO)                   |
//	| R recvs pending               | FIN                            | every recv done with 0 (end of stream)          |
//	| R frames owed >= half         | frames arrive                  | CREDIT                                          |
//
// The ending (PeerGone: the peer closed, reset or died):
//
//	| R data buffered, no FIN       | peer gone, three recvs         | the data in order, then ECONNRESET              |
//	| R data buffered, FIN          | peer gone, three recvs         | the data in order, then the end of stream       |
//	| R WAITALL recv partly filled  | peer gone                      | done short with its bytes; next ECONNRESET      |
//	| S sends waiting for an ADVERT | peer gone, one more send       | every send ECONNRESET; nothing emitted          |
//	| R message partly arrived      | peer gone, recv                | the part dropped; the recv ECONNRESET           |
//
// The rows above run without departure 11 (Config.NoHeldHint); these run with
// it:
//
//	| R caught up, indirect phase   | two recvs                      | one ADVERT{FlagHeld} (it opens the phase)       |
//	| R first ADVERT out            | its DIRECT                     | recv done, the waiting recv advertised          |
//	| S no ADVERT, FlagHeld         | send                           | PAUSE{S_S}, no write                            |
//	| R PAUSE, nothing to advertise | PAUSE                          | ACK{resume S}                                   |
//	| S paused                      | ACK{resume S_S}                | the waiting bytes go indirectly                 |
//	| S paused                      | ADVERT{FlagHeld}               | P_S = P_A, direct write                         |
func TestTransitions(t *testing.T) {
	type row struct {
		name  string
		cfg   func(*dynproto.Config)
		setup func(p *pair)
		do    func(p *pair) []dynproto.Action
		want  []dynproto.Action
		after *phases // protocol variables after the input, if checked
		// credits: compare the frame credits returned too (other rows
		// ignore them: piggybacking is checked by the CREDIT row and the
		// simulations).
		credits bool
		hint    bool // with departure 11
	}
	send := func(id uint64, n int) func(p *pair) []dynproto.Action {
		return func(p *pair) []dynproto.Action { p.send(id, n); return p.sOut }
	}
	recv := func(id uint64, n int, waitAll bool) func(p *pair) []dynproto.Action {
		return func(p *pair) []dynproto.Action { p.recv(id, n, waitAll); return p.rOut }
	}
	deliverData := func(p *pair) []dynproto.Action {
		if err := p.deliverDataFrames(1); err != nil {
			p.t.Fatal(err)
		}
		return p.rOut
	}
	settle := func(p *pair) {
		if err := p.deliverAll(); err != nil {
			p.t.Fatal(err)
		}
	}
	// directPhase: one byte sent directly, everything delivered: P_S = P_r = 1.
	directPhase := func(p *pair) {
		p.recv(100, 8, false)
		settle(p)
		p.send(100, 1)
		settle(p)
	}
	indirect := func(id uint64, off, n, ring int, ph dynproto.Phase, seq dynproto.Seq) []dynproto.Action {
		return []dynproto.Action{
			{Kind: dynproto.WriteIndirect, ID: id, Off: off, Len: n, RingOff: ring},
			{Kind: dynproto.SendFrame, Frame: dynproto.Frame{Type: dynproto.FrameIndirect, Phase: ph, Seq: seq, Len: uint32(n), RingOff: uint32(ring)}},
		}
	}
	// nearWrap starts both streams two units and two phases below the
	// wrap of Seq and Phase.
	nearWrap := func(c *dynproto.Config) {
		c.InitialSeq, c.PeerInitialSeq = 1<<64-2, 1<<64-2
		c.InitialPhase, c.PeerInitialPhase = 1<<32-2, 1<<32-2
	}
	rows := []row{
		{
			name: "S indirect, no ADVERT, room: indirect write",
			do:   send(1, 5),
			want: indirect(1, 0, 5, 0, 0, 0),
		},
		{
			name:  "S direct, no ADVERT: next phase, indirect",
			setup: directPhase,
			do:    send(1, 5),
			want:  indirect(1, 0, 5, 0, 2, 1),
		},
		{
			name:  "S indirect, fresh ADVERT: P_S = P_A, direct write",
			setup: func(p *pair) { p.recv(7, 10, false); p.deliverCtlFrames(1) },
			do:    send(1, 5),
			want: []dynproto.Action{
				{Kind: dynproto.WriteDirect, ID: 1, Len: 5, RKey: 107},
				{Kind: dynproto.SendFrame, Frame: dynproto.Frame{Type: dynproto.FrameDirect, Phase: 1, Len: 5}},
			},
			after: &phases{PS: 1, SS: 5, PR: 1, SEst: 1},
		},
		{
			name: "S indirect, ADVERT stale by sequence: dropped, P_S = NEXT_PHASE(P_A)",
			setup: func(p *pair) {
				p.recv(7, 10, false) // ADVERT{P 1, S 0}, delayed
				p.send(1, 3)         // overtakes it indirectly
			},
			do: func(p *pair) []dynproto.Action {
				p.deliverCtlFrames(1)
				p.send(2, 1)
				return p.sOut
			},
			want: indirect(2, 0, 1, 3, 2, 3),
		},
		{
			name: "S indirect, ADVERT of an older phase: dropped, P_S unchanged",
			setup: func(p *pair) {
				directPhase(p)       // P 1
				p.recv(7, 10, false) // ADVERT{P 1, S 1}, delayed
				p.send(1, 3)         // indirect: P_S 2
			},
			do: func(p *pair) []dynproto.Action {
				p.deliverCtlFrames(1)
				p.send(2, 1)
				return p.sOut
			},
			want: indirect(2, 0, 1, 3, 2, 4),
		},
		{
			name: "S and R start just below the wrap, ADVERT stale by sequence: dropped, P_S = NEXT_PHASE(P_A) = 0",
			cfg:  nearWrap,
			setup: func(p *pair) {
				p.recv(7, 10, false) // ADVERT{P 2^32-1, S 2^64-2}, delayed
				p.send(1, 3)         // overtakes it indirectly: S_S wraps to 1
			},
			do: func(p *pair) []dynproto.Action {
				p.deliverCtlFrames(1)
				p.send(2, 1)
				return p.sOut
			},
			want: indirect(2, 0, 1, 3, 0, 1),
		},
		{
			name:  "S and R start just below the wrap, fresh ADVERT: P_S = P_A = 2^32-1, direct write at 2^64-2",
			cfg:   nearWrap,
			setup: func(p *pair) { p.recv(7, 10, false); p.deliverCtlFrames(1) },
			do:    send(1, 5),
			want: []dynproto.Action{
				{Kind: dynproto.WriteDirect, ID: 1, Len: 5, RKey: 107},
				{Kind: dynproto.SendFrame, Frame: dynproto.Frame{Type: dynproto.FrameDirect, Phase: 1<<32 - 1, Seq: 1<<64 - 2, Len: 5}},
			},
			after: &phases{PS: 1<<32 - 1, SS: 3, PR: 1<<32 - 1, SR: 1<<64 - 2, SEst: 1<<64 - 1},
		},
		{
			name: "S direct in phase 2^32-1, no ADVERT: next phase 0, indirect",
			cfg:  nearWrap,
			setup: func(p *pair) {
				p.recv(100, 8, false)
				settle(p)
				p.send(100, 1)
				settle(p)
			},
			do:   send(1, 5),
			want: indirect(1, 0, 5, 0, 0, 1<<64-1),
		},
		{
			name: "S direct, S_A < S_S: used (no staleness check in a direct phase)",
			setup: func(p *pair) {
				p.recv(7, 10, false) // ADVERT{S 0}
				p.recv(8, 10, false) // ADVERT{S 1}
				p.deliverCtlFrames(2)
				p.send(1, 4) // fills recv 7: S_S 4
			},
			do: send(2, 2),
			want: []dynproto.Action{
				{Kind: dynproto.WriteDirect, ID: 2, Len: 2, RKey: 108},
				{Kind: dynproto.SendFrame, Frame: dynproto.Frame{Type: dynproto.FrameDirect, Phase: 1, Seq: 4, ID: 1, Len: 2}},
			},
		},
		{
			name:  "S no byte credits: wait",
			cfg:   func(c *dynproto.Config) { c.RecvBuffer, c.PeerRecvBuffer = 4, 4 },
			setup: func(p *pair) { p.send(1, 4) },
			do:    send(2, 3),
			want:  nil,
		},
		{
			name: "S stalled, ACK arrives: the waiting bytes go",
			cfg:  func(c *dynproto.Config) { c.RecvBuffer, c.PeerRecvBuffer = 4, 4 },
			setup: func(p *pair) {
				p.send(1, 4)
				p.send(2, 3)
				p.recv(7, 4, false) // held: b_r > 0 once the data arrives
				if err := p.deliverDataFrames(1); err != nil {
					p.t.Fatal(err)
				}
			},
			do: func(p *pair) []dynproto.Action {
				p.doneWrites()
				p.deliverCtlFrames(len(p.ctl)) // the ACK for 4 bytes
				return p.sOut
			},
			// The delayed ADVERT for recv 7 was stale: P_S jumped to 2.
			want: indirect(2, 0, 3, 0, 2, 4),
		},
		{
			name: "S direct-only, no ADVERT: wait",
			cfg:  func(c *dynproto.Config) { c.Mode = dynproto.DirectOnly },
			do:   send(1, 5),
			want: nil,
		},
		{
			name:  "S direct-only, send waiting, ADVERT arrives: P_S = P_A, direct write",
			cfg:   func(c *dynproto.Config) { c.Mode = dynproto.DirectOnly },
			setup: func(p *pair) { p.send(1, 5); p.recv(7, 10, false) },
			do: func(p *pair) []dynproto.Action {
				p.deliverCtlFrames(1)
				return p.sOut
			},
			want: []dynproto.Action{
				{Kind: dynproto.WriteDirect, ID: 1, Len: 5, RKey: 107},
				{Kind: dynproto.SendFrame, Frame: dynproto.Frame{Type: dynproto.FrameDirect, Phase: 1, Len: 5}},
			},
			after: &phases{PS: 1, SS: 5, PR: 1, SEst: 1},
		},
		{
			name: "S write outstanding, write done: send done with its length",
			setup: func(p *pair) {
				p.recv(7, 10, false)
				p.deliverCtlFrames(1)
				p.send(1, 4) // one direct write outstanding
			},
			do: func(p *pair) []dynproto.Action {
				acts, err := p.S.WriteDone(nil)
				if err != nil {
					p.t.Fatal(err)
				}
				return acts
			},
			want: []dynproto.Action{{Kind: dynproto.SendDone, ID: 1, Len: 4}},
		},
		{
			name: "S WAITALL ADVERT partly filled: the next send continues it",
			setup: func(p *pair) {
				p.recv(7, 10, true)
				p.deliverCtlFrames(1)
				p.send(1, 4)
			},
			do: send(2, 6),
			want: []dynproto.Action{
				{Kind: dynproto.WriteDirect, ID: 2, Len: 6, RKey: 107, Addr: 4},
				{Kind: dynproto.SendFrame, Frame: dynproto.Frame{Type: dynproto.FrameDirect, Flags: dynproto.FlagWaitAll, Phase: 1, Seq: 4, Len: 6}},
			},
		},
		{
			name:  "S message longer than the ADVERT: refused at both ends",
			cfg:   func(c *dynproto.Config) { c.Type = dynproto.SeqPacket },
			setup: func(p *pair) { p.recv(7, 4, false); p.deliverCtlFrames(1) },
			do:    send(1, 5),
			want: []dynproto.Action{
				{Kind: dynproto.SendFrame, Frame: dynproto.Frame{Type: dynproto.FrameDirect, Flags: dynproto.FlagEOM | dynproto.FlagTooLong, Phase: 1}},
				{Kind: dynproto.SendDone, ID: 1, Err: syscall.EMSGSIZE},
			},
		},
		{
			name: "R message refused by the sender: recv fails EMSGSIZE",
			cfg:  func(c *dynproto.Config) { c.Type = dynproto.SeqPacket },
			setup: func(p *pair) {
				p.recv(7, 4, false)
				p.deliverCtlFrames(1)
				p.send(1, 5)
			},
			do:   deliverData,
			want: []dynproto.Action{{Kind: dynproto.RecvDone, ID: 7, Err: syscall.EMSGSIZE}},
		},
		{
			name: "S small sends queued: one indirect transfer (coalescing)",
			do: func(p *pair) []dynproto.Action {
				var acts []dynproto.Action
				acts = p.S.QueueSend(acts, 1, 2)
				acts = p.S.QueueSend(acts, 2, 3)
				acts = p.S.QueueSend(acts, 3, 1)
				return p.S.Pump(acts)
			},
			want: []dynproto.Action{
				{Kind: dynproto.WriteIndirect, ID: 1, Len: 2},
				{Kind: dynproto.WriteIndirect, ID: 2, Len: 3, RingOff: 2},
				{Kind: dynproto.WriteIndirect, ID: 3, Len: 1, RingOff: 5},
				{Kind: dynproto.SendFrame, Frame: dynproto.Frame{Type: dynproto.FrameIndirect, Len: 6}},
			},
		},
		{
			name: "S at the end of the stream buffer: contiguous room only",
			cfg:  func(c *dynproto.Config) { c.RecvBuffer, c.PeerRecvBuffer = 8, 8 },
			setup: func(p *pair) {
				p.send(1, 6)
				p.recv(7, 6, false)
				settle(p)
			},
			do: send(2, 5),
			want: append(indirect(2, 0, 2, 6, 2, 6),
				indirect(2, 2, 3, 0, 2, 8)...),
		},
		{
			name: "S no frame credit: nothing",
			cfg:  func(c *dynproto.Config) { c.Frames, c.PeerFrames = 1, 1 },
			setup: func(p *pair) {
				p.send(1, 1)
			},
			do:   send(2, 1),
			want: nil,
		},
		{
			name:  "S shut down after its sends: FIN",
			setup: func(p *pair) { p.send(1, 3) },
			do: func(p *pair) []dynproto.Action {
				p.fromS(p.S.Shutdown(nil))
				return p.sOut
			},
			want: []dynproto.Action{{Kind: dynproto.SendFrame, Frame: dynproto.Frame{Type: dynproto.FrameFin, Seq: 3}}},
		},
		{
			name:  "S shut down: a send fails EPIPE",
			setup: func(p *pair) { p.fromS(p.S.Shutdown(nil)) },
			do:    send(1, 3),
			want:  []dynproto.Action{{Kind: dynproto.SendDone, ID: 1, Err: syscall.EPIPE}},
		},
		{
			name: "abort: every posted operation fails",
			cfg:  func(c *dynproto.Config) { c.Mode = dynproto.DirectOnly },
			setup: func(p *pair) {
				p.fromS(p.S.PostSend(nil, 1, 3))
				p.fromS(p.S.PostRecv(nil, 2, 3, false))
			},
			do: func(p *pair) []dynproto.Action { return p.S.Abort(nil, syscall.ECONNRESET) },
			want: []dynproto.Action{
				{Kind: dynproto.SendDone, ID: 1, Err: syscall.ECONNRESET},
				{Kind: dynproto.RecvDone, ID: 2, Err: syscall.ECONNRESET},
			},
		},
		{
			name: "R caught up, indirect phase: next phase, ADVERT{P_r, S'_r}",
			do:   recv(7, 10, false),
			want: []dynproto.Action{
				{Kind: dynproto.SendFrame, ID: 7, Frame: dynproto.Frame{Type: dynproto.FrameAdvert, Phase: 1, Len: 10}},
			},
			after: &phases{PR: 1, SEst: 1},
		},
		{
			name: "R caught up, WAITALL recv: S'_r += n",
			do:   recv(7, 10, true),
			want: []dynproto.Action{
				{Kind: dynproto.SendFrame, ID: 7, Frame: dynproto.Frame{Type: dynproto.FrameAdvert, Flags: dynproto.FlagWaitAll, Phase: 1, Len: 10}},
			},
			after: &phases{PR: 1, SEst: 10},
		},
		{
			name: "R data buffered: no ADVERT, k_b",
			setup: func(p *pair) {
				p.send(1, 3)
				if err := p.deliverDataFrames(1); err != nil {
					p.t.Fatal(err)
				}
			},
			do:    recv(7, 2, true),
			want:  nil,
			after: &phases{SS: 3, KB: 1},
		},
		{
			name: "R indirect transfer in a direct phase: next phase, ADVERTs stale",
			setup: func(p *pair) {
				p.recv(7, 10, false)
				p.recv(8, 10, false)
				p.send(1, 3) // no ADVERT yet: indirect
			},
			do: func(p *pair) []dynproto.Action {
				acts, err := p.R.OnFrame(nil, &p.data[0])
				if err != nil {
					p.t.Fatal(err)
				}
				return acts
			},
			want:  nil,
			after: &phases{SS: 3, PR: 2, SEst: 2, KA: 2},
		},
		{
			name: "R direct transfer of n bytes: recv done, S'_r += n-1",
			setup: func(p *pair) {
				p.recv(7, 10, false)
				p.recv(8, 10, false)
				p.deliverCtlFrames(2)
				p.send(1, 4)
			},
			do:    deliverData,
			want:  []dynproto.Action{{Kind: dynproto.RecvDone, ID: 7, Len: 4}},
			after: &phases{PS: 1, SS: 4, PR: 1, SR: 4, SEst: 5},
		},
		{
			name: "R copy into an advertised recv: S'_r += l_c - 1, ACK",
			cfg:  func(c *dynproto.Config) { c.AckThreshold = 1 },
			setup: func(p *pair) {
				p.recv(7, 10, false)
				p.send(1, 4)
				if err := p.R.Copy(nil); len(err) != 0 {
					p.t.Fatal("copy before data")
				}
			},
			do: func(p *pair) []dynproto.Action {
				f := p.data[0]
				acts, err := p.R.OnFrame(nil, &f)
				if err != nil || len(acts) != 0 {
					p.t.Fatalf("OnFrame: %v, %v", acts, err)
				}
				return p.R.Copy(nil)
			},
			want: []dynproto.Action{
				{Kind: dynproto.CopyOut, ID: 7, Len: 4},
				{Kind: dynproto.RecvDone, ID: 7, Len: 4},
				{Kind: dynproto.SendFrame, Frame: dynproto.Frame{Type: dynproto.FrameAck, Len: 4, Credits: 1}},
			},
			after: &phases{SS: 4, PR: 2, SR: 4, SEst: 4},
		},
		{
			name: "R copy into a recv never advertised: S'_r += l_c",
			cfg:  func(c *dynproto.Config) { c.AckThreshold = 1 },
			setup: func(p *pair) {
				p.send(1, 4)
				if err := p.deliverDataFrames(1); err != nil {
					p.t.Fatal(err)
				}
				p.recv(7, 10, false) // held: b_r > 0
			},
			do: func(p *pair) []dynproto.Action { return p.R.Copy(nil) },
			want: []dynproto.Action{
				{Kind: dynproto.CopyOut, ID: 7, Len: 4},
				{Kind: dynproto.RecvDone, ID: 7, Len: 4},
				{Kind: dynproto.SendFrame, Frame: dynproto.Frame{Type: dynproto.FrameAck, Len: 4}},
			},
			after: &phases{SS: 4, SR: 4, SEst: 4},
		},
		{
			name: "R held recv, caught up: advertised",
			cfg:  func(c *dynproto.Config) { c.AckThreshold = 1 },
			setup: func(p *pair) {
				p.send(1, 2)
				if err := p.deliverDataFrames(1); err != nil {
					p.t.Fatal(err)
				}
				p.recv(7, 2, false) // held: b_r > 0
				p.recv(8, 9, false) // held: k_b > 0
			},
			do: func(p *pair) []dynproto.Action { return p.R.Copy(nil) },
			want: []dynproto.Action{
				{Kind: dynproto.CopyOut, ID: 7, Len: 2},
				{Kind: dynproto.RecvDone, ID: 7, Len: 2},
				{Kind: dynproto.SendFrame, Frame: dynproto.Frame{Type: dynproto.FrameAck, Len: 2}},
				{Kind: dynproto.SendFrame, ID: 8, Frame: dynproto.Frame{Type: dynproto.FrameAdvert, Phase: 1, Seq: 2, Len: 9}},
			},
			after: &phases{SS: 2, PR: 1, SR: 2, SEst: 3},
		},
		{
			name: "R copy frees less than the ACK threshold: no ACK",
			cfg:  func(c *dynproto.Config) { c.AckThreshold = 4 },
			setup: func(p *pair) {
				p.send(1, 2)
				if err := p.deliverDataFrames(1); err != nil {
					p.t.Fatal(err)
				}
				p.recv(7, 10, false) // held: b_r > 0
			},
			do: func(p *pair) []dynproto.Action { return p.R.Copy(nil) },
			want: []dynproto.Action{
				{Kind: dynproto.CopyOut, ID: 7, Len: 2},
				{Kind: dynproto.RecvDone, ID: 7, Len: 2},
			},
			after: &phases{SS: 2, SR: 2, SEst: 2},
		},
		{
			name: "R copy brings the freed bytes to the ACK threshold: one ACK for all",
			cfg:  func(c *dynproto.Config) { c.AckThreshold = 4 },
			setup: func(p *pair) {
				for i := range uint64(2) {
					p.send(1+i, 2)
					if err := p.deliverDataFrames(1); err != nil {
						p.t.Fatal(err)
					}
					p.recv(7+i, 10, false) // held: b_r > 0
					if i == 0 {
						p.fromR(p.R.Copy(nil)) // 2 bytes freed, not ACKed
					}
				}
			},
			do: func(p *pair) []dynproto.Action { return p.R.Copy(nil) },
			want: []dynproto.Action{
				{Kind: dynproto.CopyOut, ID: 8, Len: 2, RingOff: 2},
				{Kind: dynproto.RecvDone, ID: 8, Len: 2},
				{Kind: dynproto.SendFrame, Frame: dynproto.Frame{Type: dynproto.FrameAck, Len: 4}},
			},
			after: &phases{SS: 4, SR: 4, SEst: 4},
		},
		{
			name: "R ADVERTs stale (k_a > 0), DIRECT into a stale ADVERT: ErrProtocol",
			setup: func(p *pair) {
				p.recv(7, 10, false) // ADVERT 0 {P 1, S 0}
				p.recv(8, 10, false) // ADVERT 1 {P 1, S 1}
				p.send(1, 3)         // no ADVERT yet: indirect
				acts, err := p.R.OnFrame(nil, &p.data[0])
				if err != nil || len(acts) != 0 {
					p.t.Fatalf("OnFrame(INDIRECT): %v, %v", acts, err)
				}
			},
			do: func(p *pair) []dynproto.Action {
				// What a sender without the phase jump would send: byte 3
				// into ADVERT 0, which the indirect transfer made stale.
				f := dynproto.Frame{Type: dynproto.FrameDirect, Phase: 1, Seq: 3, ID: 0, Len: 1}
				acts, err := p.R.OnFrame(nil, &f)
				if !errors.Is(err, dynproto.ErrProtocol) || !errors.Is(err, syscall.EPROTO) || !strings.Contains(err.Error(), "stale ADVERT 0") {
					p.t.Errorf("OnFrame(%v) = %v, want ErrProtocol (EPROTO)", f, err)
				}
				return acts
			},
			want:  nil,
			after: &phases{SS: 3, PR: 2, SEst: 2, KA: 2},
		},
		{
			name: "R recvs pending, FIN: end of stream",
			setup: func(p *pair) {
				p.recv(7, 10, true)
				p.recv(8, 10, false)
				p.fromS(p.S.Shutdown(nil))
			},
			do: deliverData,
			want: []dynproto.Action{
				{Kind: dynproto.RecvDone, ID: 7, EOF: true},
				{Kind: dynproto.RecvDone, ID: 8, EOF: true},
			},
		},
		{
			name:  "R data buffered, no FIN, peer gone: the data in order, then ECONNRESET",
			setup: func(p *pair) { p.send(1, 5); deliverData(p) },
			do: func(p *pair) []dynproto.Action {
				out := p.R.PeerGone(nil, syscall.ECONNRESET)
				out = p.R.Copy(p.R.PostRecv(out, 7, 3, false))
				out = p.R.Copy(p.R.PostRecv(out, 8, 10, false))
				return p.R.Copy(p.R.PostRecv(out, 9, 10, false))
			},
			want: []dynproto.Action{
				{Kind: dynproto.CopyOut, ID: 7, Len: 3},
				{Kind: dynproto.RecvDone, ID: 7, Len: 3},
				{Kind: dynproto.CopyOut, ID: 8, Len: 2, RingOff: 3},
				{Kind: dynproto.RecvDone, ID: 8, Len: 2},
				{Kind: dynproto.RecvDone, ID: 9, Err: syscall.ECONNRESET},
			},
		},
		{
			name: "R data buffered, FIN, peer gone: the data in order, then the end of stream",
			setup: func(p *pair) {
				p.send(1, 5)
				p.fromS(p.S.Shutdown(nil))
				deliverData(p)
				deliverData(p)
			},
			do: func(p *pair) []dynproto.Action {
				out := p.R.PeerGone(nil, syscall.ECONNRESET)
				out = p.R.Copy(p.R.PostRecv(out, 7, 3, false))
				out = p.R.Copy(p.R.PostRecv(out, 8, 10, false))
				return p.R.Copy(p.R.PostRecv(out, 9, 10, false))
			},
			want: []dynproto.Action{
				{Kind: dynproto.CopyOut, ID: 7, Len: 3},
				{Kind: dynproto.RecvDone, ID: 7, Len: 3},
				{Kind: dynproto.CopyOut, ID: 8, Len: 2, RingOff: 3},
				{Kind: dynproto.RecvDone, ID: 8, Len: 2},
				{Kind: dynproto.RecvDone, ID: 9, EOF: true},
			},
		},
		{
			name: "R WAITALL recv partly filled, peer gone: done short, the next ECONNRESET",
			setup: func(p *pair) {
				p.recv(7, 10, true)
				p.send(1, 4)
				deliverData(p)
			},
			do: func(p *pair) []dynproto.Action {
				return p.R.PostRecv(p.R.PeerGone(nil, syscall.ECONNRESET), 8, 10, false)
			},
			want: []dynproto.Action{
				{Kind: dynproto.RecvDone, ID: 7, Len: 4},
				{Kind: dynproto.RecvDone, ID: 8, Err: syscall.ECONNRESET},
			},
		},
		{
			name:  "S sends waiting for an ADVERT, peer gone: ECONNRESET, later sends too",
			cfg:   func(c *dynproto.Config) { c.Mode = dynproto.DirectOnly },
			setup: func(p *pair) { p.send(1, 5); p.send(2, 5) },
			do: func(p *pair) []dynproto.Action {
				return p.S.PostSend(p.S.PeerGone(nil, syscall.ECONNRESET), 3, 1)
			},
			want: []dynproto.Action{
				{Kind: dynproto.SendDone, ID: 1, Err: syscall.ECONNRESET},
				{Kind: dynproto.SendDone, ID: 2, Err: syscall.ECONNRESET},
				{Kind: dynproto.SendDone, ID: 3, Err: syscall.ECONNRESET},
			},
		},
		{
			name: "R message partly arrived, peer gone: the part dropped, the recv ECONNRESET",
			cfg: func(c *dynproto.Config) {
				c.Type, c.Mode, c.MaxIndirect = dynproto.SeqPacket, dynproto.IndirectOnly, 3
			},
			setup: func(p *pair) {
				p.send(1, 2)
				p.send(2, 5) // two transfers: 3 bytes, then 2 with EOM
				deliverData(p)
				deliverData(p)
			},
			do: func(p *pair) []dynproto.Action {
				out := p.R.PeerGone(nil, syscall.ECONNRESET)
				out = p.R.Copy(p.R.PostRecv(out, 7, 10, false))
				return p.R.Copy(p.R.PostRecv(out, 8, 10, false))
			},
			want: []dynproto.Action{
				{Kind: dynproto.CopyOut, ID: 7, Len: 2},
				{Kind: dynproto.RecvDone, ID: 7, Len: 2},
				{Kind: dynproto.RecvDone, ID: 8, Err: syscall.ECONNRESET},
			},
		},
		{
			name: "frames owed reach half the buffers: CREDIT",
			cfg:  func(c *dynproto.Config) { c.Frames, c.PeerFrames = 4, 4 },
			setup: func(p *pair) {
				p.send(1, 1)
				if err := p.deliverDataFrames(1); err != nil {
					p.t.Fatal(err)
				}
				p.send(2, 1)
			},
			do: deliverData,
			want: []dynproto.Action{
				{Kind: dynproto.SendFrame, Frame: dynproto.Frame{Type: dynproto.FrameCredit, Credits: 2}},
			},
			credits: true,
		},
		{
			name: "R caught up, indirect phase, two recvs: one ADVERT opens the direct phase",
			hint: true,
			do: func(p *pair) []dynproto.Action {
				p.recv(7, 10, false)
				out := p.rOut
				p.recv(8, 10, false)
				return append(out, p.rOut...)
			},
			want: []dynproto.Action{
				{Kind: dynproto.SendFrame, ID: 7, Frame: dynproto.Frame{Type: dynproto.FrameAdvert, Flags: dynproto.FlagHeld, Phase: 1, Len: 10}},
			},
			after: &phases{PR: 1, SEst: 1, KB: 1},
		},
		{
			name: "R first ADVERT of the phase out, its DIRECT: the waiting recv advertised",
			hint: true,
			setup: func(p *pair) {
				p.recv(7, 10, false)
				p.recv(8, 10, false)
				p.deliverCtlFrames(1)
				p.send(1, 4)
			},
			do: deliverData,
			want: []dynproto.Action{
				{Kind: dynproto.RecvDone, ID: 7, Len: 4},
				{Kind: dynproto.SendFrame, ID: 8, Frame: dynproto.Frame{Type: dynproto.FrameAdvert, Flags: dynproto.FlagHeld, Phase: 1, Seq: 4, ID: 1, Len: 10}},
			},
			after: &phases{PS: 1, SS: 4, PR: 1, SR: 4, SEst: 5},
		},
		{
			name: "S no ADVERT, peer holds (FlagHeld): PAUSE, no write",
			hint: true,
			setup: func(p *pair) {
				p.recv(7, 10, false)
				p.recv(8, 10, false)
				p.deliverCtlFrames(1)
				p.send(1, 4) // into ADVERT#0
			},
			do: send(2, 3),
			want: []dynproto.Action{
				{Kind: dynproto.SendFrame, Frame: dynproto.Frame{Type: dynproto.FramePause, Seq: 4}},
			},
		},
		{
			name: "R PAUSE, nothing to advertise: ACK{resume}",
			hint: true,
			setup: func(p *pair) {
				p.recv(7, 10, false)
				p.deliverCtlFrames(1)
				p.send(1, 4) // into ADVERT#0, whose frame said FlagHeld
				p.send(2, 3) // PAUSE
				if err := p.deliverDataFrames(1); err != nil {
					p.t.Fatal(err)
				}
			},
			do: deliverData,
			want: []dynproto.Action{
				{Kind: dynproto.SendFrame, Frame: dynproto.Frame{Type: dynproto.FrameAck, Flags: dynproto.FlagResume, Seq: 4}},
			},
		},
		{
			name: "S paused, ACK{resume S_S}: the waiting bytes go indirectly",
			hint: true,
			setup: func(p *pair) {
				p.recv(7, 10, false)
				p.deliverCtlFrames(1)
				p.send(1, 4)
				p.send(2, 3)
				if err := p.deliverDataFrames(2); err != nil {
					p.t.Fatal(err)
				}
			},
			do: func(p *pair) []dynproto.Action {
				p.deliverCtlFrames(1)
				return p.sOut
			},
			want:  indirect(2, 0, 3, 0, 2, 4),
			after: &phases{PS: 2, SS: 7, PR: 1, SR: 4, SEst: 4},
		},
		{
			name: "S paused, ADVERT{FlagHeld}: direct write",
			hint: true,
			setup: func(p *pair) {
				p.recv(7, 10, false)
				p.recv(8, 10, false)
				p.deliverCtlFrames(1)
				p.send(1, 4)
				p.send(2, 3) // PAUSE
				if err := p.deliverDataFrames(1); err != nil {
					p.t.Fatal(err)
				}
			},
			do: func(p *pair) []dynproto.Action {
				p.deliverCtlFrames(1)
				return p.sOut
			},
			want: []dynproto.Action{
				{Kind: dynproto.WriteDirect, ID: 2, Len: 3, RKey: 108},
				{Kind: dynproto.SendFrame, Frame: dynproto.Frame{Type: dynproto.FrameDirect, Phase: 1, Seq: 4, ID: 1, Len: 3}},
			},
		},
		{
			name: "S indirect, MaxIndirect 3: a send of 5 goes as two transfers",
			cfg:  func(c *dynproto.Config) { c.MaxIndirect = 3 },
			do:   send(1, 5),
			want: append(indirect(1, 0, 3, 0, 0, 0), indirect(1, 3, 2, 3, 0, 3)...),
		},
		{
			name: "R, AdvertMin 4: a recv of 3 is not advertised",
			cfg:  func(c *dynproto.Config) { c.AdvertMin = 4 },
			do:   recv(7, 3, false),
			want: nil,
		},
		{
			name: "R, AdvertMin 4: a recv of 8 is advertised",
			cfg:  func(c *dynproto.Config) { c.AdvertMin = 4 },
			do:   recv(8, 8, false),
			want: []dynproto.Action{
				{Kind: dynproto.SendFrame, ID: 8, Frame: dynproto.Frame{Type: dynproto.FrameAdvert, Phase: 1, Len: 8}},
			},
		},
		{
			name:  "R, AdvertMin 4: a recv of 8 behind an unadvertised recv of 3 waits",
			cfg:   func(c *dynproto.Config) { c.AdvertMin = 4 },
			setup: func(p *pair) { p.recv(7, 3, false) },
			do:    recv(8, 8, false),
			want:  nil,
		},
		{
			name: "R, AdvertMin 4: the small recv filled from the stream buffer, the next is advertised",
			cfg:  func(c *dynproto.Config) { c.AdvertMin = 4 },
			setup: func(p *pair) {
				p.recv(7, 3, false)
				p.recv(8, 8, false)
				p.send(1, 3)
			},
			do: deliverData,
			want: []dynproto.Action{
				{Kind: dynproto.CopyOut, ID: 7, Len: 3},
				{Kind: dynproto.RecvDone, ID: 7, Len: 3},
				{Kind: dynproto.SendFrame, ID: 8, Frame: dynproto.Frame{Type: dynproto.FrameAdvert, Phase: 1, Seq: 3, Len: 8}},
			},
			after: &phases{PS: 0, SS: 3, PR: 1, SR: 3, SEst: 4},
		},
		{
			name: "R, AdvertMin 4, departure 11: a small waiting recv is not held",
			cfg:  func(c *dynproto.Config) { c.AdvertMin = 4 },
			hint: true,
			setup: func(p *pair) {
				p.recv(7, 3, false)
			},
			do:   send(1, 5),
			want: indirect(1, 0, 5, 0, 0, 0),
		},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			cfg := scenarioConfig()
			cfg.AckThreshold = 0
			cfg.MaxGather = 0
			cfg.NoHeldHint = !r.hint
			if r.cfg != nil {
				r.cfg(&cfg)
			}
			p := newPair(t, cfg)
			if r.setup != nil {
				r.setup(p)
			}
			got := r.do(p)
			opts := cmp.Options{cmpopts.EquateEmpty()}
			if !r.credits {
				opts = append(opts, cmpopts.IgnoreFields(dynproto.Frame{}, "Credits"))
			}
			if diff := cmp.Diff(r.want, got, opts); diff != "" {
				t.Errorf("actions (-want +got):\n%s", diff)
			}
			if r.after != nil {
				if diff := cmp.Diff(*r.after, p.phases()); diff != "" {
					t.Errorf("protocol variables after (-want +got):\n%s", diff)
				}
			}
		})
	}
}
