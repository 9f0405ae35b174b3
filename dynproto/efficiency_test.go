package dynproto_test

import (
	"testing"

	"github.com/exsgo/exs/dynproto"
)

// TestDirectWhenRecvsPostedAhead: in dynamic mode, with recvs posted well
// ahead of the sends, nearly every byte goes directly.
func TestDirectWhenRecvsPostedAhead(t *testing.T) {
	cfg := scenarioConfig()
	cfg.RecvBuffer, cfg.PeerRecvBuffer, cfg.AckThreshold = 1<<16, 1<<16, 0
	cfg.Frames, cfg.PeerFrames = 64, 64
	p := newPair(t, cfg)
	const size, ahead, sends = 4096, 32, 2000
	next := uint64(0)
	for ; next < ahead; next++ {
		p.recv(next, size, false)
	}
	for i := range sends {
		if err := p.deliverAll(); err != nil {
			t.Fatal(err)
		}
		p.send(uint64(i), size)
		// Repost a recv for each one completed.
		for next < uint64(p.recvsDone+ahead) {
			p.recv(next, size, false)
			next++
		}
	}
	if err := p.deliverAll(); err != nil {
		t.Fatal(err)
	}
	st := p.S.Stats()
	total := st.BytesDirect + st.BytesIndirect
	if total != sends*size {
		t.Fatalf("sent %d bytes, want %d", total, sends*size)
	}
	if frac := float64(st.BytesDirect) / float64(total); frac < 0.99 {
		t.Fatalf("%.1f%% of bytes went directly, want at least 99%% (stats %+v)", 100*frac, st)
	}
}

// TestSenderNeverWaitsWithRoom: with no recv posted ahead, in dynamic mode, a
// send is never held back while the stream buffer has room for it.
func TestSenderNeverWaitsWithRoom(t *testing.T) {
	cfg := scenarioConfig()
	cfg.RecvBuffer, cfg.PeerRecvBuffer, cfg.AckThreshold, cfg.MaxGather = 1000, 1000, 0, 0
	p := newPair(t, cfg)
	sizes := []int{1, 7, 100, 300, 2, 250, 340, 90, 500, 33}
	for i, n := range sizes {
		p.send(uint64(i), n)
		s := p.S.State()
		issued := 0
		for _, a := range p.sOut {
			if a.Kind == dynproto.WriteIndirect && a.ID == uint64(i) {
				issued += a.Len
			}
		}
		if issued < n && s.BS > 0 {
			t.Fatalf("send %d of %d bytes: %d issued while the stream buffer has %d bytes free", i, n, issued, s.BS)
		}
		if issued < n {
			// Let the receiver consume, then the rest must go at once.
			p.recv(uint64(i), 1<<20, false)
			if err := p.deliverAll(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if st := p.S.Stats(); st.BytesDirect != 0 {
		t.Fatalf("%d bytes went directly with no recv posted ahead", st.BytesDirect)
	}
}

// TestDirectAgainAfterIndirectPhase: the sender starts before the receiver's
// ADVERTs reach it, so the connection begins in an indirect phase; with recvs
// kept posted ahead from then on, the protocol must return to direct
// transfers and stay there.
func TestDirectAgainAfterIndirectPhase(t *testing.T) {
	cfg := scenarioConfig()
	cfg.RecvBuffer, cfg.PeerRecvBuffer, cfg.AckThreshold = 1<<16, 1<<16, 0
	cfg.Frames, cfg.PeerFrames = 64, 64
	p := newPair(t, cfg)
	const size, ahead, sends = 4096, 32, 2000
	next := uint64(0)
	for ; next < ahead; next++ {
		p.recv(next, size, false)
	}
	// Four sends overtake the ADVERTs.
	for i := range 4 {
		p.send(uint64(i), size)
	}
	var before dynproto.Stats
	for i := 4; i < sends; i++ {
		if err := p.deliverAll(); err != nil {
			t.Fatal(err)
		}
		if i == sends/2 {
			before = p.S.Stats()
		}
		p.send(uint64(i), size)
		for next < uint64(p.recvsDone+ahead) {
			p.recv(next, size, false)
			next++
		}
	}
	if err := p.deliverAll(); err != nil {
		t.Fatal(err)
	}
	after := p.S.Stats()
	if after.BytesIndirect == 0 {
		t.Fatal("the connection never went indirect: the test does not test what it says")
	}
	direct := after.BytesDirect - before.BytesDirect
	total := direct + after.BytesIndirect - before.BytesIndirect
	if frac := float64(direct) / float64(total); frac < 0.99 {
		t.Fatalf("second half: %.1f%% of bytes direct, want at least 99%% (stats %+v)", 100*frac, after)
	}
}
