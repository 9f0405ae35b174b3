//go:build linux

package tcp_test

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/tcp"
)

// A peer host that vanishes (power lost, cable pulled, a firewall that
// drops everything) sends no FIN and no reset: the provider must find it
// by its silence (WithPeerTimeout), as an RDMA NIC's reliable connection
// does by its transport timeout and retry count.

// inNetns runs f with the calling goroutine's thread in network namespace
// ns, so that the sockets f creates (a Listen's, a Dial's) belong to it.
func inNetns(t *testing.T, ns string, f func()) {
	t.Helper()
	runtime.LockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer self.Close()
	target, err := os.Open("/run/netns/" + ns)
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("setns %s: %v", ns, err)
	}
	f()
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays locked: it ends with the goroutine.
		t.Fatalf("setns back: %v", err)
	}
	runtime.UnlockOSThread()
}

// mac returns the hardware address of dev in namespace ns.
func (h *hosts) mac(ns, dev string) string {
	h.t.Helper()
	f := strings.Fields(h.run("-n", ns, "-br", "link", "show", "dev", dev))
	if len(f) < 3 {
		h.t.Fatalf("ip link show %s: %q", dev, f)
	}
	return f[2]
}

// pinNeighbours makes each side's neighbour entry for the other
// permanent, so that once B vanishes A's packets to it are dropped
// silently (no failed ARP resolution, whose host-unreachable error would
// stand for the timeout's).
func (h *hosts) pinNeighbours() {
	h.run("-n", h.nsA, "neigh", "replace", h.ipB, "lladdr", h.mac(h.nsB, h.vethB), "dev", h.vethA, "nud", "permanent")
	h.run("-n", h.nsB, "neigh", "replace", h.ipA, "lladdr", h.mac(h.nsA, h.vethA), "dev", h.vethB, "nud", "permanent")
}

// vanishB takes B off the network without a word: its end of the veth
// goes down, and whatever A sends it is dropped.
func (h *hosts) vanishB() { h.run("-n", h.nsB, "link", "set", h.vethB, "down") }

// qpEnd is one end of a connection: its queue pair, CQ and a registered
// buffer.
type qpEnd struct {
	qp  *verbs.QP
	cq  *verbs.CQ
	mr  *verbs.MR
	buf []byte
}

func newEnd(t *testing.T, dev *verbs.Device, pd *verbs.PD) *qpEnd {
	t.Helper()
	cq, err := dev.CreateCQ(16, verbs.CQOptions{})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, SendDepth: 4, RecvDepth: 4})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256<<10)
	mr, err := pd.RegisterMR(buf, mreg.LocalWrite|mreg.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qp.Close(); mr.Deregister(); cq.Close() })
	return &qpEnd{qp: qp, cq: cq, mr: mr, buf: buf}
}

// connectQPs connects dialer's queue pair to acceptor's through ln.
func connectQPs(t *testing.T, ln *verbs.Listener, acceptor, dialer *qpEnd, dial func(func())) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		req, err := ln.Accept(ctx)
		if err == nil {
			err = req.Accept(acceptor.qp, nil)
		}
		done <- err
	}()
	var err error
	dial(func() { _, err = dialer.qp.Connect(ctx, ln.Addr(), nil) })
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestDeadPeer connects queue pairs of host A (peer timeout 2 s) to host
// B, each of A's both dialed and accepted, makes B vanish, and checks what
// A sees: a SEND whose data B never acknowledges completes in error, an
// idle queue pair's RECV is flushed, both about 2 s after B's last word,
// a SEND that B held for want of a RECV (A's window shut, its user
// timeout lifted while B answered) fails a little later, the queue pairs'
// Err wrapping ETIMEDOUT; a Disconnect and a Close while
// B is silent return at once; and a live connection in A, idle all along,
// is kept. Without the peer timeout the SEND would wait for TCP's
// retransmissions (about 15 minutes), the RECV for the system's keepalive
// or forever.
func TestDeadPeer(t *testing.T) {
	h := newHosts(t)
	h.pinNeighbours()
	const timeout = 2 * time.Second
	pa := tcp.New(tcp.WithPeerTimeout(timeout))
	pb := tcp.New(tcp.WithPeerTimeout(timeout), tcp.WithLinger(100*time.Millisecond))
	devA, _ := verbs.Open(pa)
	devB, _ := verbs.Open(pb)
	pdA, _ := devA.AllocPD()
	pdB, _ := devB.AllocPD()
	t.Cleanup(func() { devA.Close(); devB.Close(); pa.Close(); pb.Close() })
	inA := func(f func()) { inNetns(t, h.nsA, f) }
	inB := func(f func()) { inNetns(t, h.nsB, f) }
	var lnA, lnB, lnLocal *verbs.Listener
	var err error
	inA(func() {
		if lnA, err = devA.Listen("tcp:" + h.ipA + ":0"); err == nil {
			lnLocal, err = devA.Listen("tcp:127.0.0.1:0")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	inB(func() { lnB, err = devB.Listen("tcp:" + h.ipB + ":0") })
	if err != nil {
		t.Fatal(err)
	}
	defer lnA.Close()
	defer lnB.Close()
	defer lnLocal.Close()

	type conn struct {
		name string
		a    *qpEnd // A's end
	}
	// pair returns a connection of A to B, A's end dialed or accepted.
	pair := func(name string, aDials bool) conn {
		a, b := newEnd(t, devA, pdA), newEnd(t, devB, pdB)
		if aDials {
			connectQPs(t, lnB, b, a, inA)
			return conn{name + "/dialed", a}
		}
		connectQPs(t, lnA, a, b, inB)
		return conn{name + "/accepted", a}
	}
	// A SEND of 32 MiB that B holds for want of a RECV: A's window is
	// shut, B answers A's zero-window probes, A lifts its user timeout;
	// once B is gone its probes go unanswered.
	held := pair("held", true)
	big := make([]byte, 32<<20)
	bigMR, err := pdA.RegisterMR(big, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := held.a.qp.PostSend(verbs.SendWR{WRID: 3, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{bigMR.SGE(0, len(big))}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	var sends, recvs, ends []conn
	for _, aDials := range []bool{true, false} {
		sends = append(sends, pair("send", aDials))
		recvs = append(recvs, pair("recv", aDials))
		ends = append(ends, pair("disconnect", aDials))
	}
	// A connection inside A, idle all along: its keepalive probes are
	// answered, and it must stay up.
	live, liveDialer := newEnd(t, devA, pdA), newEnd(t, devA, pdA)
	connectQPs(t, lnLocal, live, liveDialer, inA)
	for _, c := range append(recvs, conn{"live", live}) {
		if err := c.a.qp.PostRecv(verbs.RecvWR{WRID: 1, SGL: []verbs.SGE{c.a.mr.SGE(0, 4096)}}); err != nil {
			t.Fatal(err)
		}
	}
	// B's last word came with the connections' set-up.
	h.vanishB()
	vanished := time.Now()
	for _, c := range append(sends, ends...) {
		wr := verbs.SendWR{WRID: 2, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{c.a.mr.SGE(0, 64<<10)}}
		if err := c.a.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range ends {
		start := time.Now()
		if err := c.a.qp.Disconnect(); err != nil {
			t.Errorf("%s: Disconnect: %v", c.name, err)
		}
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Errorf("%s: Disconnect took %v while the peer is silent", c.name, d)
		}
		start = time.Now()
		c.a.qp.Close()
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Errorf("%s: Close took %v while the peer is silent", c.name, d)
		}
	}

	// Each end of A to B must fail within [timeout - slack, timeout + 2 s].
	const slack = 200 * time.Millisecond
	var wg sync.WaitGroup
	for _, c := range append(sends, recvs...) {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout+2*time.Second)
			defer cancel()
			wcs := make([]verbs.WC, 1)
			if _, err := c.a.cq.Wait(ctx, wcs, 1); err != nil {
				t.Errorf("%s: no completion %v after the peer vanished (%v); queue pair error %v", c.name, time.Since(vanished).Round(time.Millisecond), err, c.a.qp.Err())
				return
			}
			took := time.Since(vanished)
			t.Logf("%s: %v after the peer vanished: %+v, %v", c.name, took.Round(time.Millisecond), wcs[0], c.a.qp.Err())
			if wcs[0].Status != verbs.StatusFlushed {
				t.Errorf("%s: completion %+v, want flushed", c.name, wcs[0])
			}
			if took < timeout-slack {
				t.Errorf("%s: failed %v after the peer vanished, before the peer timeout %v", c.name, took, timeout)
			}
			if err := c.a.qp.Err(); !errors.Is(err, syscall.ETIMEDOUT) || !errors.Is(err, verbs.ErrTerminated) {
				t.Errorf("%s: queue pair error %v, want ETIMEDOUT and ErrTerminated", c.name, err)
			}
		})
	}
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout+15*time.Second)
		defer cancel()
		wcs := make([]verbs.WC, 1)
		if _, err := held.a.cq.Wait(ctx, wcs, 1); err != nil {
			t.Errorf("%s: no completion %v after the peer vanished (%v); queue pair error %v", held.name, time.Since(vanished).Round(time.Millisecond), err, held.a.qp.Err())
			return
		}
		took := time.Since(vanished)
		t.Logf("%s: %v after the peer vanished: %+v, %v", held.name, took.Round(time.Millisecond), wcs[0], held.a.qp.Err())
		// Two probes unanswered, then the kernel's next probe: the
		// probes' interval doubles from the RTO while the window is
		// shut (3.1 s measured).
		if limit := timeout + 4*time.Second; took > limit {
			t.Errorf("%s: failed %v after the peer vanished, want at most %v", held.name, took, limit)
		}
		if err := held.a.qp.Err(); !errors.Is(err, syscall.ETIMEDOUT) {
			t.Errorf("%s: queue pair error %v, want ETIMEDOUT", held.name, err)
		}
	})
	wg.Wait()
	if s := live.qp.State(); s != verbs.StateReadyToSend || live.qp.Err() != nil {
		t.Errorf("the live connection, idle for %v: state %v, error %v", time.Since(vanished), s, live.qp.Err())
	}
	live.qp.Close()
	liveDialer.qp.Close()
	start := time.Now()
	pa.Close()
	if d := time.Since(start); d > time.Second {
		t.Errorf("closing A's provider took %v", d)
	}
}
