package dynproto_test

import (
	"testing"

	"github.com/exsgo/exs/dynproto"
)

// loop is a sender and a receiver whose frames are handed over at once, with
// reused action slices and frame queues: the harness itself allocates
// nothing in steady state, so allocations reported are the engines'.
type loop struct {
	s, r       *dynproto.Engine
	sa, ra     []dynproto.Action
	toR, toS   []dynproto.Frame
	nextRecv   uint64
	writes     int
	recvsDone  int
	sendsDone  int
	recvLen    int
	recvsAhead int
}

func newLoop(b testing.TB, mode dynproto.Mode, recvLen, ahead int) *loop {
	cfg := dynproto.Config{Mode: mode, Type: dynproto.Stream, RecvBuffer: 1 << 20, PeerRecvBuffer: 1 << 20, Frames: 64, PeerFrames: 64}
	s, err := dynproto.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	r, _ := dynproto.New(cfg)
	l := &loop{s: s, r: r, recvLen: recvLen, recvsAhead: ahead,
		sa: make([]dynproto.Action, 0, 64), ra: make([]dynproto.Action, 0, 64),
		toR: make([]dynproto.Frame, 0, 64), toS: make([]dynproto.Frame, 0, 64)}
	for range ahead {
		l.ra = l.r.PostRecv(l.ra, l.nextRecv, recvLen, false)
		l.nextRecv++
	}
	l.run()
	return l
}

// run carries out pending actions until both engines are idle.
func (l *loop) run() {
	for len(l.sa) > 0 || len(l.ra) > 0 || len(l.toR) > 0 || len(l.toS) > 0 || l.writes > 0 {
		for _, a := range l.ra {
			switch a.Kind {
			case dynproto.SendFrame:
				l.toS = append(l.toS, a.Frame)
			case dynproto.RecvDone:
				l.recvsDone++
			}
		}
		l.ra = l.ra[:0]
		for _, a := range l.sa {
			switch a.Kind {
			case dynproto.SendFrame:
				l.toR = append(l.toR, a.Frame)
			case dynproto.WriteDirect, dynproto.WriteIndirect:
				l.writes++
			case dynproto.SendDone:
				l.sendsDone++
			}
		}
		l.sa = l.sa[:0]
		for ; l.writes > 0; l.writes-- {
			l.sa, _ = l.s.WriteDone(l.sa)
		}
		for i := range l.toS {
			l.sa, _ = l.s.OnFrame(l.sa, &l.toS[i])
		}
		l.toS = l.toS[:0]
		for i := range l.toR {
			l.ra, _ = l.r.OnFrame(l.ra, &l.toR[i])
			l.ra = l.r.Copy(l.ra)
		}
		l.toR = l.toR[:0]
		for l.recvsDone > 0 {
			l.recvsDone--
			l.ra = l.r.PostRecv(l.ra, l.nextRecv, l.recvLen, false)
			l.nextRecv++
		}
	}
}

// benchTransfer measures one send of n bytes, from post to completion at both
// ends, including the ADVERT, the frames, the ACKs and the write completions.
func benchTransfer(b *testing.B, mode dynproto.Mode, n int) {
	l := newLoop(b, mode, n, 16)
	b.ReportAllocs()
	id := uint64(0)
	for b.Loop() {
		l.sa = l.s.PostSend(l.sa, id, n)
		id++
		l.run()
	}
	st := l.s.Stats()
	b.ReportMetric(float64(st.TransfersDirect)/float64(st.TransfersDirect+st.TransfersIndirect), "direct/transfer")
}

func BenchmarkTransferDirect(b *testing.B)   { benchTransfer(b, dynproto.DirectOnly, 4096) }
func BenchmarkTransferIndirect(b *testing.B) { benchTransfer(b, dynproto.IndirectOnly, 4096) }
func BenchmarkTransferDynamic(b *testing.B)  { benchTransfer(b, dynproto.Dynamic, 4096) }

// TestSteadyStateDoesNotAllocate checks the target of the benchmarks above:
// once warmed up, a transfer from post to both completions allocates nothing
// in the engines, in each mode.
func TestSteadyStateDoesNotAllocate(t *testing.T) {
	for _, mode := range []dynproto.Mode{dynproto.DirectOnly, dynproto.IndirectOnly, dynproto.Dynamic} {
		t.Run(mode.String(), func(t *testing.T) {
			l := newLoop(t, mode, 4096, 16)
			id := uint64(0)
			transfer := func() {
				l.sa = l.s.PostSend(l.sa, id, 4096)
				id++
				l.run()
			}
			for range 1000 {
				transfer()
			}
			if n := testing.AllocsPerRun(1000, transfer); n != 0 {
				t.Errorf("%v allocations per transfer in steady state, want 0", n)
			}
			if l.sendsDone != int(id) {
				t.Errorf("%d sends completed of %d", l.sendsDone, id)
			}
		})
	}
}

// BenchmarkDecision measures the sender's choice: a send posted with an
// ADVERT waiting, up to the direct write being emitted, plus its completion.
func BenchmarkDecision(b *testing.B) {
	cfg := dynproto.Config{Mode: dynproto.Dynamic, Type: dynproto.Stream, RecvBuffer: 1 << 20, PeerRecvBuffer: 1 << 20, Frames: 1024, PeerFrames: 1024}
	out := make([]dynproto.Action, 0, 16)
	adv := dynproto.Frame{Type: dynproto.FrameAdvert, Phase: 1, Len: 64}
	b.ReportAllocs()
	var s *dynproto.Engine
	id := uint64(0)
	for b.Loop() {
		if id%512 == 0 {
			b.StopTimer()
			s, _ = dynproto.New(cfg)
			for i := range 512 {
				f := adv
				f.ID = uint32(i)
				f.Seq = dynproto.Seq(i * 64)
				out, _ = s.OnFrame(out[:0], &f)
			}
			b.StartTimer()
		}
		out = s.PostSend(out[:0], id, 64)
		out, _ = s.WriteDone(out)
		id++
	}
}

// BenchmarkFrameCodec measures encoding and decoding one frame.
func BenchmarkFrameCodec(b *testing.B) {
	f := dynproto.Frame{Type: dynproto.FrameAdvert, Phase: 3, Seq: 12345, ID: 7, Len: 4096, RKey: 0xabcd, Addr: 0x7f00}
	var buf [dynproto.FrameSize]byte
	var g dynproto.Frame
	b.ReportAllocs()
	for b.Loop() {
		f.Encode(buf[:])
		if err := g.Decode(buf[:]); err != nil {
			b.Fatal(err)
		}
	}
}
