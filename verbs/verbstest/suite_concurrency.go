package verbstest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

var concurrencyTests = []test{
	{"Concurrency/BothWays", testConcurrentBothWays},
	{"Concurrency/DisconnectWhilePosting", testDisconnectWhilePosting},
}

// retry runs post until it does not fail with ErrQueueFull (the queues
// are full until the pollers catch up) or ctx ends.
func retry(x *st, post func() error) error {
	for {
		err := post()
		if !errors.Is(err, verbs.ErrQueueFull) {
			return err
		}
		if x.ctx.Err() != nil {
			return x.ctx.Err()
		}
		runtime.Gosched()
	}
}

// testConcurrentBothWays has two local goroutines SEND to the peer while
// the peer WRITEs with immediate data to the local side, RECVs are posted
// by other goroutines, and both sides poll concurrently. Every work
// request must complete once, successfully, and each sender's messages
// must arrive in the order it posted them.
func testConcurrentBothWays(x *st) {
	const senders, perSender, peerMsgs = 2, 300, 300
	q, p := x.pair(QPSpec{SendDepth: 32, RecvDepth: 32, CQDepth: 128}, QPSpec{SendDepth: 32, RecvDepth: 32, CQDepth: 128})
	src := x.register(q, senders*perSender*8, 0)
	for g := range senders {
		for i := range perSender {
			binary.LittleEndian.PutUint32(src.region()[(g*perSender+i)*8:], uint32(g))
			binary.LittleEndian.PutUint32(src.region()[(g*perSender+i)*8+4:], uint32(i))
		}
	}
	target := x.register(q, 64, mreg.LocalWrite|mreg.RemoteWrite)
	dst := x.peerRegister(p, senders*perSender*8, mreg.LocalWrite)
	psrc := x.peerRegister(p, 64, 0)

	var wg sync.WaitGroup
	errs := make(chan error, 16)
	report := func(err error) {
		if err != nil {
			select {
			case errs <- err:
			default:
			}
		}
	}
	// Local senders.
	for g := range senders {
		wg.Go(func() {
			for i := range perSender {
				id := uint64(g*perSender + i)
				wr := verbs.SendWR{WRID: id, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{src.sge(int(id)*8, 8)}}
				if err := retry(x, func() error { return q.qp.PostSend(wr) }); err != nil {
					report(fmt.Errorf("local sender %d: %w", g, err))
					return
				}
			}
		})
	}
	// Peer RECVs for them.
	wg.Go(func() {
		for i := range senders * perSender {
			sge := []PeerSGE{{MR: dst, Off: 8 * i, Len: 8}}
			if err := retry(x, func() error { return p.PostRecv(uint64(i), sge) }); err != nil {
				report(fmt.Errorf("peer receive poster: %w", err))
				return
			}
		}
	})
	// Peer sender and local RECVs.
	wg.Go(func() {
		for i := range peerMsgs {
			wr := PeerSendWR{WRID: uint64(1_000_000 + i), Opcode: verbs.OpWriteWithImm, Signaled: true, Imm: uint32(i),
				SGL: []PeerSGE{{MR: psrc, Len: 64}}, RKey: target.RKey(), RemoteAddr: target.Addr()}
			if err := retry(x, func() error { return p.PostSend(wr) }); err != nil {
				report(fmt.Errorf("peer sender: %w", err))
				return
			}
		}
	})
	wg.Go(func() {
		for i := range peerMsgs {
			if err := retry(x, func() error { return q.qp.PostRecv(verbs.RecvWR{WRID: uint64(i)}) }); err != nil {
				report(fmt.Errorf("local receive poster: %w", err))
				return
			}
		}
	})
	// Pollers.
	var local, peer []verbs.WC
	var localErr, peerErr error
	wg.Go(func() { local, localErr = q.Poll(x.ctx, senders*perSender+peerMsgs) })
	wg.Go(func() { peer, peerErr = p.Poll(x.ctx, senders*perSender+peerMsgs) })
	wg.Wait()
	close(errs)
	for err := range errs {
		x.Error(err)
	}
	if localErr != nil || peerErr != nil {
		x.Fatalf("pollers: local %v, peer %v", localErr, peerErr)
	}

	checkBothWaysLocal(x, local, senders, perSender)
	checkBothWaysPeer(x, peer, x.readPeer(dst)[Guard:], senders)
}

// checkBothWaysLocal checks testConcurrentBothWays's local completions:
// each sender's SENDs in the order it posted them, the RECVs (immediate
// data) in order.
func checkBothWaysLocal(x *st, local []verbs.WC, senders, perSender uint64) {
	next := make([]uint64, senders)
	var imm uint32
	for _, wc := range local {
		switch {
		case wc.Status != verbs.StatusSuccess:
			x.Errorf("local completion %+v", wc)
		case wc.Opcode == verbs.WCSend:
			g := wc.WRID / perSender
			if want := g*perSender + next[g]; wc.WRID != want {
				x.Errorf("sender %d: completion of wrid %d, want %d", g, wc.WRID, want)
			}
			next[g]++
		case wc.Opcode == verbs.WCRecvWithImm:
			if wc.Imm != imm || wc.WRID != uint64(imm) || wc.ByteLen != 64 {
				x.Errorf("local RECV completion %+v, want imm and wrid %d", wc, imm)
			}
			imm++
		default:
			x.Errorf("unexpected local completion %+v", wc)
		}
	}
}

// checkBothWaysPeer checks testConcurrentBothWays's peer completions: the
// RECVs in order, each sender's messages in order in b, the peer's
// receive region.
func checkBothWaysPeer(x *st, peer []verbs.WC, b []byte, senders uint32) {
	seen := make([]uint32, senders)
	var recvs uint64
	for _, wc := range peer {
		switch {
		case wc.Status != verbs.StatusSuccess:
			x.Errorf("peer completion %+v", wc)
		case wc.Opcode == verbs.WCRecv:
			if wc.WRID != recvs {
				x.Errorf("peer RECV completion for wrid %d, want %d", wc.WRID, recvs)
			}
			m := b[8*recvs:]
			g, i := binary.LittleEndian.Uint32(m), binary.LittleEndian.Uint32(m[4:])
			if g >= senders || i != seen[g] {
				x.Errorf("peer RECV %d holds message %d of sender %d, want message %d", recvs, i, g, seen[min(g, senders-1)])
			} else {
				seen[g]++
			}
			recvs++
		case wc.Opcode == verbs.WCWrite:
		default:
			x.Errorf("unexpected peer completion %+v", wc)
		}
	}
}

// testDisconnectWhilePosting disconnects while goroutines post and a
// goroutine polls: every accepted post completes exactly once,
// successfully or flushed, the flushed ones after the successful ones,
// and posts accepted after the disconnect are flushed.
func testDisconnectWhilePosting(x *st) {
	const posters, before, after = 3, 300, 20
	q, p := x.pair(QPSpec{SendDepth: 64, CQDepth: 256}, QPSpec{})
	src := x.register(q, 8, 0)
	pm := x.peerRegister(p, 8, mreg.LocalWrite|mreg.RemoteWrite)
	var accepted atomic.Int64
	var disconnected, stop atomic.Bool
	var posting, polling sync.WaitGroup
	errs := make(chan error, posters+2)
	for g := range posters {
		posting.Go(func() {
			late := 0
			for i := 0; late < after; i++ {
				if disconnected.Load() {
					late++
				}
				wr := verbs.SendWR{WRID: uint64(g)<<32 | uint64(i), Opcode: verbs.OpWrite, Flags: verbs.Signaled,
					SGL: []verbs.SGE{src.sge(0, 8)}, RKey: pm.RKey(), RemoteAddr: pm.Addr()}
				if err := retry(x, func() error { return q.qp.PostSend(wr) }); err != nil {
					errs <- err
					return
				}
				accepted.Add(1)
			}
		})
	}
	posting.Go(func() {
		for accepted.Load() < before && x.ctx.Err() == nil {
			runtime.Gosched()
		}
		if err := q.qp.Disconnect(); err != nil {
			errs <- err
		}
		disconnected.Store(true)
	})
	var wcs []verbs.WC
	polling.Go(func() {
		buf := make([]verbs.WC, 64)
		for x.ctx.Err() == nil {
			n := q.cq.Poll(buf)
			wcs = append(wcs, buf[:n]...)
			if n == 0 {
				if stop.Load() && int64(len(wcs)) >= accepted.Load() {
					return
				}
				runtime.Gosched()
			}
		}
		errs <- fmt.Errorf("polled %d completions of %d: %w", len(wcs), accepted.Load(), x.ctx.Err())
	})
	posting.Wait()
	stop.Store(true)
	polling.Wait()
	close(errs)
	for err := range errs {
		x.Error(err)
	}
	counts := make(map[uint64]int)
	flushed := 0
	for _, wc := range wcs {
		counts[wc.WRID]++
		switch wc.Status {
		case verbs.StatusSuccess:
			if flushed > 0 {
				x.Errorf("success of wrid %#x after a flushed completion", wc.WRID)
			}
		case verbs.StatusFlushed:
			flushed++
		default:
			x.Errorf("completion %+v", wc)
		}
	}
	if int64(len(counts)) != accepted.Load() {
		x.Errorf("%d distinct work requests completed, %d accepted", len(counts), accepted.Load())
	}
	for id, n := range counts {
		if n != 1 {
			x.Errorf("wrid %#x completed %d times", id, n)
		}
	}
	if flushed < posters*after {
		x.Errorf("%d completions flushed, want at least the %d posted after the disconnect", flushed, posters*after)
	}
	x.noMore(q)
	x.peerWaitError(p)
}
