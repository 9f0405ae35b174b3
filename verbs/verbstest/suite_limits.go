package verbstest

import (
	"errors"
	"syscall"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

var limitTests = []test{
	{"Limits/SendQueueDepth", testSendDepth},
	{"Limits/RecvQueueDepth", testRecvDepth},
	{"Limits/CompletionQueueFull", testCQFull},
	{"Limits/InvalidRequests", testInvalidRequests},
	{"Limits/CloseBusy", testCloseBusy},
}

// wantFull checks that err is ErrQueueFull and EAGAIN.
func (x *st) wantFull(what string, err error) {
	x.Helper()
	if !errors.Is(err, verbs.ErrQueueFull) || !errors.Is(err, syscall.EAGAIN) {
		x.Errorf("%s: %v, want ErrQueueFull (EAGAIN)", what, err)
	}
}

// testSendDepth fills the send queue behind a SEND waiting for a RECV.
func testSendDepth(x *st) {
	q, p := x.pair(QPSpec{SendDepth: 4, RNR: verbs.RNRWait}, QPSpec{})
	src := x.register(q, 8, 0)
	pm := x.peerRegister(p, 8, mreg.LocalWrite|mreg.RemoteWrite)
	write := func(id uint64) verbs.SendWR {
		return verbs.SendWR{WRID: id, Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{src.sge(0, 8)}, RKey: pm.RKey(), RemoteAddr: pm.Addr()}
	}
	x.post(q, verbs.SendWR{WRID: 1, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{src.sge(0, 8)}})
	n, err := q.qp.PostSendBatch([]verbs.SendWR{write(2), write(3)})
	if n != 2 || err != nil {
		x.Fatalf("PostSendBatch of 2 = %d, %v; want 2, nil", n, err)
	}
	n, err = q.qp.PostSendBatch([]verbs.SendWR{write(4), write(5), write(6)})
	if n != 1 {
		x.Errorf("PostSendBatch into one free slot posted %d", n)
	}
	x.wantFull("PostSendBatch beyond SendDepth", err)
	x.wantFull("PostSend beyond SendDepth", q.qp.PostSend(write(7)))
	x.peerRecv(p, 50, PeerSGE{MR: pm, Len: 8})
	want := []verbs.WC{{WRID: 1, Status: verbs.StatusSuccess, Opcode: verbs.WCSend}}
	for id := uint64(2); id <= 4; id++ {
		want = append(want, verbs.WC{WRID: id, Status: verbs.StatusSuccess, Opcode: verbs.WCWrite})
	}
	x.wantWCs("local", want, x.poll(q, 4))
	x.post(q, write(8)) // room again
	x.wantWCs("local", []verbs.WC{{WRID: 8, Status: verbs.StatusSuccess, Opcode: verbs.WCWrite}}, x.poll(q, 1))
}

// testRecvDepth fills the receive queue.
func testRecvDepth(x *st) {
	q := x.local(QPSpec{RecvDepth: 4})
	buf := x.register(q, 8, mreg.LocalWrite)
	for i := range 3 {
		x.postRecv(q, uint64(i), buf.sge(0, 8))
	}
	n, err := q.qp.PostRecvBatch([]verbs.RecvWR{{WRID: 3}, {WRID: 4}})
	if n != 1 {
		x.Errorf("PostRecvBatch into one free slot posted %d", n)
	}
	x.wantFull("PostRecvBatch beyond RecvDepth", err)
	x.wantFull("PostRecv beyond RecvDepth", q.qp.PostRecv(verbs.RecvWR{WRID: 5}))
	p := x.connect(q, QPSpec{}, nil, nil)
	pm := x.peerRegister(p, 8, 0)
	x.peerPost(p, PeerSendWR{WRID: 1, Opcode: verbs.OpSend, SGL: []PeerSGE{{MR: pm, Len: 8}}})
	x.wantWCs("local", []verbs.WC{{WRID: 0, Status: verbs.StatusSuccess, Opcode: verbs.WCRecv, ByteLen: 8}}, x.poll(q, 1))
	x.postRecv(q, 6, buf.sge(0, 8)) // room again
}

// testCQFull leaves completions unpolled until the completion queue has
// no room for another: posting fails until it is polled.
func testCQFull(x *st) {
	q, p := x.pair(QPSpec{SendDepth: 8, CQDepth: 2}, QPSpec{})
	src := x.register(q, 8, 0)
	pm := x.peerRegister(p, 8, mreg.LocalWrite|mreg.RemoteWrite)
	wr := verbs.SendWR{WRID: 1, Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{src.sge(0, 8)}, RKey: pm.RKey(), RemoteAddr: pm.Addr()}
	x.post(q, wr, wr)
	x.wantFull("PostSend with a full completion queue", q.qp.PostSend(wr))
	x.wantFull("PostRecv with a full completion queue", q.qp.PostRecv(verbs.RecvWR{WRID: 2}))
	x.poll(q, 2)
	x.post(q, wr)
	x.poll(q, 1)
}

// testInvalidRequests posts malformed work requests: each is refused with
// ErrInvalid and nothing completes.
func testInvalidRequests(x *st) {
	q, p := x.pair(QPSpec{}, QPSpec{})
	src := x.register(q, 64, mreg.LocalWrite)
	pm := x.peerRegister(p, 64, rw)
	five := []verbs.SGE{src.sge(0, 1), src.sge(1, 1), src.sge(2, 1), src.sge(3, 1), src.sge(4, 1)}
	sends := []verbs.SendWR{
		{WRID: 1, Opcode: 0},
		{WRID: 2, Opcode: verbs.OpRead + 10},
		{WRID: 3, Opcode: verbs.OpSend, SGL: five},
		{WRID: 4, Opcode: verbs.OpSend, Flags: 0x80},
	}
	for _, wr := range sends {
		if err := q.qp.PostSend(wr); !errors.Is(err, verbs.ErrInvalid) {
			x.Errorf("PostSend(wrid %d): %v, want ErrInvalid", wr.WRID, err)
		}
	}
	valid := verbs.SendWR{WRID: 5, Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{src.sge(0, 8)}, RKey: pm.RKey(), RemoteAddr: pm.Addr()}
	n, err := q.qp.PostSendBatch([]verbs.SendWR{valid, sends[0], valid})
	if n != 1 || !errors.Is(err, verbs.ErrInvalid) {
		x.Errorf("PostSendBatch with an invalid second request = %d, %v; want 1, ErrInvalid", n, err)
	}
	if err := q.qp.PostRecv(verbs.RecvWR{WRID: 6, SGL: five}); !errors.Is(err, verbs.ErrInvalid) {
		x.Errorf("PostRecv with 5 SGEs: %v, want ErrInvalid", err)
	}
	x.wantWCs("local", []verbs.WC{{WRID: 5, Status: verbs.StatusSuccess, Opcode: verbs.WCWrite}}, x.poll(q, 1))
	x.noMore(q)
	if s := q.qp.State(); s != verbs.StateReadyToSend {
		x.Errorf("state after refused posts = %v, want ReadyToSend", s)
	}
}

// testCloseBusy checks that completion queues and protection domains in
// use refuse to close.
func testCloseBusy(x *st) {
	q := x.local(QPSpec{})
	if err := q.cq.Close(); !errors.Is(err, verbs.ErrBusy) {
		x.Errorf("CQ.Close with a queue pair attached: %v, want ErrBusy", err)
	}
	if err := q.pd.Close(); !errors.Is(err, verbs.ErrBusy) {
		x.Errorf("PD.Close with a queue pair: %v, want ErrBusy", err)
	}
	m := x.register(q, 8, 0)
	if err := q.qp.Close(); err != nil {
		x.Fatal(err)
	}
	if err := q.pd.Close(); !errors.Is(err, verbs.ErrBusy) {
		x.Errorf("PD.Close with a memory region: %v, want ErrBusy", err)
	}
	if err := m.Deregister(); err != nil {
		x.Fatal(err)
	}
	if err := m.Deregister(); !errors.Is(err, mreg.ErrDeregistered) {
		x.Errorf("second Deregister: %v, want mreg.ErrDeregistered", err)
	}
	if err := q.pd.Close(); err != nil {
		x.Errorf("PD.Close: %v", err)
	}
	if err := q.cq.Close(); err != nil {
		x.Errorf("CQ.Close: %v", err)
	}
	if _, err := q.pd.RegisterMR(make([]byte, 8), 0); !errors.Is(err, verbs.ErrClosed) {
		x.Errorf("RegisterMR on a closed PD: %v, want ErrClosed", err)
	}
	if _, err := x.dev.CreateCQ(0, verbs.CQOptions{}); err == nil {
		x.Errorf("CreateCQ(0) succeeded")
	}
}
