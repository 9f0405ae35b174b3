package dynproto_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/exsgo/exs/dynproto"
	"github.com/exsgo/exs/dynproto/internal/mut"
)

func scenarioConfig() dynproto.Config {
	return dynproto.Config{
		Mode: dynproto.Dynamic, Type: dynproto.Stream,
		RecvBuffer: 64, PeerRecvBuffer: 64, Frames: 16, PeerFrames: 16,
		AckThreshold: 1, MaxGather: 1,
	}
}

// phases is what the scenario checks after each step.
type phases struct {
	PS   dynproto.Phase
	SS   dynproto.Seq
	PR   dynproto.Phase
	SR   dynproto.Seq
	SEst dynproto.Seq
	KA   int
	KB   int
}

func (p *pair) phases() phases {
	s, r := p.S.State(), p.R.State()
	return phases{PS: s.PS, SS: s.SS, PR: r.PR, SR: r.SR, SEst: r.SEst, KA: r.KA, KB: r.KB}
}

func (p *pair) expect(step string, want phases) {
	p.t.Helper()
	if diff := cmp.Diff(want, p.phases()); diff != "" {
		p.t.Fatalf("after %s (-want +got):\n%s", step, diff)
	}
}

// TestSlidesScenario replays the scenario of the IPDPS 2014 slides: the
// receiver's ADVERTs A4-A6 are delayed, so the sender goes indirect; when they
// arrive they are stale and discarded, the sender's phase jumping past theirs;
// the receiver holds off advertising until the stale recvs are filled from the
// stream buffer; then direct transfers resume.
//
// Built with -tags mut_nophasejump the sender does not jump, and the test
// shows what goes wrong: the sender matches A6, whose sequence estimate
// happens to equal S_S, and writes directly into a recv that the receiver is
// filling from the stream buffer; the receiver detects it.
func TestSlidesScenario(t *testing.T) {
	// The slides' protocol: without departure 11, which would open each
	// direct phase with one ADVERT and make the sender wait for the rest.
	cfg := scenarioConfig()
	cfg.NoHeldHint = true
	p := newPair(t, cfg)

	// Two bytes go directly into A1 and A2.
	p.recv(1, 8, false)
	p.recv(2, 8, false)
	p.deliverCtlFrames(2)
	p.send(1, 1)
	p.send(2, 1)
	if err := p.deliverDataFrames(2); err != nil {
		t.Fatal(err)
	}
	p.doneWrites()
	p.expect("two direct bytes", phases{PS: 1, SS: 2, PR: 1, SR: 2, SEst: 2})

	// A3 is late: the sender sends 2 bytes indirectly; the receiver leaves
	// its direct phase and fills the now stale recv 3 from the stream buffer.
	p.recv(3, 8, false)
	p.send(3, 2)
	if err := p.deliverDataFrames(1); err != nil {
		t.Fatal(err)
	}
	p.doneWrites()
	p.expect("A3 overtaken", phases{PS: 2, SS: 4, PR: 2, SR: 4, SEst: 4})

	// Caught up, the receiver advertises A4-A6 in a new direct phase 3;
	// they are delayed behind A3. Meanwhile the sender sends 2 more bytes
	// indirectly, which makes A4-A6 stale at the receiver (k_a = 3).
	p.recv(4, 8, false)
	p.recv(5, 8, false)
	p.recv(6, 8, false)
	p.send(4, 2)
	if err := p.deliverDataFrames(1); err != nil {
		t.Fatal(err)
	}
	p.doneWrites()
	p.expect("A4-A6 overtaken", phases{PS: 2, SS: 6, PR: 4, SR: 6, SEst: 8, KA: 2})

	// A recv posted now is held off: k_a > 0.
	p.recv(7, 8, false)
	if len(p.rOut) != 0 {
		t.Fatalf("receiver did %v for a recv posted while k_a > 0, want nothing (hold-off)", p.rOut)
	}
	p.expect("hold-off", phases{PS: 2, SS: 6, PR: 4, SR: 6, SEst: 8, KA: 2, KB: 1})

	// A3-A6 (and the receiver's ACKs) reach the sender, which looks at
	// them when it next has data to send.
	p.deliverCtlFrames(len(p.ctl))
	p.send(5, 1)
	st := p.S.Stats()
	if mut.Active == "mut_nophasejump" {
		// Without the jump the sender stays in phase 2: A3 is stale by
		// phase, A4 and A5 by sequence number, but A6 (P_A = 3 > 2,
		// S_A = 6 = S_S) looks fresh.
		p.expect("stale ADVERTs without the jump", phases{PS: 3, SS: 7, PR: 4, SR: 6, SEst: 8, KA: 2, KB: 1})
		if got := p.sOut[0]; got.Kind != dynproto.WriteDirect || got.RKey != 106 {
			t.Fatalf("sender did %v, want the faulty direct write into A6 (recv 6)", got)
		}
		err := p.deliverDataFrames(1)
		if !errors.Is(err, dynproto.ErrProtocol) {
			t.Fatalf("receiver accepted the direct write into stale A6 (err %v)", err)
		}
		t.Logf("without the phase jump the sender matched A6 and the receiver refused it: %v", err)
		return
	}
	if st.AdvertsDiscarded != 4 {
		t.Fatalf("sender discarded %d ADVERTs, want A3-A6", st.AdvertsDiscarded)
	}
	// A4 was stale by sequence number with a newer phase: the sender
	// jumped to phase 4, beyond it, so A5 and A6 are stale by phase. The
	// byte goes indirectly.
	if p.sOut[0].Kind != dynproto.WriteIndirect {
		t.Fatalf("sender did %v, want an indirect write", p.sOut[0])
	}
	p.expect("stale ADVERTs discarded", phases{PS: 4, SS: 7, PR: 4, SR: 6, SEst: 8, KA: 2, KB: 1})

	// One more byte: the two fill the stale recvs 5 and 6 from the stream
	// buffer.
	p.send(6, 1)
	if err := p.deliverDataFrames(2); err != nil {
		t.Fatal(err)
	}
	p.doneWrites()
	// Caught up (k_a = 0, b_r = 0): the held recv 7 is advertised as A7 in
	// direct phase 5 with S_A = S_r = 8.
	p.expect("caught up", phases{PS: 4, SS: 8, PR: 5, SR: 8, SEst: 9})
	p.deliverCtlFrames(len(p.ctl))
	p.send(7, 3)
	want := dynproto.Action{Kind: dynproto.WriteDirect, ID: 7, Len: 3, RKey: 107}
	if diff := cmp.Diff(want, p.sOut[0]); diff != "" {
		t.Fatalf("direct transfers did not resume (-want +got):\n%s", diff)
	}
	if err := p.deliverDataFrames(1); err != nil {
		t.Fatal(err)
	}
	p.expect("direct again", phases{PS: 5, SS: 11, PR: 5, SR: 11, SEst: 11})
}
