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
