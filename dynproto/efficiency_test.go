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

// lateReceiver runs a sender and a receiver in lockstep rounds, like two
// threads: in each round the sender takes in the frames of the round before,
// completes the writes of the round before and posts sends of size bytes up
// to 16 outstanding; the receiver takes in the frames of the round before,
// copying out after each, and reposts recvs of size bytes up to 32
// outstanding. Every frame and every write takes one round, and the stream
// buffer holds 16 sends. The sender starts one round late, when the first
// ADVERTs arrive. Every period rounds the receiver sleeps for pause
// rounds (a late wake-up), so that the sender runs out of ADVERTs. It
// returns the sender's statistics after the first half of the rounds and at
// the end.
func lateReceiver(t *testing.T, noHint bool, rounds, period, pause int) (half, end dynproto.Stats) {
	const size, sendsOut, recvsOut = 64 << 10, 16, 32
	cfg := scenarioConfig()
	cfg.RecvBuffer, cfg.PeerRecvBuffer, cfg.AckThreshold = 16*size, 16*size, 0
	cfg.Frames, cfg.PeerFrames = 64, 64
	cfg.NoHeldHint = noHint
	p := newPair(t, cfg)
	var nextSend uint64
	for round := range rounds {
		if round == rounds/2 {
			half = p.S.Stats()
		}
		nc, nd, nw := len(p.ctl), len(p.data), p.writes
		p.deliverCtlFrames(nc)
		for ; nw > 0; nw-- {
			acts, err := p.S.WriteDone(nil)
			if err != nil {
				t.Fatal(err)
			}
			p.writes--
			p.fromS(acts)
		}
		for round > 0 && int(nextSend)-p.sendsDone < sendsOut {
			p.send(nextSend, size)
			nextSend++
		}
		if round%period >= period-pause {
			continue // the receiver sleeps
		}
		if err := p.deliverDataFrames(nd); err != nil {
			t.Fatal(err)
		}
		for int(p.nextRecv)-p.recvsDone < recvsOut {
			p.recv(p.nextRecv, size, false)
		}
		if p.R.CanCopy() {
			p.fromR(p.R.Copy(nil))
		}
	}
	return half, p.S.Stats()
}

// TestDirectAgainWithLateReceiver: the receiver now and then reposts its
// recvs late, so that the sender runs out of ADVERTs and goes indirect. The
// sender is never idle from then on, so the receiver's ADVERTs, sent when
// its stream buffer has drained, are stale when they arrive: the sender has
// written more in the meantime. Without the held-recv hint (departure 11)
// the connection stays indirect; with it, it returns to direct transfers
// after each late wake-up.
func TestDirectAgainWithLateReceiver(t *testing.T) {
	for _, c := range []struct{ period, pause int }{{200, 10}, {50, 5}, {100, 40}} {
		for _, noHint := range []bool{true, false} {
			half, end := lateReceiver(t, noHint, 4000, c.period, c.pause)
			direct := end.BytesDirect - half.BytesDirect
			total := direct + end.BytesIndirect - half.BytesIndirect
			frac := float64(direct) / float64(total)
			t.Logf("receiver asleep %d rounds in %d, hint %v: second half %.1f%% direct (%d ADVERTs discarded, %d pauses)",
				c.pause, c.period, !noHint, 100*frac, end.AdvertsDiscarded, end.HeldPauses)
			if end.BytesIndirect == 0 {
				t.Error("the connection never went indirect: the test does not test what it says")
			}
			if !noHint && frac < 0.9 {
				t.Errorf("second half: %.1f%% of bytes direct, want at least 90%%", 100*frac)
			}
		}
	}
}
