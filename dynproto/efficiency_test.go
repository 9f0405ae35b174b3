package dynproto_test

import (
	"testing"

	"github.com/exsgo/exs/dynproto"
)

// TestDirectWhenRecvsPostedAhead: in dynamic mode, with recvs posted well
// ahead of the sends, nearly every byte goes directly.
func TestDirectWhenRecvsPostedAhead(t *testing.T) {
	const size, sends = 4096, 2000
	p := recvsAhead(t)
	p.stream(0, sends, size, nil)
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
	const size, sends = 4096, 2000
	p := recvsAhead(t)
	// Four sends overtake the ADVERTs.
	for i := range 4 {
		p.send(uint64(i), size)
	}
	var before dynproto.Stats
	p.stream(4, sends, size, func(i int) {
		if i == sends/2 {
			before = p.S.Stats()
		}
	})
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

const ahead = 32

// recvsAhead returns a pair whose receiver has 32 recvs of 4 KiB posted, their
// ADVERTs not yet delivered.
func recvsAhead(t *testing.T) *pair {
	cfg := scenarioConfig()
	cfg.RecvBuffer, cfg.PeerRecvBuffer, cfg.AckThreshold = 1<<16, 1<<16, 0
	cfg.Frames, cfg.PeerFrames = 64, 64
	p := newPair(t, cfg)
	for i := range ahead {
		p.recv(uint64(i), 4096, false)
	}
	return p
}

// stream sends sends from..to-1 of size bytes, delivering everything before
// each and keeping 32 recvs posted ahead; each(i) runs before send i.
func (p *pair) stream(from, to, size int, each func(i int)) {
	p.t.Helper()
	for i := from; i < to; i++ {
		if err := p.deliverAll(); err != nil {
			p.t.Fatal(err)
		}
		if each != nil {
			each(i)
		}
		p.send(uint64(i), size)
		for p.nextRecv < uint64(p.recvsDone+ahead) {
			p.recv(p.nextRecv, size, false)
		}
	}
	if err := p.deliverAll(); err != nil {
		p.t.Fatal(err)
	}
}
