package verbstest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

var dataTests = []test{
	{"Data/SendRecvGatherScatter", testSendRecv},
	{"Data/SendWithImm", testSendWithImm},
	{"Data/WriteAndRead", testWriteRead},
	{"Data/WriteWithImmConsumesRecv", testWriteWithImm},
	{"Data/ZeroLength", testZeroLength},
	{"Data/Unsignaled", testUnsignaled},
	{"Order/SendAfterWrites", testOrdering},
	{"Order/PeerToLocal", testOrderingIncoming},
	{"Order/WritesBehindSends", testWritesBehindSends},
	{"RNR/Wait", testRNRWait},
	{"RNR/Fail", testRNRFail},
	{"CQ/Notify", testNotify},
}

// testSendRecv sends from a 3-element gather list into a 2-element
// scatter list, and back.
func testSendRecv(x *st) {
	q, p := x.pair(QPSpec{}, QPSpec{})
	src := x.register(q, 256, 0)
	copy(src.region(), pattern(10, 256))
	pm := x.peerRegister(p, 256, mreg.LocalWrite)
	x.peerRecv(p, 100, PeerSGE{MR: pm, Off: 0, Len: 50}, PeerSGE{MR: pm, Off: 128, Len: 100})
	x.post(q, verbs.SendWR{WRID: 1, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{
		src.sge(0, 30), src.sge(100, 0), src.sge(200, 50),
	}})
	x.wantWCs("local", []verbs.WC{{WRID: 1, Status: verbs.StatusSuccess, Opcode: verbs.WCSend}}, x.poll(q, 1))
	x.wantWCs("peer", []verbs.WC{{WRID: 100, Status: verbs.StatusSuccess, Opcode: verbs.WCRecv, ByteLen: 80}}, x.peerPoll(p, 1))
	msg := append(append([]byte(nil), src.region()[0:30]...), src.region()[200:250]...)
	want := fill(256)
	copy(want[0:50], msg[:50])
	copy(want[128:], msg[50:])
	x.expectRegion("peer receive buffer", x.readPeer(pm), want)

	// Back: one peer SGE into three local ones.
	dst := x.register(q, 96, mreg.LocalWrite)
	x.postRecv(q, 200, dst.sge(0, 10), dst.sge(40, 10), dst.sge(80, 16))
	data := pattern(11, 36)
	if err := pm.Write(0, data); err != nil {
		x.Fatal(err)
	}
	x.peerPost(p, PeerSendWR{WRID: 2, Opcode: verbs.OpSend, SGL: []PeerSGE{{MR: pm, Len: 36}}})
	x.wantWCs("local", []verbs.WC{{WRID: 200, Status: verbs.StatusSuccess, Opcode: verbs.WCRecv, ByteLen: 36}}, x.poll(q, 1))
	want = fill(96)
	copy(want[0:10], data[0:10])
	copy(want[40:50], data[10:20])
	copy(want[80:96], data[20:36])
	b, _ := dst.Read()
	x.expectRegion("local receive buffer", b, want)
	x.peerNoMore(p) // the peer's SEND was unsignaled
}

// testSendWithImm checks the immediate data of a SEND.
func testSendWithImm(x *st) {
	q, p := x.pair(QPSpec{}, QPSpec{})
	src := x.register(q, 16, 0)
	pm := x.peerRegister(p, 16, mreg.LocalWrite)
	x.peerRecv(p, 7, PeerSGE{MR: pm, Len: 16})
	x.post(q, verbs.SendWR{WRID: 1, Opcode: verbs.OpSendWithImm, Imm: 0xdeadbeef, Flags: verbs.Signaled, SGL: []verbs.SGE{src.sge(0, 16)}})
	x.wantWCs("local", []verbs.WC{{WRID: 1, Status: verbs.StatusSuccess, Opcode: verbs.WCSend}}, x.poll(q, 1))
	x.wantWCs("peer", []verbs.WC{{WRID: 7, Status: verbs.StatusSuccess, Opcode: verbs.WCRecv, Flags: verbs.WCWithImm, ByteLen: 16, Imm: 0xdeadbeef}}, x.peerPoll(p, 1))
}

// testWriteRead writes into the middle of a peer region, up to its last
// byte, and reads it back into a scattered local buffer.
func testWriteRead(x *st) {
	q, p := x.pair(QPSpec{}, QPSpec{})
	src := x.register(q, 128, 0)
	copy(src.region(), pattern(12, 128))
	pm := x.peerRegister(p, 200, mreg.LocalWrite|mreg.RemoteWrite|mreg.RemoteRead)
	x.post(q,
		verbs.SendWR{WRID: 1, Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{src.sge(0, 40), src.sge(64, 24)},
			RKey: pm.RKey(), RemoteAddr: pm.Addr() + 10},
		// The last bytes of the region: the bounds are inclusive of the end.
		verbs.SendWR{WRID: 2, Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{src.sge(100, 28)},
			RKey: pm.RKey(), RemoteAddr: pm.Addr() + 172},
	)
	x.wantWCs("local", []verbs.WC{
		{WRID: 1, Status: verbs.StatusSuccess, Opcode: verbs.WCWrite},
		{WRID: 2, Status: verbs.StatusSuccess, Opcode: verbs.WCWrite},
	}, x.poll(q, 2))
	want := fill(200)
	copy(want[10:50], src.region()[0:40])
	copy(want[50:74], src.region()[64:88])
	copy(want[172:200], src.region()[100:128])
	x.expectRegion("peer region", x.readPeer(pm), want)
	x.peerNoMore(p) // one-sided: nothing completes at the peer

	sink := x.register(q, 100, mreg.LocalWrite)
	x.post(q, verbs.SendWR{WRID: 3, Opcode: verbs.OpRead, Flags: verbs.Signaled, SGL: []verbs.SGE{sink.sge(0, 30), sink.sge(50, 34)},
		RKey: pm.RKey(), RemoteAddr: pm.Addr() + 10})
	x.wantWCs("local", []verbs.WC{{WRID: 3, Status: verbs.StatusSuccess, Opcode: verbs.WCRead, ByteLen: 64}}, x.poll(q, 1))
	wantSink := fill(100)
	copy(wantSink[0:30], want[10:40])
	copy(wantSink[50:84], want[40:74])
	b, _ := sink.Read()
	x.expectRegion("local read sink", b, wantSink)
}

// testWriteWithImm checks that an RDMA WRITE with immediate data places
// its data, consumes a RECV without touching the RECV's buffer, and
// reports the immediate data and the byte count.
func testWriteWithImm(x *st) {
	q, p := x.pair(QPSpec{}, QPSpec{})
	src := x.register(q, 64, 0)
	copy(src.region(), pattern(13, 64))
	target := x.peerRegister(p, 64, mreg.LocalWrite|mreg.RemoteWrite)
	recvBuf := x.peerRegister(p, 64, mreg.LocalWrite)
	x.peerRecv(p, 50, PeerSGE{MR: recvBuf, Len: 64})
	x.peerRecv(p, 51) // no scatter list at all
	x.post(q,
		verbs.SendWR{WRID: 1, Opcode: verbs.OpWriteWithImm, Imm: 42, Flags: verbs.Signaled, SGL: []verbs.SGE{src.sge(0, 48)},
			RKey: target.RKey(), RemoteAddr: target.Addr()},
		verbs.SendWR{WRID: 2, Opcode: verbs.OpWriteWithImm, Imm: 43, Flags: verbs.Signaled, SGL: []verbs.SGE{src.sge(48, 16)},
			RKey: target.RKey(), RemoteAddr: target.Addr() + 48},
	)
	x.wantWCs("local", []verbs.WC{
		{WRID: 1, Status: verbs.StatusSuccess, Opcode: verbs.WCWrite},
		{WRID: 2, Status: verbs.StatusSuccess, Opcode: verbs.WCWrite},
	}, x.poll(q, 2))
	x.wantWCs("peer", []verbs.WC{
		{WRID: 50, Status: verbs.StatusSuccess, Opcode: verbs.WCRecvWithImm, Flags: verbs.WCWithImm, ByteLen: 48, Imm: 42},
		{WRID: 51, Status: verbs.StatusSuccess, Opcode: verbs.WCRecvWithImm, Flags: verbs.WCWithImm, ByteLen: 16, Imm: 43},
	}, x.peerPoll(p, 2))
	x.expectRegion("peer target", x.readPeer(target), src.region())
	x.expectRegion("peer receive buffer (untouched)", x.readPeer(recvBuf), fill(64))
}

// testZeroLength moves zero bytes with each opcode.
func testZeroLength(x *st) {
	q, p := x.pair(QPSpec{}, QPSpec{})
	pm := x.peerRegister(p, 8, mreg.LocalWrite|mreg.RemoteWrite|mreg.RemoteRead)
	x.peerRecv(p, 1)
	x.peerRecv(p, 2, PeerSGE{MR: pm, Len: 8})
	x.post(q,
		verbs.SendWR{WRID: 10, Opcode: verbs.OpSend, Flags: verbs.Signaled},
		verbs.SendWR{WRID: 11, Opcode: verbs.OpWrite, Flags: verbs.Signaled, RKey: pm.RKey(), RemoteAddr: pm.Addr() + 8},
		verbs.SendWR{WRID: 12, Opcode: verbs.OpRead, Flags: verbs.Signaled, RKey: pm.RKey(), RemoteAddr: pm.Addr()},
		verbs.SendWR{WRID: 13, Opcode: verbs.OpSendWithImm, Imm: 5, Flags: verbs.Signaled},
	)
	x.wantWCs("local", []verbs.WC{
		{WRID: 10, Status: verbs.StatusSuccess, Opcode: verbs.WCSend},
		{WRID: 11, Status: verbs.StatusSuccess, Opcode: verbs.WCWrite},
		{WRID: 12, Status: verbs.StatusSuccess, Opcode: verbs.WCRead},
		{WRID: 13, Status: verbs.StatusSuccess, Opcode: verbs.WCSend},
	}, x.poll(q, 4))
	x.wantWCs("peer", []verbs.WC{
		{WRID: 1, Status: verbs.StatusSuccess, Opcode: verbs.WCRecv},
		{WRID: 2, Status: verbs.StatusSuccess, Opcode: verbs.WCRecv, Flags: verbs.WCWithImm, Imm: 5},
	}, x.peerPoll(p, 2))
	x.expectRegion("peer region", x.readPeer(pm), fill(8))
}

// testUnsignaled posts unsignaled work requests: they complete silently,
// the signaled one after them reports, and the completion queue's slots
// come back.
func testUnsignaled(x *st) {
	q, p := x.pair(QPSpec{SendDepth: 4, CQDepth: 4}, QPSpec{})
	src := x.register(q, 8, 0)
	pm := x.peerRegister(p, 8, mreg.LocalWrite|mreg.RemoteWrite)
	for round := range 10 {
		for i := range 3 {
			x.post(q, verbs.SendWR{WRID: uint64(round*10 + i), Opcode: verbs.OpWrite, SGL: []verbs.SGE{src.sge(0, 8)},
				RKey: pm.RKey(), RemoteAddr: pm.Addr()})
		}
		x.post(q, verbs.SendWR{WRID: uint64(round*10 + 9), Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{src.sge(0, 8)},
			RKey: pm.RKey(), RemoteAddr: pm.Addr()})
		x.wantWCs(fmt.Sprintf("round %d", round), []verbs.WC{{WRID: uint64(round*10 + 9), Status: verbs.StatusSuccess, Opcode: verbs.WCWrite}}, x.poll(q, 1))
	}
	x.noMore(q)
}

// testOrdering posts random sequences of RDMA WRITEs (signaled or not, of
// random sizes, into distinct slots of a peer region) each followed by a
// SEND carrying the round number, and checks that completions come in
// post order and that when the peer's RECV completes, every WRITE of the
// round has been placed.
func testOrdering(x *st) {
	seed := time.Now().UnixNano()
	x.run(fmt.Sprintf("seed=%d", seed), func(y *st) {
		orderingRounds(y, rand.New(rand.NewPCG(uint64(seed), 1)))
	})
}

func orderingRounds(x *st, rng *rand.Rand) {
	const slots, slotSize, rounds = 8, 512, 20
	q, p := x.pair(QPSpec{SendDepth: 64}, QPSpec{RecvDepth: rounds})
	src := x.register(q, slots*slotSize, 0)
	msg := x.register(q, 8, 0)
	target := x.peerRegister(p, slots*slotSize, mreg.LocalWrite|mreg.RemoteWrite)
	note := x.peerRegister(p, 8*rounds, mreg.LocalWrite)
	for r := range rounds {
		x.peerRecv(p, uint64(1000+r), PeerSGE{MR: note, Off: 8 * r, Len: 8})
	}
	image := fill(slots * slotSize)
	var wrid uint64
	for r := range rounds {
		nw := 1 + rng.IntN(slots)
		var want []verbs.WC
		for i := range nw {
			slot := rng.IntN(slots)
			n := 1 + rng.IntN(slotSize)
			data := pattern(r*100+i, n)
			off := slot * slotSize
			// The source of each WRITE of a round is its own: memory of
			// an outstanding work request must not be touched.
			copy(src.region()[i*slotSize:], data)
			copy(image[off:], data)
			wrid++
			wr := verbs.SendWR{WRID: wrid, Opcode: verbs.OpWrite, SGL: []verbs.SGE{src.sge(i*slotSize, n)},
				RKey: target.RKey(), RemoteAddr: target.Addr() + uint64(off)}
			if rng.IntN(2) == 0 {
				wr.Flags = verbs.Signaled
				want = append(want, verbs.WC{WRID: wrid, Status: verbs.StatusSuccess, Opcode: verbs.WCWrite})
			}
			x.post(q, wr)
		}
		copy(msg.region(), fmt.Appendf(nil, "round%03d", r))
		wrid++
		x.post(q, verbs.SendWR{WRID: wrid, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{msg.sge(0, 8)}})
		want = append(want, verbs.WC{WRID: wrid, Status: verbs.StatusSuccess, Opcode: verbs.WCSend})
		x.wantWCs(fmt.Sprintf("round %d, local", r), want, x.poll(q, len(want)))
		x.wantWCs(fmt.Sprintf("round %d, peer", r), []verbs.WC{{WRID: uint64(1000 + r), Status: verbs.StatusSuccess, Opcode: verbs.WCRecv, ByteLen: 8}}, x.peerPoll(p, 1))
		// The RECV has completed: every WRITE before the SEND is placed.
		x.expectRegion(fmt.Sprintf("round %d, peer target", r), x.readPeer(target), image)
		got := x.readPeer(note)[Guard+8*r : Guard+8*r+8]
		if want := fmt.Sprintf("round%03d", r); string(got) != want {
			x.Errorf("round %d: note %q, want %q", r, got, want)
		}
		if x.Failed() {
			return
		}
	}
}

// testOrderingIncoming has the peer write then send to the local side and
// checks, at each local RECV completion, that the data is there.
func testOrderingIncoming(x *st) {
	q, p := x.pair(QPSpec{}, QPSpec{})
	const rounds, size = 16, 1024
	target := x.register(q, size, mreg.LocalWrite|mreg.RemoteWrite)
	notes := x.register(q, rounds, mreg.LocalWrite)
	for r := range rounds {
		x.postRecv(q, uint64(r), notes.sge(r, 1))
	}
	src := x.peerRegister(p, size, 0)
	for r := range rounds {
		data := pattern(r, size)
		if err := src.Write(0, data); err != nil {
			x.Fatal(err)
		}
		x.peerPost(p,
			PeerSendWR{WRID: 1, Opcode: verbs.OpWrite, SGL: []PeerSGE{{MR: src, Len: size / 2}}, RKey: target.RKey(), RemoteAddr: target.Addr()},
			PeerSendWR{WRID: 2, Opcode: verbs.OpWrite, SGL: []PeerSGE{{MR: src, Off: size / 2, Len: size / 2}}, RKey: target.RKey(), RemoteAddr: target.Addr() + size/2},
			PeerSendWR{WRID: 3, Opcode: verbs.OpSend, Signaled: true, SGL: []PeerSGE{{MR: src, Len: 1}}},
		)
		x.wantWCs(fmt.Sprintf("round %d", r), []verbs.WC{{WRID: uint64(r), Status: verbs.StatusSuccess, Opcode: verbs.WCRecv, ByteLen: 1}}, x.poll(q, 1))
		if !bytes.Equal(target.region(), data) {
			x.Fatalf("round %d: at the RECV completion the WRITEs are not placed: %s", r, diffBytes(data, target.region()))
		}
		x.peerPoll(p, 1)
	}
}

// testWritesBehindSends posts rounds of an RDMA WRITE followed by the SEND
// that announces it, without waiting between rounds (a transfer and its
// frame, as exs posts them), with the WRITEs large enough for a provider's
// direct path: every completion is a success, in post order, and once the
// peer's RECV of a round completes, the WRITEs of that round and of every
// round before it are placed. With RelaxedWritePlacement a round's WRITE
// may be placed before the SEND of the round before is delivered; a SEND
// still follows the data of the WRITEs before it.
func testWritesBehindSends(x *st) {
	const rounds, size = 16, 20 << 10
	q, p := x.pair(QPSpec{SendDepth: 2 * rounds}, QPSpec{RecvDepth: rounds})
	src := x.register(q, rounds*size, 0)
	msg := x.register(q, 8*rounds, 0)
	// A region per round, so that the check of a round reads no byte a
	// later round's WRITE may be placing.
	targets := make([]PeerMR, rounds)
	note := x.peerRegister(p, 8*rounds, mreg.LocalWrite)
	var want, wantRecvs []verbs.WC
	for r := range rounds {
		targets[r] = x.peerRegister(p, size, mreg.LocalWrite|mreg.RemoteWrite)
		x.peerRecv(p, uint64(1000+r), PeerSGE{MR: note, Off: 8 * r, Len: 8})
		wantRecvs = append(wantRecvs, verbs.WC{WRID: uint64(1000 + r), Status: verbs.StatusSuccess, Opcode: verbs.WCRecv, ByteLen: 8})
		copy(src.region()[r*size:], pattern(r, size))
		copy(msg.region()[8*r:], fmt.Appendf(nil, "round%03d", r))
	}
	for r := range rounds {
		x.post(q,
			verbs.SendWR{WRID: uint64(2 * r), Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{src.sge(r*size, size)},
				RKey: targets[r].RKey(), RemoteAddr: targets[r].Addr()},
			verbs.SendWR{WRID: uint64(2*r + 1), Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{msg.sge(8*r, 8)}})
		want = append(want,
			verbs.WC{WRID: uint64(2 * r), Status: verbs.StatusSuccess, Opcode: verbs.WCWrite},
			verbs.WC{WRID: uint64(2*r + 1), Status: verbs.StatusSuccess, Opcode: verbs.WCSend})
	}
	var recvs []verbs.WC
	for r := range rounds {
		for len(recvs) <= r {
			recvs = append(recvs, x.peerPoll(p, 1)...)
		}
		// The RECV of round r has completed: the WRITE of round r is
		// placed (those of the rounds before were checked at their own
		// RECVs, which completed earlier); later ones may be.
		if got := x.readPeer(targets[r])[Guard:][:size]; !bytes.Equal(got, pattern(r, size)) {
			x.Fatalf("round %d: at the RECV completion the round's WRITE is not placed: %s", r, diffBytes(pattern(r, size), got))
		}
	}
	x.wantWCs("peer", wantRecvs, recvs)
	x.wantWCs("local", want, x.poll(q, len(want)))
	for r := range rounds {
		x.expectRegion(fmt.Sprintf("peer target %d", r), x.readPeer(targets[r]), pattern(r, size))
	}
	b := x.readPeer(note)
	for r := range rounds {
		if got, want := string(b[Guard+8*r:Guard+8*r+8]), fmt.Sprintf("round%03d", r); got != want {
			x.Errorf("note of round %d: %q, want %q", r, got, want)
		}
	}
}

// testRNRWait sends with no RECV posted under RNRWait: the SEND and the
// WRITE behind it wait, and proceed in order once the peer posts a RECV.
// With RelaxedWritePlacement the WRITE's bytes may be placed before the
// RECV is posted; its completion still waits for the SEND's.
func testRNRWait(x *st) {
	q, p := x.pair(QPSpec{RNR: verbs.RNRWait}, QPSpec{})
	src := x.register(q, 32, 0)
	copy(src.region(), pattern(20, 32))
	pm := x.peerRegister(p, 32, mreg.LocalWrite|mreg.RemoteWrite)
	x.post(q,
		verbs.SendWR{WRID: 1, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{src.sge(0, 8)}},
		verbs.SendWR{WRID: 2, Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{src.sge(8, 8)},
			RKey: pm.RKey(), RemoteAddr: pm.Addr() + 16},
	)
	x.noMore(q)
	if s := q.qp.State(); s != verbs.StateReadyToSend {
		x.Errorf("state while waiting for a RECV = %v, want ReadyToSend", s)
	}
	got, before := x.readPeer(pm), fill(32)
	if x.relaxed && !bytes.Equal(got[Guard+16:Guard+24], before[16:24]) {
		copy(before[16:24], src.region()[8:16]) // placed early: the relaxed rule
	}
	x.expectRegion("peer region before the RECV", got, before)
	x.peerRecv(p, 9, PeerSGE{MR: pm, Len: 8})
	x.wantWCs("local", []verbs.WC{
		{WRID: 1, Status: verbs.StatusSuccess, Opcode: verbs.WCSend},
		{WRID: 2, Status: verbs.StatusSuccess, Opcode: verbs.WCWrite},
	}, x.poll(q, 2))
	x.wantWCs("peer", []verbs.WC{{WRID: 9, Status: verbs.StatusSuccess, Opcode: verbs.WCRecv, ByteLen: 8}}, x.peerPoll(p, 1))
	want := fill(32)
	copy(want[0:8], src.region()[0:8])
	copy(want[16:24], src.region()[8:16])
	x.expectRegion("peer region", x.readPeer(pm), want)
}

// testRNRFail sends with no RECV posted under RNRFail: the SEND fails with
// StatusRNRRetryExceeded, later work is flushed, and both ends are in
// Error.
func testRNRFail(x *st) {
	q, p := x.pair(QPSpec{RNR: verbs.RNRFail}, QPSpec{})
	src := x.register(q, 8, 0)
	x.post(q, verbs.SendWR{WRID: 1, Opcode: verbs.OpSend, SGL: []verbs.SGE{src.sge(0, 8)}})
	x.wantWCs("local", []verbs.WC{{WRID: 1, Status: verbs.StatusRNRRetryExceeded, Opcode: verbs.WCSend}}, x.poll(q, 1))
	x.waitError(q)
	x.peerWaitError(p)
	x.post(q, verbs.SendWR{WRID: 2, Opcode: verbs.OpSend, SGL: []verbs.SGE{src.sge(0, 8)}})
	x.wantWCs("local", []verbs.WC{{WRID: 2, Status: verbs.StatusFlushed, Opcode: verbs.WCSend}}, x.poll(q, 1))
	x.noMore(q)
}

// testNotify arms the completion queue and checks that a completion fires
// the notification, once.
func testNotify(x *st) {
	q, p := x.pair(QPSpec{}, QPSpec{})
	src := x.register(q, 8, 0)
	pm := x.peerRegister(p, 8, mreg.LocalWrite|mreg.RemoteWrite)
	wr := verbs.SendWR{WRID: 1, Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{src.sge(0, 8)}, RKey: pm.RKey(), RemoteAddr: pm.Addr()}
	x.post(q, wr) // before arming: no notification
	q.cq.RequestNotify()
	select {
	case <-q.cq.Notify():
		x.Fatalf("notification for a completion queued before RequestNotify")
	default:
	}
	x.poll(q, 1)
	x.post(q, wr)
	select {
	case <-q.cq.Notify():
	case <-x.ctx.Done():
		x.Fatalf("no notification after a completion")
	}
	x.poll(q, 1)
	x.post(q, wr) // disarmed by the first notification
	select {
	case <-q.cq.Notify():
		x.Errorf("second notification without RequestNotify")
	case <-time.After(quiet):
	}
	x.poll(q, 1)
}
