package dynproto

import "github.com/exsgo/exs/dynproto/internal/mut"

// Seq is a sequence number in a connection's data stream. In stream mode
// (SOCK_STREAM) it counts bytes; in message mode (SOCK_SEQPACKET) it counts
// messages.
//
// Sequence numbers wrap around modulo 2^64 and are compared with serial-number
// arithmetic: a is before b when int64(a-b) < 0. Comparisons are therefore
// correct as long as the two numbers compared are less than 2^63 apart, which
// holds for any stream that is not 8 EiB out of step with itself. A stream
// starts at Config.InitialSeq, 0 unless set.
type Seq uint64

// Add returns s advanced by n.
func (s Seq) Add(n uint64) Seq { return s + Seq(n) }

// Before reports whether s comes before t (s < t in serial arithmetic).
func (s Seq) Before(t Seq) bool { return int64(s-t) < 0 }

// Phase numbers a transfer phase. Phases alternate between indirect (even) and
// direct (odd); both ends of a stream start in its Config.InitialPhase (0
// unless set), an indirect phase. Phases never decrease.
//
// Like Seq, a Phase wraps around (modulo 2^32) and is compared with serial
// arithmetic: p is before q when int32(p-q) < 0. A connection changes phase at
// most once per transfer, so two phases being compared are always far less
// than 2^31 apart.
type Phase uint32

// IsDirect reports whether p is a direct phase.
func (p Phase) IsDirect() bool { return p&1 == 1 }

// Next returns the phase after p (direct after indirect and vice versa).
func (p Phase) Next() Phase { return p + 1 }

// Before reports whether p comes before q.
func (p Phase) Before(q Phase) bool {
	if mut.PlainPhaseCompare {
		return p < q
	}
	return int32(p-q) < 0
}
