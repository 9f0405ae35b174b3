package proofs

import (
	"os"
	"testing"

	"github.com/exsgo/exs/dynproto"
)

// config is a named configuration for the tests. Sizes are in units: bytes
// on a stream, bytes of a message in seqpacket mode.
type config struct {
	name string
	spec string // Spec text form
}

// defaultConfigs run in `go test ./proofs/`, ordered small first (the mutant
// hunt goes through them in this order), each in well under a second.
// Endpoint A sends, endpoint B receives, except in the two-way
// configurations; B's drain recvs take what its scripted recvs leave.
var defaultConfigs = []config{
	// The smallest stream buffer and one frame credit: every transfer of
	// more than one byte is split, and frames wait for credits.
	{"dyn-stream-ring1-frames1", "mode=dynamic type=stream ring=1 frames=1 a.sends=1,2,1 a.shutdown b.recvs=2,1,2 b.drain=3"},
	// No coalescing: one send per transfer.
	{"dyn-stream-gather1", "mode=dynamic type=stream ring=2 frames=2 gather=1 a.sends=1,1,1 b.recvs=1,1,1 b.drain=3"},
	{"dyn-stream-ring2-frames1", "mode=dynamic type=stream ring=2 frames=1 a.sends=1,2,1 a.shutdown b.recvs=2,1,2 b.drain=3"},
	// A MSG_WAITALL recv partly filled from the stream buffer while the
	// sender is idle, then a recv after it.
	{"dyn-stream-waitall-partial", "mode=dynamic type=stream ring=2 frames=2 a.sends=1,1,1 a.shutdown b.recvs=1w,2w,1 b.drain=2"},
	// Messages longer than the stream buffer go indirectly in segments.
	{"dyn-seqpacket-ring1", "mode=dynamic type=seqpacket ring=1 frames=2 a.sends=2,1,2 a.shutdown b.recvs=2,1,2 b.drain=3"},
	// MSG_WAITALL recvs, some longer than the sends that fill them.
	{"dyn-stream-waitall-mixed", "mode=dynamic type=stream ring=2 frames=2 a.sends=2,1,2 a.shutdown b.recvs=2w,1,3w b.drain=3"},
	// Both directions carry data.
	{"dyn-stream-twoway", "mode=dynamic type=stream ring=1 frames=1 a.sends=1,1 a.drain=1 b.sends=1 b.recvs=1 b.drain=1"},
	// A message too long for its recv (EMSGSIZE at both ends).
	{"dyn-seqpacket-toolong", "mode=dynamic type=seqpacket ring=2 frames=2 a.sends=1,2,1 a.shutdown b.recvs=1,1,2 b.drain=3"},
	{"dyn-seqpacket-ring3", "mode=dynamic type=seqpacket ring=3 frames=2 a.sends=3,1,2 a.shutdown b.recvs=2,3,2 b.drain=3"},
	// Four one-byte sends and recvs over one frame credit.
	{"dyn-stream-4x1-frames1", "mode=dynamic type=stream ring=3 frames=1 a.sends=1,1,1,1 a.shutdown b.recvs=1,1,1,1 b.drain=2"},
	{"dyn-stream-waitall-all", "mode=dynamic type=stream ring=2 frames=2 a.sends=1,2,1 a.shutdown b.recvs=1w,2w,1w b.drain=3"},
	{"dyn-seqpacket-ring2", "mode=dynamic type=seqpacket ring=2 frames=2 a.sends=1,2,1 a.shutdown b.recvs=1,2,1 b.drain=3"},
	{"dyn-stream-waitall-ring3", "mode=dynamic type=stream ring=3 frames=2 a.sends=2,1,3 a.shutdown b.recvs=3w,1,2w b.drain=3"},
	// The baselines.
	{"direct-stream", "mode=direct-only type=stream ring=0 frames=2 a.sends=1,2,3 a.shutdown b.recvs=2,1,3 b.drain=3"},
	{"direct-seqpacket", "mode=direct-only type=seqpacket ring=0 frames=2 a.sends=1,2,3 a.shutdown b.recvs=2,1,3 b.drain=3"},
	{"indirect-stream", "mode=indirect-only type=stream ring=2 frames=2 a.sends=1,2,3 a.shutdown b.recvs=2,1,3 b.drain=3"},
	{"indirect-seqpacket", "mode=indirect-only type=seqpacket ring=2 frames=2 a.sends=1,2,3 a.shutdown b.recvs=2,1,3 b.drain=3"},
	// The application chooses each send's length as it posts ("*").
	{"direct-stream-choose-sends", "mode=direct-only type=stream ring=0 frames=2 a.sends=*,*,* a.choose=1,2,3 a.shutdown b.recvs=2,1,3 b.drain=3"},
	// Departure 12 and the cap on indirect transfers: recvs shorter than
	// advmin are never advertised, and no indirect transfer carries more
	// than maxind units.
	{"dyn-seqpacket-advmin2", "mode=dynamic type=seqpacket ring=2 frames=2 advmin=2 a.sends=1,2,1 a.shutdown b.recvs=1,2,2 b.drain=3"},
	{"dyn-stream-maxind2-advmin2", "mode=dynamic type=stream ring=3 frames=2 maxind=2 advmin=2 a.sends=3,1,2 a.shutdown b.recvs=1,3w,2 b.drain=3"},
	{"indirect-stream-maxind1", "mode=indirect-only type=stream ring=3 frames=2 maxind=1 a.sends=1,2,3 a.shutdown b.recvs=2,1,3 b.drain=3"},
	// The ending: A's application may close at any point (before, during
	// or after its sends and shutdown), and B then takes every byte A's
	// completed sends hold, then the end of the stream (FIN) or ECONNRESET.
	// With and without a shutdown, a MSG_WAITALL recv left partly filled,
	// every mode, messages (two directions with both ends closing: in
	// largeConfigs).
	{"end-dyn-stream-close", "mode=dynamic type=stream ring=2 frames=2 a.sends=1,2 a.shutdown a.close b.recvs=1 b.drain=2"},
	{"end-dyn-stream-close-waitall", "mode=dynamic type=stream ring=1 frames=2 a.sends=1,2 a.close b.recvs=1,2w b.drain=1"},
	{"end-direct-stream-close", "mode=direct-only type=stream ring=0 frames=2 a.sends=1,2 a.shutdown a.close b.recvs=2,1w b.drain=2"},
	{"end-indirect-stream-close", "mode=indirect-only type=stream ring=2 frames=2 a.sends=1,2,1 a.shutdown a.close b.recvs=2,1 b.drain=2"},
	{"end-dyn-seqpacket-close", "mode=dynamic type=seqpacket ring=1 frames=2 a.sends=2,1 a.shutdown a.close b.recvs=2 b.drain=2"},
	// Empty messages, direct and through the stream buffer.
	{"end-direct-seqpacket-empty-close", "mode=direct-only type=seqpacket ring=0 frames=2 a.sends=0,1,0 a.shutdown a.close b.recvs=1 b.drain=2"},
	{"end-indirect-seqpacket-empty-close", "mode=indirect-only type=seqpacket ring=1 frames=2 a.sends=0,1,0 a.shutdown a.close b.recvs=1 b.drain=2"},
	// Streams that start just below the wrap (seq=-2 is 2^64-2, phase=-2
	// is 2^32-2): sequence numbers and phases cross it, and only serial
	// arithmetic keeps them in order.
	{"wrap-dyn-stream", "mode=dynamic type=stream ring=1 frames=1 seq=-2 phase=-2 a.sends=1,2 a.shutdown b.recvs=2,1 b.drain=2"},
	{"wrap-dyn-seqpacket", "mode=dynamic type=seqpacket ring=1 frames=2 seq=-1 phase=-2 a.sends=2,1 a.shutdown b.recvs=1,2 b.drain=2"},
	// Ends configured differently: A's stream buffer larger than B's, into
	// which A writes, different frame counts and ACK thresholds.
	{"ends-dyn-stream", "mode=dynamic type=stream a.ring=3 b.ring=2 a.frames=1 b.frames=2 a.ack=3 b.ack=1 a.sends=1,2 a.shutdown b.recvs=2,1 b.drain=2"},
	{"ends-indirect-stream", "mode=indirect-only type=stream a.ring=3 b.ring=2 a.frames=1 b.frames=2 b.ack=1 a.sends=1,2,1 a.shutdown b.recvs=2,1 b.drain=2"},
	// Several messages consumed before an ACK (ack=3), the last of them
	// possibly too long: the ACK must fail exactly that one's send.
	{"indirect-seqpacket-batched", "mode=indirect-only type=seqpacket ring=3 frames=2 ack=3 a.sends=1,1,2 a.shutdown b.recvs=1,1,1 b.drain=2"},
	// Indirect only through a 1-unit stream buffer: every transfer carries
	// one unit, messages go in segments.
	{"indirect-stream-ring1", "mode=indirect-only type=stream ring=1 frames=1 a.sends=1,2,1 a.shutdown b.recvs=2,1,2 b.drain=3"},
	{"indirect-seqpacket-ring1", "mode=indirect-only type=seqpacket ring=1 frames=1 a.sends=1,2,1 a.shutdown b.recvs=2,1,2 b.drain=3"},
	// Zero-length sends on a stream, before, between and after others.
	{"dyn-stream-empty", "mode=dynamic type=stream ring=1 frames=1 a.sends=0,1,0,2 a.shutdown b.recvs=2,1 b.drain=2"},
	// An adversary (forge): in every state, each wrong frame A could send
	// in place of its next one (off by one in sequence, phase, offset or
	// ADVERT number, a DIRECT into a stale or used ADVERT, an INDIRECT past
	// the free space) must be refused by B with a protocol error.
	{"forge-dyn-stream", "mode=dynamic type=stream ring=1 frames=1 a.forge a.sends=1,2 a.shutdown b.recvs=2,1 b.drain=2"},
	{"forge-dyn-seqpacket", "mode=dynamic type=seqpacket ring=1 frames=2 a.forge a.sends=2,1 a.shutdown b.recvs=1,2 b.drain=2"},
	{"forge-indirect-stream", "mode=indirect-only type=stream ring=2 frames=2 a.forge a.sends=1,2,1 a.shutdown b.recvs=2,1 b.drain=2"},
	{"forge-direct-seqpacket", "mode=direct-only type=seqpacket ring=0 frames=2 a.forge a.sends=1,0,2 a.shutdown b.recvs=2,1 b.drain=2"},
}

// largeConfigs are the default set's larger configurations (about 1 s to
// 25 s each on a 2-vCPU machine, 90% of the default run's time): they run
// with EXS_PROOFS_FULL=1, after the default set, or alone with
// EXS_PROOFS_FULL=large (.ci/run's own step, after the README's command
// ran the default set), and in every mutant hunt, after the default set,
// in this order.
var largeConfigs = []config{
	// Lengths up to 3, larger stream buffers, more frame buffers, ACKs
	// for every byte, four sends and recvs.
	{"dyn-stream-ring4", "mode=dynamic type=stream ring=4 frames=2 a.sends=3,1,2 a.shutdown b.recvs=1,3,2 b.drain=3"},
	{"dyn-stream-ring4-ack1", "mode=dynamic type=stream ring=4 frames=2 ack=1 a.sends=3,1,2 a.shutdown b.recvs=1,3,2 b.drain=3"},
	{"dyn-stream-frames3", "mode=dynamic type=stream ring=2 frames=3 a.sends=1,2,1 a.shutdown b.recvs=2,1,2 b.drain=3"},
	{"dyn-stream-ring3", "mode=dynamic type=stream ring=3 frames=2 a.sends=1,2,3 a.shutdown b.recvs=3,1,2 b.drain=3"},
	{"dyn-stream-4x4", "mode=dynamic type=stream ring=2 frames=2 a.sends=1,2,1,2 a.shutdown b.recvs=2,1,2,1 b.drain=3"},
	// The application chooses each length as it posts ("*"): every
	// combination of lengths 1-3 for the three sends (or the three recvs,
	// with and without MSG_WAITALL) in one exploration.
	{"dyn-stream-choose-recvs", "mode=dynamic type=stream ring=1 frames=1 a.sends=1,2,1 a.shutdown b.recvs=*,*,* b.rchoose=1,2w,3 b.drain=3"},
	{"indirect-stream-choose-sends", "mode=indirect-only type=stream ring=2 frames=2 a.sends=*,*,* a.choose=1,2,3 a.shutdown b.recvs=2,1,3 b.drain=3"},
	{"dyn-seqpacket-choose-sends", "mode=dynamic type=seqpacket ring=1 frames=2 a.sends=*,*,* a.choose=1,2,3 a.shutdown b.recvs=2,1,2 b.drain=3"},
	{"dyn-stream-choose-sends", "mode=dynamic type=stream ring=1 frames=1 a.sends=*,*,* a.choose=1,2,3 a.shutdown b.recvs=2,1,2 b.drain=3"},
	// Departure 12 and the cap on indirect transfers: recvs shorter than
	// advmin are never advertised (lengths chosen as posted, so small and
	// large recvs meet in every order), and no indirect transfer carries
	// more than maxind units.
	{"dyn-stream-advmin2-choose-recvs", "mode=dynamic type=stream ring=2 frames=2 advmin=2 a.sends=1,2,1 a.shutdown b.recvs=*,*,* b.rchoose=1,2w,3 b.drain=3"},
	{"dyn-stream-maxind1", "mode=dynamic type=stream ring=3 frames=2 maxind=1 a.sends=2,1,3 a.shutdown b.recvs=1,3,2 b.drain=3"},
	// The ending in both directions, either end closing at any point.
	{"end-dyn-stream-twoway-close", "mode=dynamic type=stream ring=1 frames=1 a.sends=1 a.shutdown a.drain=1 a.close b.sends=1 b.shutdown b.drain=1 b.close"},
	// The wrap with three sends and larger buffers; ends configured
	// differently with three sends; HintMin above 1; no FlagHeld hint from
	// B (noheld); batched ACKs with direct transfers too.
	{"wrap-dyn-stream-3", "mode=dynamic type=stream ring=2 frames=2 seq=-2 phase=-4 a.sends=1,2,1 a.shutdown b.recvs=2,1,2 b.drain=3"},
	{"ends-dyn-stream-3", "mode=dynamic type=stream a.ring=3 b.ring=2 a.frames=1 b.frames=2 a.ack=3 b.ack=1 a.sends=1,2,1 a.shutdown b.recvs=2,1,2 b.drain=3"},
	{"dyn-stream-hintmin2", "mode=dynamic type=stream ring=3 frames=2 hintmin=2 a.sends=1,3,1 a.shutdown b.recvs=1,3,1 b.drain=3"},
	{"dyn-stream-noheld", "mode=dynamic type=stream ring=2 frames=2 b.noheld a.sends=1,2,1 a.shutdown b.recvs=2,1,2 b.drain=3"},
	// Four sends, the second and fourth of length 1 or 2 as posted: the
	// sender pauses for FlagHeld again after a RESUME.
	{"dyn-stream-4sends-pauses", "mode=dynamic type=stream ring=1 frames=1 a.sends=1,*,1,* a.choose=1,2 a.shutdown b.recvs=2,1,2 b.drain=3"},
	{"dyn-seqpacket-batched", "mode=dynamic type=seqpacket ring=3 frames=2 ack=3 a.sends=1,1,2 a.shutdown b.recvs=1,1,1 b.drain=2"},
	// Adversaries: three sends with a MSG_WAITALL recv; both ends forging
	// in both directions.
	{"forge-dyn-stream-waitall", "mode=dynamic type=stream ring=2 frames=2 a.forge a.sends=1,2,1 a.shutdown b.recvs=2w,1,2 b.drain=2"},
	{"forge-dyn-stream-twoway", "mode=dynamic type=stream ring=1 frames=1 a.forge b.forge a.sends=1,1 a.drain=1 b.sends=1 b.recvs=1 b.drain=1"},
}

// deepConfigs are added with EXS_PROOFS_DEEP=1: both directions loaded,
// more sends and recvs, longer lengths, more frame buffers.
var deepConfigs = []config{
	{"deep-dyn-seqpacket-4x4", "mode=dynamic type=seqpacket ring=2 frames=2 a.sends=2,1,3,1 a.shutdown b.recvs=2,1,3,2 b.drain=3"},
	{"deep-dyn-seqpacket-toolong-4x4", "mode=dynamic type=seqpacket ring=2 frames=3 a.sends=3,1,2,1 a.shutdown b.recvs=2,3,1,1 b.drain=3"},
	{"deep-dyn-stream-waitall-4x4", "mode=dynamic type=stream ring=3 frames=2 a.sends=2,1,3,1 a.shutdown b.recvs=1w,2w,3,1w b.drain=3"},
	{"deep-dyn-stream-gather1-ack1-4x4", "mode=dynamic type=stream ring=3 frames=2 ack=1 gather=1 a.sends=2,1,2,1 a.shutdown b.recvs=1,2,1,2 b.drain=2"},
	{"deep-direct-stream-5x5", "mode=direct-only type=stream ring=0 frames=2 a.sends=3,1,2,3,1 a.shutdown b.recvs=2,3,1,3,2 b.drain=3"},
	{"deep-indirect-stream-5x5", "mode=indirect-only type=stream ring=3 frames=2 a.sends=3,1,2,3,1 a.shutdown b.recvs=2,3,1,3,2 b.drain=3"},
	{"deep-dyn-seqpacket-5x5", "mode=dynamic type=seqpacket ring=2 frames=2 a.sends=1,2,1,2,1 a.shutdown b.recvs=2,1,2,1,2 b.drain=3"},
	{"deep-dyn-stream-waitall-5x5", "mode=dynamic type=stream ring=2 frames=2 a.sends=1,2,1,2,1 a.shutdown b.recvs=1w,2w,1,2w,1 b.drain=3"},
	{"deep-dyn-stream-twoway-2x2", "mode=dynamic type=stream ring=1 frames=2 a.sends=1,1 a.recvs=1 a.drain=1 b.sends=1,1 b.recvs=1 b.drain=1"},
	{"deep-dyn-stream-twoway-shutdown", "mode=dynamic type=stream ring=2 frames=2 a.sends=1,1 a.shutdown a.drain=1 b.sends=1 b.recvs=1,1 b.drain=1"},
	{"deep-dyn-stream-4x4-ring3-frames3", "mode=dynamic type=stream ring=3 frames=3 a.sends=3,1,2,3 a.shutdown b.recvs=1,3,2,3 b.drain=3"},
	{"deep-dyn-stream-5x5", "mode=dynamic type=stream ring=2 frames=2 a.sends=1,2,1,2,1 a.shutdown b.recvs=2,1,2,1,2 b.drain=3"},
	{"deep-dyn-stream-4x4-ring4-frames3", "mode=dynamic type=stream ring=4 frames=3 a.sends=3,2,3,1 a.shutdown b.recvs=2,3,1,3 b.drain=3"},
	{"deep-dyn-stream-choose-sends-ring2", "mode=dynamic type=stream ring=2 frames=2 a.sends=*,*,* a.choose=1,2,3 a.shutdown b.recvs=2,1,2 b.drain=3"},
	{"deep-dyn-seqpacket-choose-sends-ring2", "mode=dynamic type=seqpacket ring=2 frames=2 a.sends=*,*,* a.choose=1,2,3 a.shutdown b.recvs=2,1,2 b.drain=3"},
	{"deep-dyn-stream-choose-recvs-ring2", "mode=dynamic type=stream ring=2 frames=2 a.sends=1,2,1 a.shutdown b.recvs=*,*,* b.rchoose=1,2,1w,2w b.drain=3"},
}

// smokeConfigs are all that run under the race detector (the checker is
// about ten times slower there): a few thousand states each, enough to run
// every goroutine of the checker.
var smokeConfigs = []config{
	{"smoke-dyn-stream", "mode=dynamic type=stream ring=1 frames=1 a.sends=1,2 a.shutdown b.recvs=2,1 b.drain=2"},
	{"smoke-dyn-seqpacket", "mode=dynamic type=seqpacket ring=1 frames=1 a.sends=2,1 a.shutdown b.recvs=1,2 b.drain=2"},
	{"smoke-dyn-stream-close", "mode=dynamic type=stream ring=1 frames=1 a.sends=1,1 a.shutdown a.close b.drain=1"},
}

// deep reports whether the deep run was asked for.
func deep() bool { return os.Getenv("EXS_PROOFS_DEEP") != "" }

// full reports whether the large configurations were asked for (the deep
// run includes them).
func full() bool { return os.Getenv("EXS_PROOFS_FULL") != "" || deep() }

// configsFor returns the configurations this test binary runs: the smoke set
// under the race detector or with -short, the default set otherwise, and the
// deep set after it when asked for.
func configsFor(t *testing.T) []config {
	t.Helper()
	switch {
	case raceEnabled || testing.Short():
		return smokeConfigs
	case deep():
		return concatConfigs(defaultConfigs, largeConfigs, deepConfigs)
	case os.Getenv("EXS_PROOFS_FULL") == "large":
		return largeConfigs
	case full():
		return concatConfigs(defaultConfigs, largeConfigs)
	}
	return defaultConfigs
}

// mustSpec parses a configuration's Spec.
func mustSpec(t *testing.T, c config) Spec {
	t.Helper()
	s, err := ParseSpec(c.spec)
	if err != nil {
		t.Fatalf("config %s: %v", c.name, err)
	}
	return s
}

// expectDirectAgain reports whether, in spec, endpoint i's sender must be able
// to return to direct transfers after an indirect phase: the protocol is
// dynamic, i sends at least twice, and its peer posts at least two recvs.
func expectDirectAgain(s Spec, i int) bool {
	peer := s.Scripts[1-i]
	return s.Mode == dynproto.Dynamic && len(s.Scripts[i].Sends) >= 2 &&
		(len(peer.Recvs) >= 2 || (len(peer.Recvs) >= 1 && peer.DrainLen > 0))
}

// concatConfigs returns the lists one after the other in a new slice.
func concatConfigs(lists ...[]config) []config {
	var out []config
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}
