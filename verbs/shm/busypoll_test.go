package shm_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/shm"
	"github.com/exsgo/exs/verbs/verbstest"
)

// TestBusyPollReceiver checks that the receiver of a queue pair created
// with QPConfig.BusyPoll never sleeps, while the other end's receiver,
// with a spin time of zero, sleeps as soon as its rings are empty; that
// messages go both ways, the sleeping end woken as usual; and that the
// spinning receiver stops when the connection is closed.
func TestBusyPollReceiver(t *testing.T) {
	leaks := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) })
	ctx, cancel := context.WithTimeout(context.Background(), verbstest.Timeout)
	defer cancel()
	pa, pb := newProvider(shm.WithSpin(0)), newProvider(shm.WithSpin(0))
	qa, qb := connectPairQP(t, ctx, pa, pb, "shm:"+sockDir(t)+"/s", verbs.CQOptions{Wait: verbs.WaitBusyPoll},
		verbs.QPConfig{BusyPoll: true}, verbs.QPConfig{})
	const msg = 64
	buf := func(q *verbs.QP) *verbs.MR {
		mr, err := q.PD().RegisterMR(make([]byte, 2*msg), mreg.LocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		return mr
	}
	ma, mb := buf(qa), buf(qb)
	// send posts a SEND from one end to the other and waits for both
	// completions.
	send := func(from, to *verbs.QP, fm, tm *verbs.MR) {
		t.Helper()
		if err := to.PostRecv(verbs.RecvWR{WRID: 1, SGL: []verbs.SGE{tm.SGE(msg, msg)}}); err != nil {
			t.Fatal(err)
		}
		if err := from.PostSend(verbs.SendWR{WRID: 2, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{fm.SGE(0, msg)}}); err != nil {
			t.Fatal(err)
		}
		wcs := make([]verbs.WC, 1)
		for _, q := range []*verbs.QP{from, to} {
			if _, err := q.Config().SendCQ.Wait(ctx, wcs, 1); err != nil {
				t.Fatal(err)
			}
			if wcs[0].Status != verbs.StatusSuccess {
				t.Fatalf("completion %+v", wcs[0])
			}
		}
	}
	sleeps := func(p *shm.Provider) uint64 {
		st := p.Stats()
		if len(st) != 1 {
			t.Fatalf("Stats = %+v, want one connection", st)
		}
		return st[0].Sleeps
	}
	for round := range 3 {
		before := sleeps(pb)
		send(qa, qb, ma, mb)
		send(qb, qa, mb, ma)
		// Wait until the end that may sleep has slept after the round's
		// messages woke it: the busy-polled end has had as long, and its
		// rings were as empty.
		for sleeps(pb) == before {
			if ctx.Err() != nil {
				t.Fatalf("round %d: the receiver without BusyPoll never slept", round)
			}
			time.Sleep(time.Millisecond)
		}
		if n := sleeps(pa); n != 0 {
			t.Fatalf("round %d: the receiver of the BusyPoll queue pair slept %d times, want 0", round, n)
		}
	}
}
