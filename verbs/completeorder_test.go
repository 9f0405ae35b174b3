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

// step is what gateLink does with a message handed to it.
type step int

const (
	stepDone  step = iota // completes at once
	stepHold              // stays in flight: the test completes it
	stepBlock             // Transmit blocks until release is closed, as a goroutine descheduled while it hands a message over
)

// gateLink acts on the n-th message handed to it (from 1) as script[n-1]
// says, and passes each held or blocked message on handed as it comes.
type gateLink struct {
	verbs.Link
	n       *int // messages handed over (Transmit calls are serial)
	script  []step
	handed  chan *verbs.Message
	release chan struct{}
}

func (l gateLink) Transmit(m *verbs.Message) (bool, error) {
	*l.n++
	switch l.script[min(*l.n, len(l.script))-1] {
	case stepDone:
		return true, nil
	case stepHold:
		l.handed <- m
		return false, nil
	}
	l.handed <- m
	<-l.release
	return true, verbs.ErrClosed
}

// dialOnly wraps the links of the queue pairs that connect, not of those
// that accept.
type dialOnly struct{ *wrapProvider }

func (p dialOnly) Listen(addr string) (verbs.LinkListener, error) { return p.inner.Listen(addr) }

// gated is a queue pair whose link is a gateLink, connected over the
// in-process provider, with its one CQ (also the accepting side's) and a
// registered buffer of 8 bytes.
type gated struct {
	qp      *verbs.QP
	cq      *verbs.CQ
	mr      *verbs.MR
	ep      *verbs.Endpoint
	handed  chan *verbs.Message
	unblock func() // closes release, once
}

func newGated(t *testing.T, ctx context.Context, cqDepth int, script ...step) *gated {
	t.Helper()
	g := &gated{handed: make(chan *verbs.Message, len(script))}
	release := make(chan struct{})
	var once sync.Once
	g.unblock = func() { once.Do(func() { close(release) }) }
	var n int
	p := dialOnly{&wrapProvider{inner: inproc.New(), wrap: func(l verbs.Link, e *verbs.Endpoint) verbs.Link {
		g.ep = e
		return gateLink{l, &n, script, g.handed, release}
	}}}
	dev, err := verbs.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	pd, _ := dev.AllocPD()
	g.cq, _ = dev.CreateCQ(cqDepth, verbs.CQOptions{})
	newQP := func() *verbs.QP {
		qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: g.cq, RecvCQ: g.cq})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { qp.Close() })
		return qp
	}
	g.qp = newQP()
	server := newQP()
	ln, err := dev.Listen("inproc:gated")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if req, err := ln.Accept(ctx); err == nil {
			req.Accept(server, nil)
		}
	}()
	if _, err := g.qp.Connect(ctx, "inproc:gated", nil); err != nil {
		t.Fatal(err)
	}
	g.mr, _ = pd.RegisterMR(make([]byte, 8), mreg.LocalWrite)
	t.Cleanup(g.unblock) // first: the queue pairs' Close waits for a blocked Transmit
	return g
}

// wr returns a SEND of the buffer.
func (g *gated) wr(id uint64, flags verbs.SendFlags) verbs.SendWR {
	return verbs.SendWR{WRID: id, Opcode: verbs.OpSend, Flags: flags, SGL: []verbs.SGE{g.mr.SGE(0, 8)}}
}

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
	g := newGated(t, ctx, 16, stepHold, stepBlock)
	if err := g.qp.PostRecv(verbs.RecvWR{WRID: 9, SGL: []verbs.SGE{g.mr.SGE(0, 8)}}); err != nil {
		t.Fatal(err)
	}
	if err := g.qp.PostSend(g.wr(1, verbs.Signaled)); err != nil {
		t.Fatal(err)
	}
	m := <-g.handed
	posted := make(chan error, 1)
	go func() { posted <- g.qp.PostSend(g.wr(2, verbs.Signaled)) }()
	<-g.handed // the poster is in the second Transmit, running the send queue
	g.ep.Complete(m, nil)
	g.ep.Terminated(verbs.ErrDisconnected)
	wcs := make([]verbs.WC, 1)
	if _, err := g.cq.Wait(ctx, wcs, 1); err != nil || wcs[0].WRID != 1 || wcs[0].Status != verbs.StatusSuccess {
		t.Errorf("first completion %+v (%v): want WR 1's success, ahead of the disconnect's flushes", wcs[0], err)
	}
	g.unblock()
	<-posted
}

// TestCompleteFreesEarlierSlots: of three work requests posted at once, an
// unsignaled one that succeeded at once and a signaled one the provider
// completes later (Complete) while the goroutine running the send queue is
// in the third one's Transmit: once the signaled one's completion is
// polled, the CQ slots of both are free (the slots come back in order), so
// that two more work requests fit a CQ of 3. Before, the runner held the
// unsignaled one's slot until it ran again.
func TestCompleteFreesEarlierSlots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g := newGated(t, ctx, 3, stepDone, stepHold, stepBlock)
	posted := make(chan error, 1)
	go func() {
		_, err := g.qp.PostSendBatch([]verbs.SendWR{g.wr(1, 0), g.wr(2, verbs.Signaled), g.wr(3, verbs.Signaled)})
		posted <- err
	}()
	m := <-g.handed
	<-g.handed // the poster is in the third Transmit, running the send queue
	g.ep.Complete(m, nil)
	wcs := make([]verbs.WC, 1)
	if _, err := g.cq.Wait(ctx, wcs, 1); err != nil || wcs[0].WRID != 2 || wcs[0].Status != verbs.StatusSuccess {
		t.Fatalf("completion %+v (%v): want WR 2's success", wcs[0], err)
	}
	for id := uint64(4); id <= 5; id++ {
		if err := g.qp.PostSend(g.wr(id, verbs.Signaled)); err != nil {
			t.Errorf("post %d with the slots of WRs 1 and 2 free: %v", id, err)
		}
	}
	g.unblock()
	<-posted
}
