//go:build linux

package tcp

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// sockTimers is what a connection's socket has of the peer timeout.
type sockTimers struct {
	UserTimeoutMS              int
	KeepAlive                  bool
	IdleS, IntervalS, ProbeCnt int
}

func timersOf(t *testing.T, fd int) sockTimers {
	t.Helper()
	get := func(level, opt int) int {
		v, err := unix.GetsockoptInt(fd, level, opt)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	s := sockTimers{
		UserTimeoutMS: get(unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT),
		KeepAlive:     get(unix.SOL_SOCKET, unix.SO_KEEPALIVE) != 0,
	}
	if s.KeepAlive {
		s.IdleS = get(unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
		s.IntervalS = get(unix.IPPROTO_TCP, unix.TCP_KEEPINTVL)
		s.ProbeCnt = get(unix.IPPROTO_TCP, unix.TCP_KEEPCNT)
	}
	return s
}

// TestPeerTimeoutSockets checks the socket options of WithPeerTimeout on
// both ends of a connection, the dialed one and the accepted one: the user
// timeout, and keepalive probes from d/2 of silence on, every d/6, in
// whole seconds of at least 1; 0 sets neither.
func TestPeerTimeoutSockets(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
		want sockTimers
	}{
		{"default", nil, sockTimers{30000, true, 15, 5, 4}},
		{"2s", []Option{WithPeerTimeout(2 * time.Second)}, sockTimers{2000, true, 1, 1, 2}},
		{"1500ms", []Option{WithPeerTimeout(1500 * time.Millisecond)}, sockTimers{1500, true, 1, 1, 1}},
		{"2m", []Option{WithPeerTimeout(2 * time.Minute)}, sockTimers{120000, true, 60, 20, 4}},
		// Linux takes TCP_KEEPIDLE and TCP_KEEPINTVL up to 32767 s and
		// TCP_KEEPCNT up to 127: past them the probes start at the
		// longest idle time the kernel takes.
		{"24h", []Option{WithPeerTimeout(24 * time.Hour)}, sockTimers{86400000, true, 32767, 14400, 4}},
		{"30d", []Option{WithPeerTimeout(30 * 24 * time.Hour)}, sockTimers{math.MaxInt32, true, 32767, 32767, 79}},
		{"max", []Option{WithPeerTimeout(math.MaxInt64)}, sockTimers{math.MaxInt32, true, 32767, 32767, 127}},
		{"off", []Option{WithPeerTimeout(0)}, sockTimers{}},
		{"negative ignored", []Option{WithPeerTimeout(-time.Second)}, sockTimers{30000, true, 15, 5, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pa, pb := New(tc.opts...), New(tc.opts...)
			connectPair(t, pa, pb)
			for who, p := range map[string]*Provider{"dialed": pa, "accepted": pb} {
				p.mu.Lock()
				var fds []int
				for l := range p.links {
					fds = append(fds, l.fd)
				}
				p.mu.Unlock()
				if len(fds) != 1 {
					t.Fatalf("%s: %d links", who, len(fds))
				}
				if diff := cmp.Diff(tc.want, timersOf(t, fds[0])); diff != "" {
					t.Errorf("%s end (-want +got):\n%s", who, diff)
				}
			}
		})
	}
}

// end is a queue pair with its device's protection domain and CQ.
type end struct {
	pd *verbs.PD
	cq *verbs.CQ
	qp *verbs.QP
}

// connectPair connects a queue pair of pa to one of pb over loopback.
func connectPair(t *testing.T, pa, pb *Provider) (a, b end) {
	t.Helper()
	devA, _ := verbs.Open(pa)
	devB, _ := verbs.Open(pb)
	t.Cleanup(func() { devA.Close(); devB.Close(); pa.Close(); pb.Close() })
	mk := func(d *verbs.Device) end {
		pd, _ := d.AllocPD()
		cq, _ := d.CreateCQ(16, verbs.CQOptions{})
		qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { qp.Close() })
		return end{pd, cq, qp}
	}
	a, b = mk(devA), mk(devB)
	ln, err := devB.Listen("tcp:127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	joinQPs(ctx, t, ln, b.qp, a.qp)
	return a, b
}

// joinQPs connects dialer to acceptor, which accepts the request it gets
// from ln.
func joinQPs(ctx context.Context, t *testing.T, ln *verbs.Listener, acceptor, dialer *verbs.QP) {
	t.Helper()
	accepted := make(chan error, 1)
	go func() {
		req, err := ln.Accept(ctx)
		if err == nil {
			err = req.Accept(acceptor, nil)
		}
		accepted <- err
	}()
	if _, err := dialer.Connect(ctx, ln.Addr(), nil); err != nil {
		t.Fatal(err)
	}
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
}

// TestHeldSendOutlivesPeerTimeout holds a SEND of 32 MiB for want of a
// RECV (RNRWait, the default) for three times the peer timeout: the
// target reads nothing more and its window stays shut, but it answers the
// initiator's zero-window probes, so the initiator lifts its user timeout
// (Linux would otherwise abort the connection after the timeout, as it
// did before the lift) and the SEND completes once a RECV is posted.
func TestHeldSendOutlivesPeerTimeout(t *testing.T) {
	const d = time.Second
	pa, pb := New(WithPeerTimeout(d)), New(WithPeerTimeout(d))
	a, b := connectPair(t, pa, pb)
	const n = 32 << 20
	src, dst := make([]byte, n), make([]byte, n)
	smr, err := a.pd.RegisterMR(src, 0)
	if err != nil {
		t.Fatal(err)
	}
	dmr, err := b.pd.RegisterMR(dst, mreg.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(verbs.SendWR{WRID: 1, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{smr.SGE(0, n)}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * d)
	if err := a.qp.Err(); err != nil {
		t.Fatalf("initiator after %v of a held SEND: %v", 3*d, err)
	}
	pa.mu.Lock()
	lifts := 0
	for l := range pa.links {
		l.mu.Lock()
		lifts += l.windowLifts
		l.mu.Unlock()
	}
	pa.mu.Unlock()
	if lifts == 0 {
		t.Errorf("the initiator never lifted its user timeout")
	}
	if err := b.qp.PostRecv(verbs.RecvWR{WRID: 2, SGL: []verbs.SGE{dmr.SGE(0, n)}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wcs := make([]verbs.WC, 1)
	if _, err := a.cq.Wait(ctx, wcs, 1); err != nil {
		t.Fatal(err)
	}
	if wcs[0].Status != verbs.StatusSuccess {
		t.Fatalf("SEND: %+v, %v", wcs[0], a.qp.Err())
	}
}
