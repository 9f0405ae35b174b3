package verbstest

import (
	"bytes"
	"errors"
	"math"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

var protectionTests = []test{
	{"Protection/Remote", testRemoteViolations},
	{"Protection/Incoming", testIncomingViolation},
	{"Protection/Local", testLocalViolations},
	{"Protection/SendTooLong", testSendTooLong},
	{"Protection/RecvBadKey", testRecvBadKey},
	{"Protection/DeregisterBusy", testDeregisterBusy},
}

// violation is a one-sided operation the peer must refuse.
type violation struct {
	name   string
	op     verbs.Opcode
	access mreg.Access // rights of the peer region
	// key and addr make the forged parameters from the region.
	key  func(x *st, m PeerMR) mreg.Key
	addr func(m PeerMR) uint64
	n    int
}

func rkey(_ *st, m PeerMR) mreg.Key { return m.RKey() }
func start(m PeerMR) uint64         { return m.Addr() }

const rw = mreg.LocalWrite | mreg.RemoteWrite | mreg.RemoteRead

var violations = []violation{
	{name: "ForgedKeyTag", op: verbs.OpWrite, access: rw, key: func(_ *st, m PeerMR) mreg.Key { return m.RKey() ^ 0x7fff0000 }, addr: start, n: 8},
	{name: "ForgedKeySlot", op: verbs.OpWrite, access: rw, key: func(_ *st, m PeerMR) mreg.Key { return m.RKey() ^ 0x3 }, addr: start, n: 8},
	{name: "ZeroKey", op: verbs.OpWrite, access: rw, key: func(*st, PeerMR) mreg.Key { return 0 }, addr: start, n: 8},
	{name: "StaleKey", op: verbs.OpWrite, access: rw, key: staleKey, addr: start, n: 8},
	{name: "StaleKeyRead", op: verbs.OpRead, access: rw, key: staleKey, addr: start, n: 8},
	{name: "AddrWraps", op: verbs.OpWrite, access: rw, key: rkey, addr: func(PeerMR) uint64 { return math.MaxUint64 - 3 }, n: 8},
	{name: "AddrWrapsRead", op: verbs.OpRead, access: rw, key: rkey, addr: func(PeerMR) uint64 { return math.MaxUint64 - 3 }, n: 8},
	{name: "PastEnd", op: verbs.OpWrite, access: rw, key: rkey, addr: func(m PeerMR) uint64 { return m.Addr() + uint64(m.Len()) - 4 }, n: 8},
	{name: "OneBeyondEnd", op: verbs.OpWrite, access: rw, key: rkey, addr: func(m PeerMR) uint64 { return m.Addr() + 1 }, n: 64},
	{name: "BeforeStart", op: verbs.OpWrite, access: rw, key: rkey, addr: func(m PeerMR) uint64 { return m.Addr() - 1 }, n: 4},
	{name: "PastEndRead", op: verbs.OpRead, access: rw, key: rkey, addr: func(m PeerMR) uint64 { return m.Addr() + 60 }, n: 8},
	{name: "NoRemoteWrite", op: verbs.OpWrite, access: mreg.LocalWrite | mreg.RemoteRead, key: rkey, addr: start, n: 8},
	{name: "NoRemoteWriteImm", op: verbs.OpWriteWithImm, access: mreg.LocalWrite | mreg.RemoteRead, key: rkey, addr: start, n: 8},
	{name: "NoRemoteRead", op: verbs.OpRead, access: mreg.LocalWrite | mreg.RemoteWrite, key: rkey, addr: start, n: 8},
	{name: "LKeyAsRKey", op: verbs.OpWrite, access: rw, key: func(_ *st, m PeerMR) mreg.Key { return m.LKey() }, addr: start, n: 8},
	{name: "LKeyAsRKeyRead", op: verbs.OpRead, access: rw, key: func(_ *st, m PeerMR) mreg.Key { return m.LKey() }, addr: start, n: 8},
	{name: "ForgedKeyWriteImm", op: verbs.OpWriteWithImm, access: rw, key: func(_ *st, m PeerMR) mreg.Key { return m.RKey() + 1<<20 }, addr: start, n: 8},
}

// staleKey is the region's rkey; the test deregisters the region before
// using it.
func staleKey(x *st, m PeerMR) mreg.Key { return m.RKey() }

// testRemoteViolations posts each violation, followed by a valid WRITE,
// on a fresh connection: the violation completes with
// StatusRemoteAccessError, the WRITE is flushed, both ends are in Error,
// and neither the peer's memory nor the local sink of a READ is touched.
//
// With RelaxedWritePlacement the WRITEs behind a WRITE_WITH_IMM (a message
// that consumes a RECV) may be placed before it fails: each of them then
// completes with StatusSuccess or StatusFlushed (no success after a
// flushed one), and their region holds their bytes if one succeeded.
// Behind the other violations nothing is relaxed.
func testRemoteViolations(x *st) {
	for _, v := range violations {
		x.run(v.name, func(y *st) {
			remoteViolation(y, v)
		})
	}
}

func remoteViolation(x *st, v violation) {
	q, p := x.pair(QPSpec{}, QPSpec{})
	src := x.register(q, 64, mreg.LocalWrite)
	copy(src.region(), pattern(30, 64))
	target := x.peerRegister(p, 64, v.access)
	recvBuf := x.peerRegister(p, 64, mreg.LocalWrite)
	x.peerRecv(p, 77, PeerSGE{MR: recvBuf, Len: 64})
	good := x.peerRegister(p, 64, rw)

	key := v.key(x, target)
	if v.name == "StaleKey" || v.name == "StaleKeyRead" {
		if err := target.Deregister(); err != nil {
			x.Fatalf("deregister: %v", err)
		}
	}
	relaxed := x.relaxed && v.op == verbs.OpWriteWithImm
	wr := verbs.SendWR{WRID: 1, Opcode: v.op, Flags: verbs.Signaled, SGL: []verbs.SGE{src.sge(0, v.n)}, RKey: key, RemoteAddr: v.addr(target)}
	want := []verbs.WC{{WRID: 1, Status: verbs.StatusRemoteAccessError, Opcode: v.op.WCOpcode()}}
	last := verbs.SendWR{WRID: 3, Opcode: verbs.OpWrite, SGL: []verbs.SGE{src.sge(0, 8)}, RKey: good.RKey(), RemoteAddr: good.Addr()}
	if relaxed {
		last.Flags = verbs.Signaled // it may succeed: see its completion
	}
	x.post(q, wr,
		verbs.SendWR{WRID: 2, Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{src.sge(0, 8)}, RKey: good.RKey(), RemoteAddr: good.Addr()},
		last,
	)
	want = append(want,
		verbs.WC{WRID: 2, Status: verbs.StatusFlushed, Opcode: verbs.WCWrite},
		verbs.WC{WRID: 3, Status: verbs.StatusFlushed, Opcode: verbs.WCWrite})
	got := x.poll(q, 3)
	placed := false
	if relaxed {
		placed = relaxedOutcomes(x, want, got)
	} else {
		x.wantWCs("local", want, got)
	}
	x.waitError(q)
	x.peerWaitError(p)
	if err := q.qp.Err(); !errors.Is(err, verbs.ErrTerminated) {
		x.Errorf("local Err = %v, want ErrTerminated", err)
	}
	// The peer's RECV was not consumed by a WRITE_WITH_IMM that failed its
	// check: it is flushed.
	x.wantWCs("peer", []verbs.WC{{WRID: 77, Status: verbs.StatusFlushed, Opcode: verbs.WCRecv}}, x.peerPoll(p, 1))
	x.peerNoMore(p)
	x.noMore(q)
	if v.name != "StaleKey" && v.name != "StaleKeyRead" {
		x.expectRegion("peer target", x.readPeer(target), fill(64))
	}
	x.expectRegion("peer receive buffer", x.readPeer(recvBuf), fill(64))
	b, wantGood := x.readPeer(good), fill(64)
	if placed || relaxed && bytes.Equal(b[Guard:Guard+8], src.region()[:8]) {
		copy(wantGood, src.region()[:8])
	}
	x.expectRegion("peer region of the WRITEs behind the violation", b, wantGood)
	if v.op == verbs.OpRead {
		b, _ := src.Read()
		x.expectRegion("local read sink", b, pattern(30, 64))
	}
}

// relaxedOutcomes checks the completions got of work requests behind a
// failed one under RelaxedWritePlacement against want, where they are
// flushed: each may have succeeded instead, but none after a flushed one.
// It reports whether one succeeded (its WRITE was placed).
func relaxedOutcomes(x *st, want, got []verbs.WC) bool {
	x.Helper()
	got = stripQPN(got)
	if len(got) != len(want) {
		x.Errorf("local completions %v, want %v (or successes for flushed ones)", got, want)
		return false
	}
	succeeded, flushed := false, false
	for i, wc := range got {
		w := want[i]
		if w.Status == verbs.StatusFlushed && wc.Status == verbs.StatusSuccess && !flushed {
			w.Status = verbs.StatusSuccess
			succeeded = true
		}
		if wc != w {
			x.Errorf("local completion %d: %+v, want %+v (or a success, before any flushed one)", i, wc, w)
		}
		flushed = flushed || wc.Status == verbs.StatusFlushed
	}
	return succeeded
}

// testIncomingViolation has the peer write with a forged key into the
// local side: the local queue pair fails and its memory is untouched.
func testIncomingViolation(x *st) {
	q, p := x.pair(QPSpec{}, QPSpec{})
	target := x.register(q, 64, rw)
	recvBuf := x.register(q, 16, mreg.LocalWrite)
	x.postRecv(q, 5, recvBuf.sge(0, 16))
	src := x.peerRegister(p, 64, 0)
	if err := src.Write(0, pattern(31, 64)); err != nil {
		x.Fatal(err)
	}
	x.peerPost(p,
		PeerSendWR{WRID: 1, Opcode: verbs.OpWrite, Signaled: true, SGL: []PeerSGE{{MR: src, Len: 64}}, RKey: target.RKey() ^ 0x10000, RemoteAddr: target.Addr()},
		PeerSendWR{WRID: 2, Opcode: verbs.OpSend, Signaled: true, SGL: []PeerSGE{{MR: src, Len: 8}}},
	)
	x.wantWCs("peer", []verbs.WC{
		{WRID: 1, Status: verbs.StatusRemoteAccessError, Opcode: verbs.WCWrite},
		{WRID: 2, Status: verbs.StatusFlushed, Opcode: verbs.WCSend},
	}, x.peerPoll(p, 2))
	x.waitError(q)
	x.wantWCs("local", []verbs.WC{{WRID: 5, Status: verbs.StatusFlushed, Opcode: verbs.WCRecv}}, x.poll(q, 1))
	b, _ := target.Read()
	x.expectRegion("local target", b, fill(64))
	b, _ = recvBuf.Read()
	x.expectRegion("local receive buffer", b, fill(16))
}

// testLocalViolations posts work requests whose own scatter/gather list is
// bad: each completes with StatusLocalProtectionError and both ends fail.
func testLocalViolations(x *st) {
	cases := []struct {
		name string
		wr   func(src, ro *localMR, pm PeerMR) verbs.SendWR
	}{
		{"ForgedLKey", func(src, _ *localMR, _ PeerMR) verbs.SendWR {
			s := src.sge(0, 8)
			s.LKey ^= 0x40000000
			return verbs.SendWR{Opcode: verbs.OpSend, SGL: []verbs.SGE{s}}
		}},
		{"RKeyAsLKey", func(src, _ *localMR, pm PeerMR) verbs.SendWR {
			s := src.sge(0, 8)
			s.LKey = src.RKey()
			return verbs.SendWR{Opcode: verbs.OpWrite, SGL: []verbs.SGE{s}, RKey: pm.RKey(), RemoteAddr: pm.Addr()}
		}},
		{"GatherPastEnd", func(src, _ *localMR, pm PeerMR) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.OpWrite, SGL: []verbs.SGE{src.sge(0, 8), src.sge(60, 8)}, RKey: pm.RKey(), RemoteAddr: pm.Addr()}
		}},
		{"ReadIntoReadOnly", func(_, ro *localMR, pm PeerMR) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.OpRead, SGL: []verbs.SGE{ro.sge(0, 8)}, RKey: pm.RKey(), RemoteAddr: pm.Addr()}
		}},
	}
	for _, c := range cases {
		x.run(c.name, func(y *st) {
			q, p := y.pair(QPSpec{}, QPSpec{})
			src := y.register(q, 64, mreg.LocalWrite)
			ro := y.register(q, 64, 0)
			pm := y.peerRegister(p, 64, rw)
			y.peerRecv(p, 9, PeerSGE{MR: pm, Len: 64})
			wr := c.wr(src, ro, pm)
			wr.WRID, wr.Flags = 1, 0 // unsignaled: an error completes anyway
			y.post(q, wr)
			y.wantWCs("local", []verbs.WC{{WRID: 1, Status: verbs.StatusLocalProtectionError, Opcode: wr.Opcode.WCOpcode()}}, y.poll(q, 1))
			y.waitError(q)
			y.peerWaitError(p)
			y.wantWCs("peer", []verbs.WC{{WRID: 9, Status: verbs.StatusFlushed, Opcode: verbs.WCRecv}}, y.peerPoll(p, 1))
			y.expectRegion("peer region", y.readPeer(pm), fill(64))
			b, _ := ro.Read()
			y.expectRegion("local read-only region", b, fill(64))
		})
	}
}

// testSendTooLong sends 16 bytes into an 8-byte RECV.
func testSendTooLong(x *st) {
	q, p := x.pair(QPSpec{}, QPSpec{})
	src := x.register(q, 16, 0)
	copy(src.region(), pattern(32, 16))
	pm := x.peerRegister(p, 16, mreg.LocalWrite)
	x.peerRecv(p, 3, PeerSGE{MR: pm, Len: 8})
	x.peerRecv(p, 4, PeerSGE{MR: pm, Off: 8, Len: 8})
	x.post(q, verbs.SendWR{WRID: 1, Opcode: verbs.OpSend, SGL: []verbs.SGE{src.sge(0, 16)}})
	x.wantWCs("local", []verbs.WC{{WRID: 1, Status: verbs.StatusRemoteInvalidRequest, Opcode: verbs.WCSend}}, x.poll(q, 1))
	x.wantWCs("peer", []verbs.WC{
		{WRID: 3, Status: verbs.StatusLocalLengthError, Opcode: verbs.WCRecv},
		{WRID: 4, Status: verbs.StatusFlushed, Opcode: verbs.WCRecv},
	}, x.peerPoll(p, 2))
	x.waitError(q)
	x.peerWaitError(p)
	x.expectRegion("peer receive buffer", x.readPeer(pm), fill(16))
}

// testRecvBadKey consumes a peer RECV whose scatter list has a forged
// lkey.
func testRecvBadKey(x *st) {
	q, p := x.pair(QPSpec{}, QPSpec{})
	src := x.register(q, 16, 0)
	pm := x.peerRegister(p, 16, mreg.LocalWrite)
	x.peerRecv(p, 3, PeerSGE{MR: pm, Len: 16, Key: pm.LKey() ^ 0x20000000})
	x.post(q, verbs.SendWR{WRID: 1, Opcode: verbs.OpSend, SGL: []verbs.SGE{src.sge(0, 16)}})
	x.wantWCs("local", []verbs.WC{{WRID: 1, Status: verbs.StatusRemoteOperationError, Opcode: verbs.WCSend}}, x.poll(q, 1))
	x.wantWCs("peer", []verbs.WC{{WRID: 3, Status: verbs.StatusLocalProtectionError, Opcode: verbs.WCRecv}}, x.peerPoll(p, 1))
	x.waitError(q)
	x.peerWaitError(p)
	x.expectRegion("peer receive buffer", x.readPeer(pm), fill(16))
}

// testDeregisterBusy checks that memory used by outstanding work cannot be
// deregistered, and that completed work leaves no reference behind.
func testDeregisterBusy(x *st) {
	q, p := x.pair(QPSpec{RNR: verbs.RNRWait}, QPSpec{})
	src := x.register(q, 16, 0)
	target := x.peerRegister(p, 16, rw)
	// Completed work releases its references: on both sides.
	used := x.register(q, 16, mreg.LocalWrite)
	x.post(q,
		verbs.SendWR{WRID: 1, Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{used.sge(0, 16)}, RKey: target.RKey(), RemoteAddr: target.Addr()},
		verbs.SendWR{WRID: 2, Opcode: verbs.OpRead, Flags: verbs.Signaled, SGL: []verbs.SGE{used.sge(0, 16)}, RKey: target.RKey(), RemoteAddr: target.Addr()},
	)
	x.poll(q, 2)
	if err := used.Deregister(); err != nil {
		x.Errorf("deregister after completions: %v", err)
	}
	if err := target.Deregister(); err != nil {
		x.Errorf("peer deregister after completions: %v", err)
	}
	// A SEND waiting for a RECV holds its memory.
	x.post(q, verbs.SendWR{WRID: 3, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{src.sge(0, 16)}})
	x.noMore(q)
	if err := src.Deregister(); !errors.Is(err, mreg.ErrBusy) {
		x.Errorf("deregister memory of a waiting SEND: %v, want mreg.ErrBusy", err)
	}
	if err := q.qp.Disconnect(); err != nil {
		x.Fatal(err)
	}
	x.wantWCs("local", []verbs.WC{{WRID: 3, Status: verbs.StatusFlushed, Opcode: verbs.WCSend}}, x.poll(q, 1))
	if err := src.Deregister(); err != nil {
		x.Errorf("deregister after the flush: %v", err)
	}
}
