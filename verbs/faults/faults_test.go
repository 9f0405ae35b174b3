package faults_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/faults"
	"github.com/exsgo/exs/verbs/inproc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const timeout = 10 * time.Second

// pair is two connected queue pairs over a faults provider: a dialed, b
// accepted, each with a CQ and a region of 4 KiB registered for everything.
type pair struct {
	p        *faults.Provider
	a, b     *verbs.QP
	cqa, cqb *verbs.CQ
	ma, mb   *verbs.MR
	ctx      context.Context
}

func newPair(t *testing.T, f faults.Filters, cfg verbs.QPConfig) *pair {
	return newPairOver(t, f, cfg, false)
}

// newPairOver is newPair; with raw, b's device is opened over the inner
// provider itself, so that only a's end goes through the wrapper.
func newPairOver(t *testing.T, f faults.Filters, cfg verbs.QPConfig, raw bool) *pair {
	t.Helper()
	ip := inproc.New()
	p := faults.New(ip)
	p.Set(f)
	dev, err := verbs.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	devb := dev
	if raw {
		devb, _ = verbs.Open(ip)
		t.Cleanup(func() { devb.Close() })
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(func() {
		cancel()
		dev.Close()
		if err := p.Close(); err != nil && !errors.Is(err, verbs.ErrClosed) {
			t.Error(err)
		}
	})
	pd, _ := dev.AllocPD()
	pdb := pd
	if raw {
		pdb, _ = devb.AllocPD()
	}
	x := &pair{p: p, ctx: ctx}
	x.cqa, _ = dev.CreateCQ(64, verbs.CQOptions{})
	x.cqb, _ = devb.CreateCQ(64, verbs.CQOptions{})
	ca, cb := cfg, cfg
	ca.SendCQ, ca.RecvCQ = x.cqa, x.cqa
	cb.SendCQ, cb.RecvCQ = x.cqb, x.cqb
	if x.a, err = pd.CreateQP(ca); err != nil {
		t.Fatal(err)
	}
	if x.b, err = pdb.CreateQP(cb); err != nil {
		t.Fatal(err)
	}
	access := mreg.LocalWrite | mreg.RemoteWrite | mreg.RemoteRead
	x.ma, _ = pd.RegisterMR(make([]byte, 4096), access)
	x.mb, _ = pdb.RegisterMR(make([]byte, 4096), access)
	addr := "inproc:" + t.Name()
	ln, err := devb.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		r, err := ln.Accept(ctx)
		if err == nil {
			err = r.Accept(x.b, nil)
		}
		done <- err
	}()
	if _, err := x.a.Connect(ctx, addr, nil); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return x
}

// send posts a signaled SEND of n bytes at off of a's region.
func (x *pair) send(t *testing.T, q *verbs.QP, mr *verbs.MR, id uint64, off, n int) {
	t.Helper()
	if err := q.PostSend(verbs.SendWR{WRID: id, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{mr.SGE(off, n)}}); err != nil {
		t.Fatal(err)
	}
}

func (x *pair) recv(t *testing.T, q *verbs.QP, mr *verbs.MR, id uint64, off, n int) {
	t.Helper()
	if err := q.PostRecv(verbs.RecvWR{WRID: id, SGL: []verbs.SGE{mr.SGE(off, n)}}); err != nil {
		t.Fatal(err)
	}
}

// wait takes n completions from cq.
func (x *pair) wait(t *testing.T, cq *verbs.CQ, n int) []verbs.WC {
	t.Helper()
	wcs := make([]verbs.WC, n)
	got := 0
	for got < n {
		k, err := cq.Wait(x.ctx, wcs[got:], 1)
		if err != nil {
			t.Fatalf("waiting for %d completions, got %d: %v", n, got, err)
		}
		got += k
	}
	return wcs
}

// none checks that cq has no completion for a while.
func none(t *testing.T, cq *verbs.CQ, what string) {
	t.Helper()
	time.Sleep(20 * time.Millisecond)
	if n := cq.Len(); n != 0 {
		t.Errorf("%s: %d completions", what, n)
	}
}

func wrIDs(wcs []verbs.WC) []string {
	var s []string
	for _, wc := range wcs {
		s = append(s, fmt.Sprintf("%d:%v", wc.WRID, wc.Status))
	}
	return s
}

func conn(t *testing.T, p *faults.Provider, side faults.Side) *faults.Conn {
	t.Helper()
	for _, c := range p.Conns() {
		if c.Side() == side {
			return c
		}
	}
	t.Fatalf("no %v end", side)
	return nil
}

func TestHoldRelease(t *testing.T) {
	x := newPair(t, faults.Filters{}, verbs.QPConfig{})
	for i := range 3 {
		x.recv(t, x.b, x.mb, uint64(10+i), 8*i, 8)
	}
	a := conn(t, x.p, faults.Dialer)
	if a.Addr() != "inproc:"+t.Name() || conn(t, x.p, faults.Acceptor).Addr() != a.Addr() {
		t.Errorf("addresses: %q", a.Addr())
	}
	a.Hold()
	copy(x.ma.Region().Bytes(), "one.....two.....three...")
	for i := range 3 {
		x.send(t, x.a, x.ma, uint64(i), 8*i, 8)
	}
	none(t, x.cqb, "held: the target")
	none(t, x.cqa, "held: the initiator")
	if s := a.Stats(); s.Queued != 3 || s.Messages != 3 {
		t.Errorf("stats while held: %+v", s)
	}
	a.Release()
	got := wrIDs(x.wait(t, x.cqb, 3))
	if want := []string{"10:success", "11:success", "12:success"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("target: %v, want %v", got, want)
	}
	if got := string(x.mb.Region().Bytes()[:24]); got != "one.....two.....three..." {
		t.Errorf("received %q", got)
	}
	x.wait(t, x.cqa, 3)
	if s := x.p.Stats(); s.Deferred != 3 || s.Messages != 3 || s.Conns != 2 {
		t.Errorf("provider stats: %+v", s)
	}
}

// TestDelayOvertake delays one direction: the other overtakes it, and the
// delayed direction keeps its order.
func TestDelayOvertake(t *testing.T) {
	x := newPair(t, faults.Filters{Message: func(m *faults.Msg) faults.Fault {
		if m.Conn.Side() == faults.Dialer {
			// Decreasing delays: order is kept all the same.
			return faults.Fault{Delay: time.Duration(40-10*int(m.Seq)) * time.Millisecond}
		}
		return faults.Fault{}
	}}, verbs.QPConfig{})
	for i := range 3 {
		x.recv(t, x.b, x.mb, uint64(10+i), 8*i, 8)
	}
	x.recv(t, x.a, x.ma, 20, 64, 8)
	for i := range 3 {
		x.send(t, x.a, x.ma, uint64(i), 8*i, 8)
	}
	x.send(t, x.b, x.mb, 30, 128, 8)
	// a receives b's message and b's send completes while a's are delayed.
	wcs := x.wait(t, x.cqa, 1)
	if wcs[0].WRID != 20 || x.cqb.Len() > 1 {
		t.Errorf("first at a: %v; %d completions at b", wrIDs(wcs), x.cqb.Len())
	}
	got := wrIDs(x.wait(t, x.cqb, 4))
	if want := []string{"30:success", "10:success", "11:success", "12:success"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("b: %v, want %v", got, want)
	}
}

func TestLateOutcomes(t *testing.T) {
	x := newPair(t, faults.Filters{Message: func(m *faults.Msg) faults.Fault {
		return faults.Fault{CompleteAfter: time.Duration(30-10*int(m.Seq)) * time.Millisecond}
	}}, verbs.QPConfig{})
	for i := range 3 {
		x.recv(t, x.b, x.mb, uint64(10+i), 8*i, 8)
	}
	for i := range 3 {
		x.send(t, x.a, x.ma, uint64(i), 8*i, 8)
	}
	// Delivered at once, completed late, and in order all the same.
	x.wait(t, x.cqb, 3)
	if n := x.cqa.Len(); n != 0 {
		t.Errorf("%d completions before their outcome was reported", n)
	}
	got := wrIDs(x.wait(t, x.cqa, 3))
	if want := []string{"0:success", "1:success", "2:success"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("a: %v, want %v", got, want)
	}
	if s := x.p.Stats(); s.CompleteLater != 3 {
		t.Errorf("stats: %+v", s)
	}
}

// TestDrop ends the connection at the third message of a, before or after
// it was delivered, as a reset or as a transport failure.
func TestDrop(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cause     error
		after     bool
		delay     time.Duration
		errno     syscall.Errno
		delivered int // messages b receives
	}{
		{"reset", faults.ErrReset, false, 0, syscall.ECONNRESET, 2},
		{"reset-after", faults.ErrReset, true, 0, syscall.ECONNRESET, 3},
		{"abort", faults.ErrAbort, false, 0, syscall.ECONNABORTED, 2},
		{"abort-after-delayed", faults.ErrAbort, true, time.Millisecond, syscall.ECONNABORTED, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newPair(t, faults.Filters{Message: func(m *faults.Msg) faults.Fault {
				f := faults.Fault{Delay: tc.delay}
				if m.Conn.Side() == faults.Dialer && m.Seq == 2 {
					f.Drop, f.DropAfter = tc.cause, tc.after
				}
				return f
			}}, verbs.QPConfig{})
			for i := range 4 {
				x.recv(t, x.b, x.mb, uint64(10+i), 8*i, 8)
			}
			for i := range 4 {
				x.send(t, x.a, x.ma, uint64(i), 8*i, 8)
			}
			got := wrIDs(x.wait(t, x.cqa, 4))
			want := []string{"0:success", "1:success", "2:work request flushed", "3:work request flushed"}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("a: %v, want %v", got, want)
			}
			got = wrIDs(x.wait(t, x.cqb, 4))
			for i, g := range got {
				ok := fmt.Sprintf("%d:success", 10+i)
				if (g == ok) != (i < tc.delivered) {
					t.Errorf("b: %v, want %d delivered", got, tc.delivered)
					break
				}
			}
			for _, q := range []*verbs.QP{x.a, x.b} {
				select {
				case <-q.Done():
				case <-x.ctx.Done():
					t.Fatal("the queue pair did not fail")
				}
				if err := q.Err(); !errors.Is(err, tc.errno) || !errors.Is(err, faults.ErrInjected) {
					t.Errorf("queue pair %d: %v, want %v and ErrInjected", q.Num(), err, tc.errno)
				}
			}
			if s := x.p.Stats(); s.Drops != 1 {
				t.Errorf("stats: %+v", s)
			}
		})
	}
}

func TestConnDrop(t *testing.T) {
	x := newPair(t, faults.Filters{}, verbs.QPConfig{})
	x.recv(t, x.b, x.mb, 10, 0, 8)
	conn(t, x.p, faults.Acceptor).Drop(nil)
	x.wait(t, x.cqb, 1)
	for _, q := range []*verbs.QP{x.a, x.b} {
		<-q.Done()
		if err := q.Err(); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("queue pair %d: %v", q.Num(), err)
		}
	}
	if n := len(x.p.Conns()); n != 0 {
		t.Errorf("%d connection ends left", n)
	}
}

// TestRNR: a delayed SEND that finds no RECV waits for one (RNRWait), or
// fails (RNRFail).
func TestRNR(t *testing.T) {
	delay := faults.Filters{Message: func(*faults.Msg) faults.Fault { return faults.Fault{Delay: time.Millisecond} }}
	t.Run("wait", func(t *testing.T) {
		x := newPair(t, delay, verbs.QPConfig{RNR: verbs.RNRWait})
		x.send(t, x.a, x.ma, 1, 0, 8)
		x.send(t, x.a, x.ma, 2, 8, 8)
		none(t, x.cqa, "no RECV yet")
		x.recv(t, x.b, x.mb, 10, 0, 8)
		x.recv(t, x.b, x.mb, 11, 8, 8)
		if got := wrIDs(x.wait(t, x.cqa, 2)); fmt.Sprint(got) != "[1:success 2:success]" {
			t.Errorf("a: %v", got)
		}
		x.wait(t, x.cqb, 2)
	})
	t.Run("fail", func(t *testing.T) {
		x := newPair(t, delay, verbs.QPConfig{RNR: verbs.RNRFail})
		x.send(t, x.a, x.ma, 1, 0, 8)
		if got := wrIDs(x.wait(t, x.cqa, 1)); fmt.Sprint(got) != "[1:receiver-not-ready retry exceeded]" {
			t.Errorf("a: %v", got)
		}
	})
}

// TestRefusedWhileDelayed: a delayed WRITE with a forged key, or a delayed
// SEND longer than its RECV, completes with the refusal's status, not as
// flushed, and writes nothing, when the target's end goes through the
// wrapper too; when it does not, the status is the one the termination's
// cause tells.
func TestRefusedWhileDelayed(t *testing.T) {
	for _, raw := range []bool{false, true} {
		for _, op := range []verbs.Opcode{verbs.OpWrite, verbs.OpSend} {
			t.Run(fmt.Sprintf("%v/target-wrapped=%v", op, !raw), func(t *testing.T) {
				x := newPairOver(t, faults.Filters{Message: func(*faults.Msg) faults.Fault {
					return faults.Fault{Delay: time.Millisecond}
				}}, verbs.QPConfig{}, raw)
				copy(x.ma.Region().Bytes(), "forged")
				wr := verbs.SendWR{WRID: 1, Opcode: op, Flags: verbs.Signaled,
					SGL: []verbs.SGE{x.ma.SGE(0, 6)}, RKey: x.mb.RKey() ^ 1<<20, RemoteAddr: x.mb.Addr()}
				want := "[1:remote access error]"
				if op == verbs.OpSend {
					x.recv(t, x.b, x.mb, 10, 0, 4)
					want = "[1:remote invalid request]"
					if raw {
						// The termination's cause does not tell a too
						// long SEND: the status is lost (documented).
						want = "[1:work request flushed]"
					}
				}
				if err := x.a.PostSend(wr); err != nil {
					t.Fatal(err)
				}
				got := wrIDs(x.wait(t, x.cqa, 1))
				if fmt.Sprint(got) != want {
					t.Errorf("a: %v, want %s", got, want)
				}
				if got := x.mb.Region().Bytes()[:6]; string(got) != "\x00\x00\x00\x00\x00\x00" {
					t.Errorf("target memory: %q", got)
				}
			})
		}
	}
}

func TestRefusals(t *testing.T) {
	var refuse atomic.Bool
	var posts, regs atomic.Int64
	x := newPair(t, faults.Filters{
		Post: func(p *faults.Post) error {
			if p.Conn != nil && refuse.Load() {
				posts.Add(1)
				return verbs.ErrQueueFull
			}
			return nil
		},
		Register: func(r *faults.Registration) error {
			if refuse.Load() {
				regs.Add(1)
				return fmt.Errorf("refused registration %d of %d bytes: %w", r.Seq, r.Len, mreg.ErrTableFull)
			}
			return nil
		},
		Dial: func(addr string) error {
			if refuse.Load() {
				return fmt.Errorf("refused dial to %s: %w", addr, syscall.ECONNREFUSED)
			}
			return nil
		},
	}, verbs.QPConfig{})
	refuse.Store(true)
	err := x.a.PostSend(verbs.SendWR{WRID: 1, Opcode: verbs.OpSend, SGL: []verbs.SGE{x.ma.SGE(0, 8)}})
	if !errors.Is(err, verbs.ErrQueueFull) {
		t.Errorf("PostSend: %v", err)
	}
	if err := x.b.PostRecv(verbs.RecvWR{WRID: 2, SGL: []verbs.SGE{x.mb.SGE(0, 8)}}); !errors.Is(err, syscall.EAGAIN) {
		t.Errorf("PostRecv: %v", err)
	}
	if _, err := x.a.PD().RegisterMR(make([]byte, 8), 0); !errors.Is(err, mreg.ErrTableFull) {
		t.Errorf("RegisterMR: %v", err)
	}
	dev, _ := verbs.Open(x.p)
	defer dev.Close()
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(4, verbs.CQOptions{})
	q, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Connect(x.ctx, "inproc:"+t.Name(), nil); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Connect: %v", err)
	}
	if s := x.p.Stats(); s.RefusedPosts != 2 || s.RefusedRegs != 1 || s.RefusedDials != 1 {
		t.Errorf("stats: %+v", s)
	}
}

func TestClose(t *testing.T) {
	x := newPair(t, faults.Filters{}, verbs.QPConfig{})
	conn(t, x.p, faults.Dialer).Hold()
	x.send(t, x.a, x.ma, 1, 0, 8)
	if err := x.p.Close(); err != nil {
		t.Fatal(err)
	}
	if got := wrIDs(x.wait(t, x.cqa, 1)); fmt.Sprint(got) != "[1:work request flushed]" {
		t.Errorf("a: %v", got)
	}
	if err := x.p.Close(); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	if _, err := x.p.Listen("inproc:x"); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("Listen after Close: %v", err)
	}
}
