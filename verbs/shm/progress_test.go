//go:build linux

package shm_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/exsgo/exs/eventq"
	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/shm"
)

// pollPair is a connection, with shm.WithPollerProgress, whose receiving
// side, b, is driven by a test that polls b's CQ: the receiver goroutine
// then parks (verbs.Progresser).
type pollPair struct {
	t      *testing.T
	ctx    context.Context
	b      *shm.Provider
	qa, qb *verbs.QP
	src    *verbs.MR // A's send buffer
	dst    *verbs.MR // B's receive buffer, one slot of slot bytes per RECV
	slot   int
	next   uint64 // WRID of the next RECV
	sent   int    // bytes sent so far, the pattern's offset
}

func newPollPair(t *testing.T, cqOpts eventq.Options, slot int, opts ...shm.Option) *pollPair {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	opts = append(opts, shm.WithPollerProgress())
	a, b := newProvider(opts...), newProvider(opts...)
	qa, qb := connectPairCQ(t, ctx, a, b, "shm:"+sockDir(t)+"/p", cqOpts)
	src, err := qa.PD().RegisterMR(make([]byte, slot), 0)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := qb.PD().RegisterMR(make([]byte, 64*slot), mreg.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	return &pollPair{t: t, ctx: ctx, b: b, qa: qa, qb: qb, src: src, dst: dst, slot: slot}
}

// post has A send messages of the given lengths, after B posted a RECV for
// each, and waits for A's completions.
func (p *pollPair) post(lens ...int) {
	p.t.Helper()
	if err := p.tryPost(lens...); err != nil {
		p.t.Fatal(err)
	}
}

// tryPost is post for a goroutine other than the test's.
func (p *pollPair) tryPost(lens ...int) error {
	wcs := make([]verbs.WC, 1)
	for _, n := range lens {
		i := int(p.next % 64)
		if err := p.qb.PostRecv(verbs.RecvWR{WRID: p.next, SGL: []verbs.SGE{p.dst.SGE(i*p.slot, p.slot)}}); err != nil {
			return err
		}
		p.next++
		b := p.src.Bytes()[:n]
		for k := range b {
			b[k] = byte(p.sent + k)
		}
		if err := p.qa.PostSend(verbs.SendWR{WRID: uint64(n), Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{p.src.SGE(0, n)}}); err != nil {
			return err
		}
		if _, err := p.qa.Config().SendCQ.Wait(p.ctx, wcs, 1); err != nil || wcs[0].Status != verbs.StatusSuccess {
			return fmt.Errorf("send of %d bytes: %v %+v", n, err, wcs[0])
		}
		p.sent += n
	}
	return nil
}

// check checks a RECV completion against the pattern the sender used, the
// message with offset off in the stream and length n.
func (p *pollPair) check(wc verbs.WC, off, n int) {
	p.t.Helper()
	if wc.Status != verbs.StatusSuccess || int(wc.ByteLen) != n {
		p.t.Fatalf("recv %d: %+v, want %d bytes", wc.WRID, wc, n)
	}
	i := int(wc.WRID % 64)
	for k, c := range p.dst.Bytes()[i*p.slot : i*p.slot+n] {
		if c != byte(off+k) {
			p.t.Fatalf("recv %d byte %d: %d, want %d", wc.WRID, k, c, byte(off+k))
		}
	}
}

// parks returns how often b's receiver goroutine parked for a poller.
func (p *pollPair) parks() uint64 {
	st := p.b.Stats()
	if len(st) != 1 {
		p.t.Fatalf("%d connections", len(st))
	}
	return st[0].Parks
}

// pollUntilParked polls b's CQ, taking the completions of the given
// lengths, until they are all there and b's receiver goroutine has parked
// for the poller at least once.
func (p *pollPair) pollUntilParked(lens ...int) {
	p.t.Helper()
	cq := p.qb.Config().RecvCQ
	wcs := make([]verbs.WC, 8)
	off := p.sent
	for _, n := range lens {
		off -= n
	}
	got := 0
	for got < len(lens) || p.parks() == 0 {
		if p.ctx.Err() != nil {
			p.t.Fatalf("%d of %d messages, %d parkings", got, len(lens), p.parks())
		}
		k := cq.Poll(wcs)
		for _, wc := range wcs[:k] {
			p.check(wc, off, lens[got])
			off += lens[got]
			got++
		}
		runtime.Gosched()
	}
}

// TestUnpollHandsBack: while the test polls B's CQ, B's receiver goroutine
// parks; a Wait that blocks hands the receive work back to it (Unpoll), so
// a message sent after the poller blocked arrives, although the park lease
// is stretched to minutes.
func TestUnpollHandsBack(t *testing.T) {
	defer shm.SetParkLease(shm.SetParkLease(10 * time.Minute))
	p := newPollPair(t, eventq.Options{Mode: eventq.Adaptive}, 64)
	p.post(64, 1, 17)
	p.pollUntilParked(64, 1, 17)

	got := make(chan verbs.WC, 1)
	before := shm.Unpolls(p.b)
	go func() {
		wcs := make([]verbs.WC, 1)
		if _, err := p.qb.Config().RecvCQ.Wait(p.ctx, wcs, 1); err != nil {
			t.Error(err)
		}
		got <- wcs[0]
	}()
	// The Wait spins, then unpolls before it blocks: from then on only
	// the receiver goroutine can deliver what comes.
	for shm.Unpolls(p.b) == before {
		if p.ctx.Err() != nil {
			t.Fatal("the Wait never stopped polling")
		}
		runtime.Gosched()
	}
	off := p.sent
	p.post(33)
	p.check(<-got, off, 33)
}

// TestParkLeaseEnds: a poller that stops polling without a word (it waits
// on the CQ's notification channel) leaves the receive work to B's
// receiver goroutine once its park lease ends.
func TestParkLeaseEnds(t *testing.T) {
	defer shm.SetParkLease(shm.SetParkLease(time.Millisecond))
	p := newPollPair(t, eventq.Options{Mode: eventq.Adaptive}, 64)
	p.post(64, 2)
	p.pollUntilParked(64, 2)

	cq := p.qb.Config().RecvCQ
	cq.RequestNotify()
	off := p.sent
	p.post(5)
	select {
	case <-cq.Notify():
	case <-p.ctx.Done():
		t.Fatal("no completion after the poller stopped")
	}
	wcs := make([]verbs.WC, 1)
	if n := cq.Poll(wcs); n != 1 {
		t.Fatalf("%d completions", n)
	}
	p.check(wcs[0], off, 5)
}

// TestPollerLeavesLongMessages: without cross-memory attach, with small
// rings, a SEND spans many ring records; a poller does not deliver it (it
// would wait for the peer's next records) but wakes the parked receiver
// goroutine, which does. The park lease is stretched to minutes, so a lost
// wake-up hangs the test.
func TestPollerLeavesLongMessages(t *testing.T) {
	defer shm.SetParkLease(shm.SetParkLease(10 * time.Minute))
	const long = 100 << 10
	p := newPollPair(t, eventq.Options{Mode: eventq.BusyPoll}, long, shm.WithoutCMA(), shm.WithRingSizes(16<<10, 16<<10))
	p.post(64, 3)
	p.pollUntilParked(64, 3)

	// A's sends complete only once B took them, so post them from a
	// goroutine while the test polls B's CQ.
	lens := []int{long, 1, long - 1, 200}
	done := make(chan error, 1)
	go func() { done <- p.tryPost(lens...) }()
	cq := p.qb.Config().RecvCQ
	wcs := make([]verbs.WC, 4)
	off, got := p.sent, 0
	for got < len(lens) {
		if p.ctx.Err() != nil {
			t.Fatalf("%d of %d messages", got, len(lens))
		}
		for _, wc := range wcs[:cq.Poll(wcs)] {
			p.check(wc, off, lens[got])
			off += lens[got]
			got++
		}
		runtime.Gosched()
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
