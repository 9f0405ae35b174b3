package verbs_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/inproc"
)

// stuckLink keeps the first message handed to it in flight and blocks the
// Transmit of the second until release is closed, as a goroutine handing a
// work request to the provider does when it is descheduled.
type stuckLink struct {
	verbs.Link
	n       *int                // messages handed over (Transmit calls are serial)
	handed  chan *verbs.Message // each message, as it is handed over
	release chan struct{}
}

func (l stuckLink) Transmit(m *verbs.Message) (bool, error) {
	*l.n++
	l.handed <- m
	if *l.n == 1 {
		return false, nil
	}
	<-l.release
	return true, verbs.ErrClosed
}

// dialOnly wraps the links of the queue pairs that connect, not of those
// that accept.
type dialOnly struct{ *wrapProvider }

func (p dialOnly) Listen(addr string) (verbs.LinkListener, error) { return p.inner.Listen(addr) }

// TestCompleteBeforeDisconnectFlushes: a SEND the provider completes and
// then a disconnect the provider reports, while another goroutine is
// handing the next work request to the provider (the one that runs the
// send queue): the SEND's success comes out of the CQ before the flushed
// RECV of the disconnect. Before, the success waited for that goroutine,
// and the flush overtook it: an application that takes the first flush
// for the end of the connection (exs) failed a send its target had.
func TestCompleteBeforeDisconnectFlushes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	handed := make(chan *verbs.Message, 2)
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock()
	var n int
	var ep *verbs.Endpoint
	p := dialOnly{&wrapProvider{inner: inproc.New(), wrap: func(l verbs.Link, e *verbs.Endpoint) verbs.Link {
		ep = e
		return stuckLink{l, &n, handed, release}
	}}}
	dev, err := verbs.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(16, verbs.CQOptions{})
	newQP := func() *verbs.QP {
		qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq})
		if err != nil {
			t.Fatal(err)
		}
		return qp
	}
	client, server := newQP(), newQP()
	defer client.Close()
	defer server.Close()
	ln, err := dev.Listen("inproc:order")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if req, err := ln.Accept(ctx); err == nil {
			req.Accept(server, nil)
		}
	}()
	if _, err := client.Connect(ctx, "inproc:order", nil); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	mr, _ := pd.RegisterMR(buf, mreg.LocalWrite)
	if err := client.PostRecv(verbs.RecvWR{WRID: 9, SGL: []verbs.SGE{mr.SGE(0, 8)}}); err != nil {
		t.Fatal(err)
	}
	if err := client.PostSend(verbs.SendWR{WRID: 1, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{mr.SGE(0, 8)}}); err != nil {
		t.Fatal(err)
	}
	m := <-handed
	posted := make(chan error, 1)
	go func() {
		posted <- client.PostSend(verbs.SendWR{WRID: 2, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{mr.SGE(0, 8)}})
	}()
	<-handed // the poster is in the second Transmit, running the send queue
	ep.Complete(m, nil)
	ep.Terminated(verbs.ErrDisconnected)
	wcs := make([]verbs.WC, 1)
	if _, err := cq.Wait(ctx, wcs, 1); err != nil || wcs[0].WRID != 1 || wcs[0].Status != verbs.StatusSuccess {
		t.Errorf("first completion %+v (%v): want WR 1's success, ahead of the disconnect's flushes", wcs[0], err)
	}
	unblock()
	<-posted
}

// slotLink completes the first message at once, keeps the second in
// flight, and blocks the Transmit of the third until release is closed.
type slotLink struct {
	verbs.Link
	n       *int
	handed  chan *verbs.Message
	release chan struct{}
}

func (l slotLink) Transmit(m *verbs.Message) (bool, error) {
	*l.n++
	switch *l.n {
	case 1:
		return true, nil
	case 2:
		l.handed <- m
		return false, nil
	case 3:
		l.handed <- m
		<-l.release
	}
	return true, verbs.ErrClosed
}

// TestCompleteFreesEarlierSlots: of three work requests posted at once, an
// unsignaled one that succeeded at once and a signaled one the provider
// completes later (Complete) while the goroutine running the send queue is
// in the third one's Transmit: once the
// signaled one's completion is polled, the CQ slots of both are free (the
// slots come back in order), so that two more work requests fit a CQ of 3.
// Before, the runner held the unsignaled one's slot until it ran again.
func TestCompleteFreesEarlierSlots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	handed := make(chan *verbs.Message, 2)
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock()
	var n int
	var ep *verbs.Endpoint
	p := dialOnly{&wrapProvider{inner: inproc.New(), wrap: func(l verbs.Link, e *verbs.Endpoint) verbs.Link {
		ep = e
		return slotLink{l, &n, handed, release}
	}}}
	dev, err := verbs.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(3, verbs.CQOptions{})
	scq, _ := dev.CreateCQ(4, verbs.CQOptions{})
	client, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: scq})
	if err != nil {
		t.Fatal(err)
	}
	server, err := pd.CreateQP(verbs.QPConfig{SendCQ: scq, RecvCQ: scq})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	defer server.Close()
	ln, err := dev.Listen("inproc:slots")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if req, err := ln.Accept(ctx); err == nil {
			req.Accept(server, nil)
		}
	}()
	if _, err := client.Connect(ctx, "inproc:slots", nil); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	mr, _ := pd.RegisterMR(buf, mreg.LocalWrite)
	send := func(id uint64, flags verbs.SendFlags) error {
		return client.PostSend(verbs.SendWR{WRID: id, Opcode: verbs.OpSend, Flags: flags, SGL: []verbs.SGE{mr.SGE(0, 8)}})
	}
	posted := make(chan error, 1)
	go func() {
		wr := func(id uint64, flags verbs.SendFlags) verbs.SendWR {
			return verbs.SendWR{WRID: id, Opcode: verbs.OpSend, Flags: flags, SGL: []verbs.SGE{mr.SGE(0, 8)}}
		}
		_, err := client.PostSendBatch([]verbs.SendWR{wr(1, 0), wr(2, verbs.Signaled), wr(3, verbs.Signaled)})
		posted <- err
	}()
	m := <-handed
	<-handed // the poster is in the third Transmit, running the send queue
	ep.Complete(m, nil)
	wcs := make([]verbs.WC, 1)
	if _, err := cq.Wait(ctx, wcs, 1); err != nil || wcs[0].WRID != 2 || wcs[0].Status != verbs.StatusSuccess {
		t.Fatalf("completion %+v (%v): want WR 2's success", wcs[0], err)
	}
	for id := uint64(4); id <= 5; id++ {
		if err := send(id, verbs.Signaled); err != nil {
			t.Errorf("post %d with the slots of WRs 1 and 2 free: %v", id, err)
		}
	}
	unblock()
	<-posted
}
