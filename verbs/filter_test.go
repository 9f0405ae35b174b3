package verbs_test

import (
	"context"
	"errors"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/inproc"
)

// filterProvider is the in-process provider with the fault-injection
// abilities: it refuses registrations and posts while told to.
type filterProvider struct {
	*inproc.Provider
	refuseReg  atomic.Bool
	refusePost atomic.Bool
	regs       atomic.Int64
	posts      [2]atomic.Int64 // send, recv: work requests asked about
	lastEP     atomic.Pointer[verbs.Endpoint]
}

var (
	_ verbs.RegistrationFilter = (*filterProvider)(nil)
	_ verbs.PostFilter         = (*filterProvider)(nil)
)

var errRefused = errors.New("refused by the filter")

func (p *filterProvider) FilterRegistration(pd *verbs.PD, buf []byte, access mreg.Access) error {
	p.regs.Add(1)
	if p.refuseReg.Load() {
		return errRefused
	}
	return nil
}

func (p *filterProvider) FilterPost(ep *verbs.Endpoint, recv bool, n int) error {
	i := 0
	if recv {
		i = 1
	}
	p.posts[i].Add(int64(n))
	p.lastEP.Store(ep)
	if p.refusePost.Load() {
		return verbs.ErrQueueFull
	}
	return nil
}

// TestFilters checks that a device asks its provider's RegistrationFilter
// before each registration and its PostFilter before each post on a queue
// pair with a connection, and fails the call with the filter's error,
// registering or posting nothing.
func TestFilters(t *testing.T) {
	p := &filterProvider{Provider: inproc.New()}
	dev, err := verbs.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	buf := make([]byte, 64)

	p.refuseReg.Store(true)
	if _, err := pd.RegisterMR(buf, mreg.LocalWrite); !errors.Is(err, errRefused) {
		t.Fatalf("registration refused by the filter: %v", err)
	}
	if n := pd.Table().Len(); n != 0 {
		t.Errorf("%d regions after a refused registration", n)
	}
	p.refuseReg.Store(false)
	mr, err := pd.RegisterMR(buf, mreg.LocalWrite|mreg.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Deregister()
	if got := p.regs.Load(); got != 2 {
		t.Errorf("the filter saw %d registrations, want 2", got)
	}

	cqa, _ := dev.CreateCQ(16, verbs.CQOptions{})
	cqb, _ := dev.CreateCQ(16, verbs.CQOptions{})
	qa, _ := pd.CreateQP(verbs.QPConfig{SendCQ: cqa, RecvCQ: cqa})
	qb, _ := pd.CreateQP(verbs.QPConfig{SendCQ: cqb, RecvCQ: cqb})
	// Before a connection, posts are not filtered.
	if err := qb.PostRecv(verbs.RecvWR{WRID: 1, SGL: []verbs.SGE{mr.SGE(0, 8)}}); err != nil {
		t.Fatal(err)
	}
	if got := p.posts[1].Load(); got != 0 {
		t.Errorf("a post before the connection was filtered (%d)", got)
	}
	ln, err := dev.Listen("inproc:filters")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		if r, err := ln.Accept(ctx); err == nil {
			r.Accept(qb, nil)
		}
	}()
	if _, err := qa.Connect(ctx, "inproc:filters", nil); err != nil {
		t.Fatal(err)
	}

	p.refusePost.Store(true)
	send := verbs.SendWR{WRID: 2, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{mr.SGE(8, 4)}}
	err = qa.PostSend(send)
	if !errors.Is(err, verbs.ErrQueueFull) || !errors.Is(err, syscall.EAGAIN) {
		t.Errorf("PostSend refused by the filter: %v", err)
	}
	if n, err := qa.PostSendBatch([]verbs.SendWR{send, send}); n != 0 || !errors.Is(err, verbs.ErrQueueFull) {
		t.Errorf("PostSendBatch refused by the filter: %d, %v", n, err)
	}
	if err := qb.PostRecv(verbs.RecvWR{WRID: 3, SGL: []verbs.SGE{mr.SGE(16, 8)}}); !errors.Is(err, verbs.ErrQueueFull) {
		t.Errorf("PostRecv refused by the filter: %v", err)
	}
	if n, err := qb.PostRecvBatch([]verbs.RecvWR{{WRID: 4}}); n != 0 || !errors.Is(err, verbs.ErrQueueFull) {
		t.Errorf("PostRecvBatch refused by the filter: %d, %v", n, err)
	}
	if got := [2]int64{p.posts[0].Load(), p.posts[1].Load()}; got != [2]int64{3, 2} {
		t.Errorf("the filter saw %v work requests (send, recv), want [3 2]", got)
	}
	if ep := p.lastEP.Load(); ep == nil || ep.QPNum() != qb.Num() {
		t.Errorf("the last post was not asked about with qb's endpoint")
	}
	wcs := make([]verbs.WC, 4)
	if n := cqa.Poll(wcs); n != 0 {
		t.Errorf("%d completions of refused posts", n)
	}

	// Allowed again: the SEND meets the RECV posted before the connection.
	p.refusePost.Store(false)
	if err := qa.PostSend(send); err != nil {
		t.Fatal(err)
	}
	if n, err := cqb.Wait(ctx, wcs, 1); n != 1 || err != nil || wcs[0].WRID != 1 || wcs[0].Status != verbs.StatusSuccess {
		t.Fatalf("the RECV: %d %v %+v", n, err, wcs[0])
	}
}
