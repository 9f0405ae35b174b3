package verbstest

import (
	"bytes"
	"errors"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

var flushTests = []test{
	{"Flush/OnDisconnect", func(x *st) { testFlushLocal(x, false) }},
	{"Flush/OnClose", func(x *st) { testFlushLocal(x, true) }},
	{"Flush/OnPeerDisconnect", func(x *st) { testFlushByPeer(x, false) }},
	{"Flush/OnPeerClose", func(x *st) { testFlushByPeer(x, true) }},
	{"Flush/PostInError", testPostInError},
	{"Flush/DeliveredBeforePeerClose", func(x *st) { testDeliveredBeforePeerGoes(x, true) }},
	{"Flush/DeliveredBeforePeerDisconnect", func(x *st) { testDeliveredBeforePeerGoes(x, false) }},
}

// outstanding posts, on a queue pair whose peer has no RECV, three RECVs
// and four send work requests that wait behind a SEND (RNRWait): a WRITE of
// the 8 bytes it returns at the start of pm, a WRITE_WITH_IMM and a READ.
// It returns the completions a flush must produce for them, RECVs first.
// With RelaxedWritePlacement the WRITE may be placed at once.
func outstanding(x *st, q *localQP, pm PeerMR) (recvs, sends []verbs.WC, written []byte) {
	buf := x.register(q, 64, mreg.LocalWrite)
	written = pattern(40, 8)
	copy(buf.region(), written)
	for i := range 3 {
		x.postRecv(q, uint64(100+i), buf.sge(16*i, 16))
		recvs = append(recvs, verbs.WC{WRID: uint64(100 + i), Status: verbs.StatusFlushed, Opcode: verbs.WCRecv})
	}
	x.post(q,
		verbs.SendWR{WRID: 1, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{buf.sge(0, 8)}},
		verbs.SendWR{WRID: 2, Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{buf.sge(0, 8)}, RKey: pm.RKey(), RemoteAddr: pm.Addr()},
		verbs.SendWR{WRID: 3, Opcode: verbs.OpWriteWithImm, SGL: []verbs.SGE{buf.sge(0, 8)}, RKey: pm.RKey(), RemoteAddr: pm.Addr()},
		verbs.SendWR{WRID: 4, Opcode: verbs.OpRead, Flags: verbs.Signaled, SGL: []verbs.SGE{buf.sge(8, 8)}, RKey: pm.RKey(), RemoteAddr: pm.Addr()},
	)
	sends = []verbs.WC{
		{WRID: 1, Status: verbs.StatusFlushed, Opcode: verbs.WCSend},
		{WRID: 2, Status: verbs.StatusFlushed, Opcode: verbs.WCWrite},
		{WRID: 3, Status: verbs.StatusFlushed, Opcode: verbs.WCWrite},
		{WRID: 4, Status: verbs.StatusFlushed, Opcode: verbs.WCRead},
	}
	return recvs, sends, written
}

// split separates receive completions from send completions, keeping the
// order of each.
func split(wcs []verbs.WC) (recvs, sends []verbs.WC) {
	for _, wc := range wcs {
		if wc.Opcode == verbs.WCRecv || wc.Opcode == verbs.WCRecvWithImm {
			recvs = append(recvs, wc)
		} else {
			sends = append(sends, wc)
		}
	}
	return recvs, sends
}

// testFlushLocal disconnects (or destroys) a queue pair with outstanding
// work: every work request completes once with StatusFlushed, signaled or
// not, the peer moves to Error, and its memory is untouched (but for the
// WRITE placed early that RelaxedWritePlacement allows).
func testFlushLocal(x *st, destroy bool) {
	q, p := x.pair(QPSpec{RNR: verbs.RNRWait}, QPSpec{})
	pm := x.peerRegister(p, 64, rw)
	wantRecvs, wantSends, written := outstanding(x, q, pm)
	x.noMore(q)
	var wcs []verbs.WC
	if destroy {
		if err := q.qp.Close(); err != nil {
			x.Fatalf("Close: %v", err)
		}
		// Close returns after the flush: the completions are there.
		buf := make([]verbs.WC, 16)
		wcs = buf[:q.cq.Poll(buf)]
		if err := q.qp.PostSend(verbs.SendWR{WRID: 9, Opcode: verbs.OpSend}); !errors.Is(err, verbs.ErrClosed) {
			x.Errorf("PostSend after Close: %v, want ErrClosed", err)
		}
		if err := q.qp.PostRecv(verbs.RecvWR{WRID: 9}); !errors.Is(err, verbs.ErrClosed) {
			x.Errorf("PostRecv after Close: %v, want ErrClosed", err)
		}
	} else {
		if err := q.qp.Disconnect(); err != nil {
			x.Fatalf("Disconnect: %v", err)
		}
		wcs = x.poll(q, len(wantRecvs)+len(wantSends))
	}
	recvs, sends := split(wcs)
	x.wantWCs("local receive", wantRecvs, recvs)
	x.wantWCs("local send", wantSends, sends)
	x.noMore(q)
	x.peerWaitError(p)
	x.peerNoMore(p)
	b, want := x.readPeer(pm), fill(64)
	if x.relaxed && bytes.Equal(b[Guard:Guard+8], written) {
		copy(want, written)
	}
	x.expectRegion("peer region", b, want)
}

// testFlushByPeer has the peer disconnect (or destroy its queue pair):
// the local queue pair moves to Error, records why, and flushes.
func testFlushByPeer(x *st, destroy bool) {
	q, p := x.pair(QPSpec{RNR: verbs.RNRWait}, QPSpec{})
	pm := x.peerRegister(p, 64, rw)
	wantRecvs, wantSends, _ := outstanding(x, q, pm)
	endPeer(x, p, destroy, "peer disconnect")
	x.waitError(q)
	if err := q.qp.Err(); !errors.Is(err, verbs.ErrDisconnected) {
		x.Errorf("Err after the peer's disconnect = %v, want ErrDisconnected", err)
	}
	recvs, sends := split(x.poll(q, len(wantRecvs)+len(wantSends)))
	x.wantWCs("local receive", wantRecvs, recvs)
	x.wantWCs("local send", wantSends, sends)
	x.noMore(q)
	if err := q.qp.Disconnect(); !errors.Is(err, verbs.ErrQPState) {
		x.Errorf("Disconnect after the peer's: %v, want ErrQPState", err)
	}
}

// testPostInError posts after the connection ended: the posts are accepted
// and complete at once with StatusFlushed.
func testPostInError(x *st) {
	q, p := x.pair(QPSpec{}, QPSpec{})
	buf := x.register(q, 16, mreg.LocalWrite)
	if err := p.Disconnect(); err != nil {
		x.Fatal(err)
	}
	x.waitError(q)
	x.post(q, verbs.SendWR{WRID: 1, Opcode: verbs.OpSend, SGL: []verbs.SGE{buf.sge(0, 8)}})
	x.postRecv(q, 2, buf.sge(0, 16))
	recvs, sends := split(x.poll(q, 2))
	x.wantWCs("local receive", []verbs.WC{{WRID: 2, Status: verbs.StatusFlushed, Opcode: verbs.WCRecv}}, recvs)
	x.wantWCs("local send", []verbs.WC{{WRID: 1, Status: verbs.StatusFlushed, Opcode: verbs.WCSend}}, sends)
	x.noMore(q)
}

// testDeliveredBeforePeerGoes has the peer WRITE and SEND, wait for its
// SENDs' completions, then close (or disconnect) at once: every SEND whose
// completion the peer saw has completed its RECV here, with its data and
// the data of the WRITEs before it, ahead of the flushes of the RECVs left.
// A completed send is never taken back by the sender's going; exs's close
// rule (no byte whose send completed is lost to the peer's Close) rests on
// it.
func testDeliveredBeforePeerGoes(x *st, destroy bool) {
	const n = 8
	q, p := x.pair(QPSpec{}, QPSpec{})
	dst := x.register(q, 16*(n+2), mreg.LocalWrite)
	target := x.register(q, 16*n, mreg.LocalWrite|mreg.RemoteWrite)
	for i := range n + 2 {
		x.postRecv(q, uint64(100+i), dst.sge(16*i, 16))
	}
	pm := x.peerRegister(p, 32*n, 0)
	data := pattern(21, 32*n)
	if err := pm.Write(0, data); err != nil {
		x.Fatal(err)
	}
	for i := range n {
		x.peerPost(p,
			PeerSendWR{WRID: uint64(2 * i), Opcode: verbs.OpWrite, SGL: []PeerSGE{{MR: pm, Off: 32 * i, Len: 16}},
				RemoteAddr: target.Addr() + uint64(16*i), RKey: target.RKey()},
			PeerSendWR{WRID: uint64(2*i + 1), Opcode: verbs.OpSend, Signaled: true, SGL: []PeerSGE{{MR: pm, Off: 32*i + 16, Len: 16}}},
		)
	}
	x.peerPoll(p, n)
	endPeer(x, p, destroy, "peer close")
	var want []verbs.WC
	for i := range n {
		want = append(want, verbs.WC{WRID: uint64(100 + i), Status: verbs.StatusSuccess, Opcode: verbs.WCRecv, ByteLen: 16})
	}
	for i := n; i < n+2; i++ {
		want = append(want, verbs.WC{WRID: uint64(100 + i), Status: verbs.StatusFlushed, Opcode: verbs.WCRecv})
	}
	x.wantWCs("local receive", want, x.poll(q, n+2))
	wantDst, wantTarget := fill(16*(n+2)), fill(16*n)
	for i := range n {
		copy(wantDst[16*i:], data[32*i+16:32*i+32])
		copy(wantTarget[16*i:], data[32*i:32*i+16])
	}
	b, _ := dst.Read()
	x.expectRegion("local receive buffers", b, wantDst)
	b, _ = target.Read()
	x.expectRegion("local write target", b, wantTarget)
	x.noMore(q)
}

// endPeer ends the peer's queue pair: destroys it (Close) if destroy,
// else disconnects it, failing the test with what if that fails.
func endPeer(x *st, p PeerQP, destroy bool, what string) {
	var err error
	if destroy {
		err = p.Close()
	} else {
		err = p.Disconnect()
	}
	if err != nil {
		x.Fatalf("%s: %v", what, err)
	}
}
