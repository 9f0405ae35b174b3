package verbs_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exsgo/exs/eventq"
	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/faults"
	"github.com/exsgo/exs/verbs/inproc"
)

// TestCQProgress checks when a CQ runs the progress of its connections:
// Poll when it has fewer completions than asked for, Wait while it spins
// and Unpoll once before it blocks, and never after the connection ended.
func TestCQProgress(t *testing.T) {
	// The fault-injecting wrapper counts the calls of its links'
	// Progresser methods (over the in-process provider, which has none,
	// Progress reports no work).
	p := faults.New(inproc.New())
	defer p.Close()
	dev, err := verbs.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	// A Progress of the caller's own that always reports work runs first
	// and does not keep the CQ from running its links'.
	var own atomic.Int64
	cqa, _ := dev.CreateCQ(16, eventq.Options{Mode: eventq.Adaptive, SpinTime: time.Millisecond,
		Progress: func() bool { own.Add(1); return true }})
	cqb, _ := dev.CreateCQ(16, eventq.Options{})
	qa, _ := pd.CreateQP(verbs.QPConfig{SendCQ: cqa, RecvCQ: cqa})
	qb, _ := pd.CreateQP(verbs.QPConfig{SendCQ: cqb, RecvCQ: cqb})
	ln, err := dev.Listen("inproc:progress")
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
	if _, err := qa.Connect(ctx, "inproc:progress", nil); err != nil {
		t.Fatal(err)
	}
	var la, lb *faults.Conn
	for _, c := range p.Conns() {
		switch c.Endpoint().QPNum() {
		case qa.Num():
			la = c
		case qb.Num():
			lb = c
		}
	}
	if la == nil || lb == nil {
		t.Fatal("a link was not wrapped")
	}
	counts := func() [3]int64 { return [3]int64{la.Stats().Polls, la.Stats().Unpolls, lb.Stats().Polls} }
	wcs := make([]verbs.WC, 1)

	// An empty CQ: Poll runs the progress of its own connection only.
	before := counts()
	if n := cqa.Poll(wcs); n != 0 {
		t.Fatalf("Poll: %d completions", n)
	}
	if got, want := counts(), [3]int64{before[0] + 1, before[1], before[2]}; got != want {
		t.Errorf("after Poll on an empty CQ: progress, unpoll of A, progress of B = %v, want %v", got, want)
	}

	// A CQ with as many completions as asked for: no progress.
	buf := make([]byte, 2)
	mr, err := pd.RegisterMR(buf, mreg.LocalWrite|mreg.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Deregister()
	for range 2 {
		if err := qa.PostSend(verbs.SendWR{Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{mr.SGE(0, 1)}, RKey: mr.RKey(), RemoteAddr: mr.Addr() + 1}); err != nil {
			t.Fatal(err)
		}
	}
	before = counts()
	if n := cqa.Poll(wcs); n != 1 {
		t.Fatalf("Poll: %d completions, want 1", n)
	}
	if got := counts(); got != before {
		t.Errorf("after Poll that found enough: %v, want %v", got, before)
	}
	if n := cqa.Poll(wcs); n != 1 {
		t.Fatalf("Poll: %d completions, want 1", n)
	}

	// A Wait that spins, then blocks until its context ends: progress
	// while it spins, one Unpoll before it blocks.
	before = counts()
	ownBefore := own.Load()
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err = cqa.Wait(wctx, wcs, 1)
	wcancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait: %v", err)
	}
	got := counts()
	if got[0] <= before[0] || got[1] != before[1]+1 || got[2] != before[2] {
		t.Errorf("after a Wait that blocked: %v, want more progress of A than %d, unpoll %d, progress of B %d", got, before[0], before[1]+1, before[2])
	}
	if ownRuns := own.Load() - ownBefore; ownRuns == 0 || got[0]-before[0] < ownRuns {
		t.Errorf("the Wait ran the caller's Progress %d times and A's %d times, want at least as many", ownRuns, got[0]-before[0])
	}

	// Once Disconnect returned, A's link is no longer polled.
	if err := qa.Disconnect(); err != nil {
		t.Fatal(err)
	}
	before = counts()
	cqa.Poll(wcs)
	cqa.Unpoll()
	if got := counts(); got[0] != before[0] || got[1] != before[1] {
		t.Errorf("after the connection ended: %v, want %v", got, before)
	}
}
