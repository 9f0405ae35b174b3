package verbstest

import (
	"bytes"
	"context"
	"errors"
	"syscall"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

var cmTests = []test{
	{"Connect/PrivateDataRoundTrip", testPrivateDataRoundTrip},
	{"Connect/PrivateDataTooLong", testPrivateDataTooLong},
	{"Connect/Reject", testReject},
	{"Connect/Refused", testRefused},
	{"Connect/PeerDials", testPeerDials},
	{"Connect/ListenerClose", testListenerClose},
	{"Connect/AddrInUse", testAddrInUse},
	{"State/Lifecycle", testLifecycle},
	{"State/Modify", testModify},
}

// testPrivateDataRoundTrip connects with MaxPrivateData bytes each way.
func testPrivateDataRoundTrip(x *st) {
	q := x.local(QPSpec{})
	req := pattern(1, verbs.MaxPrivateData)
	rep := pattern(2, verbs.MaxPrivateData)
	p := x.connect(q, QPSpec{}, req, rep)
	if s := p.State(); s != verbs.StateReadyToSend {
		x.Errorf("peer state = %v, want ReadyToSend", s)
	}
}

// testPrivateDataTooLong refuses private data over the limit on both
// Connect and Accept.
func testPrivateDataTooLong(x *st) {
	q := x.local(QPSpec{})
	addr, err := x.env.Peer.Listen(x.ctx)
	if err != nil {
		x.Fatal(err)
	}
	_, err = q.qp.Connect(x.ctx, addr, make([]byte, verbs.MaxPrivateData+1))
	if !errors.Is(err, verbs.ErrInvalid) {
		x.Errorf("Connect with %d bytes of private data: %v, want ErrInvalid", verbs.MaxPrivateData+1, err)
	}
	if s := q.qp.State(); s != verbs.StateInit {
		x.Errorf("state after refused Connect = %v, want Init", s)
	}
	// Accept side: the peer dials us.
	ln, err := x.dev.Listen(x.env.ListenAddr)
	if err != nil {
		x.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		p, _, err := x.env.Peer.Connect(x.ctx, ln.Addr(), QPSpec{}, nil)
		if p != nil {
			p.Close()
		}
		done <- err
	}()
	cr, err := ln.Accept(x.ctx)
	if err != nil {
		x.Fatal(err)
	}
	if err := cr.Accept(q.qp, make([]byte, verbs.MaxPrivateData+1)); !errors.Is(err, verbs.ErrInvalid) {
		x.Errorf("Accept with too much private data: %v, want ErrInvalid", err)
	}
	if err := cr.Reject(nil); err != nil {
		x.Errorf("Reject: %v", err)
	}
	if err := <-done; !errors.Is(err, verbs.ErrRejected) {
		x.Errorf("peer Connect after reject: %v, want ErrRejected", err)
	}
}

// testReject checks that a rejection carries private data and leaves the
// queue pair in Init, ready to connect again.
func testReject(x *st) {
	q := x.local(QPSpec{})
	addr, err := x.env.Peer.Listen(x.ctx)
	if err != nil {
		x.Fatal(err)
	}
	rej := pattern(3, verbs.MaxPrivateData)
	if err := x.env.Peer.Serve(Answer{Reject: true, PrivateData: rej}); err != nil {
		x.Fatal(err)
	}
	req := []byte("please")
	_, err = q.qp.Connect(x.ctx, addr, req)
	var re *verbs.RejectError
	switch {
	case !errors.As(err, &re):
		x.Fatalf("Connect: %v, want a *verbs.RejectError", err)
	case !errors.Is(err, verbs.ErrRejected) || !errors.Is(err, syscall.ECONNREFUSED):
		x.Errorf("Connect: %v does not satisfy ErrRejected and ECONNREFUSED", err)
	case !bytes.Equal(re.PrivateData, rej):
		x.Errorf("reject private data: %s", diffBytes(rej, re.PrivateData))
	}
	_, got, err := x.env.Peer.Served(x.ctx)
	if err != nil {
		x.Fatalf("Peer.Served: %v", err)
	}
	if !bytes.Equal(got, req) {
		x.Errorf("request private data at the rejecter: %q, want %q", got, req)
	}
	if s := q.qp.State(); s != verbs.StateInit {
		x.Errorf("state after reject = %v, want Init", s)
	}
	// The queue pair connects afterwards.
	x.connect(q, QPSpec{}, []byte("again"), []byte("ok"))
}

// testRefused dials an address where no one listens any more.
func testRefused(x *st) {
	ln, err := x.dev.Listen(x.env.ListenAddr)
	if err != nil {
		x.Fatal(err)
	}
	addr := ln.Addr()
	if err := ln.Close(); err != nil {
		x.Fatal(err)
	}
	if err := ln.Close(); !errors.Is(err, verbs.ErrClosed) {
		x.Errorf("second Listener.Close: %v, want ErrClosed", err)
	}
	q := x.local(QPSpec{})
	if _, err := q.qp.Connect(x.ctx, addr, nil); !errors.Is(err, syscall.ECONNREFUSED) {
		x.Errorf("Connect to a closed listener: %v, want ECONNREFUSED", err)
	}
	if s := q.qp.State(); s != verbs.StateInit {
		x.Errorf("state after refused Connect = %v, want Init", s)
	}
}

// testPeerDials has the peer connect to a local listener, then moves data
// both ways.
func testPeerDials(x *st) {
	ln, err := x.dev.Listen(x.env.ListenAddr)
	if err != nil {
		x.Fatal(err)
	}
	defer ln.Close()
	q := x.local(QPSpec{})
	buf := x.register(q, 64, mreg.LocalWrite)
	x.postRecv(q, 1, buf.sge(0, 64))

	req := pattern(4, verbs.MaxPrivateData)
	rep := pattern(5, 100)
	type result struct {
		p   PeerQP
		rep []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		p, got, err := x.env.Peer.Connect(x.ctx, ln.Addr(), QPSpec{}, req)
		done <- result{p, got, err}
	}()
	cr, err := ln.Accept(x.ctx)
	if err != nil {
		x.Fatal(err)
	}
	if got := cr.PrivateData(); !bytes.Equal(got, req) {
		x.Errorf("request private data: %s", diffBytes(req, got))
	}
	if err := cr.Accept(q.qp, rep); err != nil {
		x.Fatal(err)
	}
	if err := cr.Accept(q.qp, rep); err == nil {
		x.Errorf("second ConnRequest.Accept succeeded")
	}
	r := <-done
	if r.err != nil {
		x.Fatalf("peer Connect: %v", r.err)
	}
	if !bytes.Equal(r.rep, rep) {
		x.Errorf("accept private data at the peer: %s", diffBytes(rep, r.rep))
	}
	p := r.p
	// Peer to local.
	pm := x.peerRegister(p, 64, mreg.LocalWrite)
	data := pattern(6, 40)
	if err := pm.Write(0, data); err != nil {
		x.Fatal(err)
	}
	x.peerPost(p, PeerSendWR{WRID: 9, Opcode: verbs.OpSend, Signaled: true, SGL: []PeerSGE{{MR: pm, Len: 40}}})
	x.wantWCs("peer", []verbs.WC{{WRID: 9, Status: verbs.StatusSuccess, Opcode: verbs.WCSend}}, x.peerPoll(p, 1))
	x.wantWCs("local", []verbs.WC{{WRID: 1, Status: verbs.StatusSuccess, Opcode: verbs.WCRecv, ByteLen: 40}}, x.poll(q, 1))
	b, _ := buf.Read()
	x.expectRegion("local receive buffer", b, append(data, fill(24)...))
	// Local to peer.
	x.peerRecv(p, 2, PeerSGE{MR: pm, Off: 0, Len: 64})
	x.post(q, verbs.SendWR{WRID: 3, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{buf.sge(0, 8)}})
	x.wantWCs("local", []verbs.WC{{WRID: 3, Status: verbs.StatusSuccess, Opcode: verbs.WCSend}}, x.poll(q, 1))
	x.wantWCs("peer", []verbs.WC{{WRID: 2, Status: verbs.StatusSuccess, Opcode: verbs.WCRecv, ByteLen: 8}}, x.peerPoll(p, 1))
}

// testListenerClose wakes a blocked Accept with ErrClosed.
func testListenerClose(x *st) {
	ln, err := x.dev.Listen(x.env.ListenAddr)
	if err != nil {
		x.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := ln.Accept(x.ctx)
		done <- err
	}()
	if err := ln.Close(); err != nil {
		x.Fatal(err)
	}
	if err := <-done; !errors.Is(err, verbs.ErrClosed) {
		x.Errorf("Accept on a closed listener: %v, want ErrClosed", err)
	}
	ctx, cancel := context.WithCancel(x.ctx)
	cancel()
	if _, err := ln.Accept(ctx); !errors.Is(err, verbs.ErrClosed) && !errors.Is(err, context.Canceled) {
		x.Errorf("Accept after Close: %v", err)
	}
}

// testAddrInUse listens twice at one address.
func testAddrInUse(x *st) {
	ln, err := x.dev.Listen(x.env.ListenAddr)
	if err != nil {
		x.Fatal(err)
	}
	defer ln.Close()
	if ln2, err := x.dev.Listen(ln.Addr()); !errors.Is(err, syscall.EADDRINUSE) {
		if ln2 != nil {
			ln2.Close()
		}
		x.Errorf("second Listen(%s): %v, want EADDRINUSE", ln.Addr(), err)
	}
}

// testLifecycle walks a queue pair through its states and checks what
// each allows.
func testLifecycle(x *st) {
	q := x.local(QPSpec{})
	buf := x.register(q, 64, mreg.LocalWrite)
	if s := q.qp.State(); s != verbs.StateInit {
		x.Fatalf("new queue pair in %v, want Init", s)
	}
	err := q.qp.PostSend(verbs.SendWR{WRID: 1, Opcode: verbs.OpSend, SGL: []verbs.SGE{buf.sge(0, 8)}})
	if !errors.Is(err, verbs.ErrQPState) {
		x.Errorf("PostSend in Init: %v, want ErrQPState", err)
	}
	x.postRecv(q, 2, buf.sge(0, 64)) // allowed in Init
	if err := q.qp.Disconnect(); !errors.Is(err, verbs.ErrQPState) {
		x.Errorf("Disconnect in Init: %v, want ErrQPState", err)
	}
	p := x.connect(q, QPSpec{}, nil, nil)
	select {
	case <-q.qp.Done():
		x.Fatalf("Done closed while connected")
	default:
	}
	if err := q.qp.Disconnect(); err != nil {
		x.Fatalf("Disconnect: %v", err)
	}
	x.waitError(q)
	x.peerWaitError(p)
	if err := q.qp.Err(); !errors.Is(err, verbs.ErrDisconnected) || !errors.Is(err, syscall.ECONNRESET) {
		x.Errorf("Err after Disconnect = %v, want ErrDisconnected", err)
	}
	x.wantWCs("local", []verbs.WC{{WRID: 2, Status: verbs.StatusFlushed, Opcode: verbs.WCRecv}}, x.poll(q, 1))
	if _, err := q.qp.Connect(x.ctx, "unused", nil); !errors.Is(err, verbs.ErrQPState) {
		x.Errorf("Connect in Error: %v, want ErrQPState", err)
	}
	if err := q.qp.Close(); err != nil {
		x.Errorf("Close: %v", err)
	}
	if err := q.qp.Close(); !errors.Is(err, verbs.ErrClosed) {
		x.Errorf("second Close: %v, want ErrClosed", err)
	}
	if err := q.qp.PostRecv(verbs.RecvWR{WRID: 3}); !errors.Is(err, verbs.ErrClosed) {
		x.Errorf("PostRecv after Close: %v, want ErrClosed", err)
	}
	if err := q.qp.PostSend(verbs.SendWR{WRID: 4, Opcode: verbs.OpSend}); !errors.Is(err, verbs.ErrClosed) {
		x.Errorf("PostSend after Close: %v, want ErrClosed", err)
	}
	if err := q.qp.Modify(verbs.StateReset); !errors.Is(err, verbs.ErrClosed) {
		x.Errorf("Modify after Close: %v, want ErrClosed", err)
	}
	x.noMore(q)
}

// testModify checks the transition table of Modify, then reconnects a
// queue pair that went through Error and Reset.
func testModify(x *st) {
	q := x.local(QPSpec{})
	buf := x.register(q, 64, mreg.LocalWrite)
	rows := []struct {
		to      verbs.State
		wantErr error
		want    verbs.State
	}{
		{verbs.StateReadyToReceive, verbs.ErrQPState, verbs.StateInit},
		{verbs.StateReadyToSend, verbs.ErrQPState, verbs.StateInit},
		{verbs.StateInit, nil, verbs.StateInit},
		{verbs.StateReset, nil, verbs.StateReset},
		{verbs.StateReadyToSend, verbs.ErrQPState, verbs.StateReset},
		{verbs.StateInit, nil, verbs.StateInit},
		{verbs.StateError, nil, verbs.StateError},
		{verbs.StateInit, verbs.ErrQPState, verbs.StateError},
		{verbs.StateReset, nil, verbs.StateReset},
		{verbs.State(99), verbs.ErrQPState, verbs.StateReset},
		{verbs.StateInit, nil, verbs.StateInit},
	}
	for i, r := range rows {
		from := q.qp.State()
		err := q.qp.Modify(r.to)
		if r.wantErr == nil && err != nil || r.wantErr != nil && !errors.Is(err, r.wantErr) {
			x.Errorf("row %d: Modify(%v) from %v: %v, want %v", i, r.to, from, err, r.wantErr)
		}
		if s := q.qp.State(); s != r.want {
			x.Errorf("row %d: Modify(%v) from %v: state %v, want %v", i, r.to, from, s, r.want)
		}
	}
	// RECVs posted in Init are flushed by the move to Reset; a RECV in
	// Reset is refused.
	x.postRecv(q, 1, buf.sge(0, 8))
	if err := q.qp.Modify(verbs.StateReset); err != nil {
		x.Fatal(err)
	}
	x.wantWCs("local", []verbs.WC{{WRID: 1, Status: verbs.StatusFlushed, Opcode: verbs.WCRecv}}, x.poll(q, 1))
	if err := q.qp.PostRecv(verbs.RecvWR{WRID: 2}); !errors.Is(err, verbs.ErrQPState) {
		x.Errorf("PostRecv in Reset: %v, want ErrQPState", err)
	}
	if err := q.qp.Modify(verbs.StateInit); err != nil {
		x.Fatal(err)
	}
	// Connect, fail, reset, connect again.
	p := x.connect(q, QPSpec{}, nil, nil)
	if err := q.qp.Modify(verbs.StateReset); !errors.Is(err, verbs.ErrQPState) {
		x.Errorf("Modify(Reset) while connected: %v, want ErrQPState", err)
	}
	if err := q.qp.Modify(verbs.StateError); err != nil {
		x.Fatal(err)
	}
	x.peerWaitError(p)
	if !errors.Is(q.qp.Err(), verbs.ErrTerminated) {
		x.Errorf("Err after Modify(Error) = %v, want ErrTerminated", q.qp.Err())
	}
	if err := q.qp.Modify(verbs.StateReset); err != nil {
		x.Fatal(err)
	}
	if q.qp.Err() != nil {
		x.Errorf("Err after Reset = %v, want nil", q.qp.Err())
	}
	if err := q.qp.Modify(verbs.StateInit); err != nil {
		x.Fatal(err)
	}
	p2 := x.connect(q, QPSpec{}, nil, nil)
	pm := x.peerRegister(p2, 16, mreg.LocalWrite)
	x.peerRecv(p2, 5, PeerSGE{MR: pm, Len: 16})
	x.post(q, verbs.SendWR{WRID: 6, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{buf.sge(0, 16)}})
	x.wantWCs("local", []verbs.WC{{WRID: 6, Status: verbs.StatusSuccess, Opcode: verbs.WCSend}}, x.poll(q, 1))
	x.wantWCs("peer", []verbs.WC{{WRID: 5, Status: verbs.StatusSuccess, Opcode: verbs.WCRecv, ByteLen: 16}}, x.peerPoll(p2, 1))
}
