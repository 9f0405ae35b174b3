//go:build linux

package tcp

import (
	"context"
	"testing"
	"time"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// TestOptions connects two providers and checks what their options set
// on each end: the congestion control (which the benchmarks rely on to
// compare with raw TCP), the segment size, and CRCs used when one side
// asks for them.
func TestOptions(t *testing.T) {
	for _, c := range []struct {
		name               string
		dialer, listener   []Option
		crc                bool
		cc                 string
		ulpduDial, ulpduLn int
	}{
		{"cubic", []Option{WithCongestionControl("cubic")}, []Option{WithCongestionControl("cubic")}, true, "cubic", 0, 0},
		{"crc-dialer", []Option{WithSegmentSize(1000)}, []Option{WithoutCRC()}, true, "", 1000, 0},
		{"crc-listener", []Option{WithoutCRC()}, []Option{WithSegmentSize(100)}, true, "", 0, 100},
		{"no-crc", []Option{WithoutCRC()}, []Option{WithoutCRC()}, false, "", 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			pd, pl := New(c.dialer...), New(c.listener...)
			defer pd.Close()
			defer pl.Close()
			mk := func(p *Provider) (*verbs.Device, *verbs.QP) {
				d, _ := verbs.Open(p)
				pdom, _ := d.AllocPD()
				cq, _ := d.CreateCQ(8, verbs.CQOptions{})
				qp, err := pdom.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq})
				if err != nil {
					t.Fatal(err)
				}
				return d, qp
			}
			dd, qd := mk(pd)
			defer dd.Close()
			dl, ql := mk(pl)
			defer dl.Close()
			ln, err := dl.Listen("tcp:127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			accepted := make(chan error, 1)
			go func() {
				req, err := ln.Accept(ctx)
				if err == nil {
					err = req.Accept(ql, nil)
				}
				accepted <- err
			}()
			if _, err := qd.Connect(ctx, ln.Addr(), nil); err != nil {
				t.Fatal(err)
			}
			if err := <-accepted; err != nil {
				t.Fatal(err)
			}
			for _, p := range []*Provider{pd, pl} {
				p.mu.Lock()
				if len(p.links) != 1 {
					t.Errorf("%d links, want 1", len(p.links))
				}
				for l := range p.links {
					if l.crc != c.crc {
						t.Errorf("CRC %v, want %v", l.crc, c.crc)
					}
					if c.cc != "" && congestion(l.fd) != c.cc {
						t.Errorf("congestion control %q, want %q", congestion(l.fd), c.cc)
					}
					want := 0
					if p == pd {
						want = c.ulpduDial
					} else {
						want = c.ulpduLn
					}
					if want != 0 && l.pay[0] != want-taggedHdr {
						t.Errorf("tagged payload per FPDU %d, want %d", l.pay[0], want-taggedHdr)
					}
				}
				p.mu.Unlock()
			}
		})
	}
}

func TestULPDUOf(t *testing.T) {
	for _, c := range []struct{ mss, want int }{
		{0, maxULPDU},       // not known
		{-1, maxULPDU},      // not known
		{100, 256},          // at least 256
		{536, 530},          // (536-8)&^3+2: length, ULPDU, CRC in 536
		{1448, 1442},        // Ethernet with timestamps
		{1449, 1442},        // padding to 4
		{32768, 32762},      // loopback, before the window grew
		{65483, 65474},      // loopback
		{1 << 20, maxULPDU}, // at most 65535
	} {
		if got := ulpduOf(c.mss); got != c.want {
			t.Errorf("ulpduOf(%d) = %d, want %d", c.mss, got, c.want)
		}
		if got := ulpduOf(c.mss); c.mss >= 256 && c.mss < 1<<16 && got+2+4+padOf(got) > c.mss {
			t.Errorf("ulpduOf(%d) = %d: its FPDU does not fit the segment", c.mss, got)
		}
	}
}

// TestPayloadFollowsMSS streams RDMA WRITEs over loopback and checks that
// the sender's payload per FPDU follows the connection's maximum segment
// size as it is after the window grew, not the one read at connect time.
func TestPayloadFollowsMSS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pd, pl := New(), New()
	defer pd.Close()
	defer pl.Close()
	type side struct {
		d  *verbs.Device
		pd *verbs.PD
		qp *verbs.QP
		cq *verbs.CQ
	}
	mk := func(p *Provider) side {
		d, _ := verbs.Open(p)
		pdom, _ := d.AllocPD()
		cq, _ := d.CreateCQ(64, verbs.CQOptions{})
		qp, err := pdom.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, SendDepth: 16})
		if err != nil {
			t.Fatal(err)
		}
		return side{d, pdom, qp, cq}
	}
	a, b := mk(pd), mk(pl)
	defer a.d.Close()
	defer b.d.Close()
	ln, err := b.d.Listen("tcp:127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	joinQPs(ctx, t, ln, b.qp, a.qp)
	pd.mu.Lock()
	var l *link
	for k := range pd.links {
		l = k
	}
	pd.mu.Unlock()
	l.mu.Lock()
	first := l.pay[0]
	l.mu.Unlock()
	const size = 1 << 20
	src, dst := make([]byte, size), make([]byte, size)
	smr, _ := a.pd.RegisterMR(src, 0)
	dmr, err := b.pd.RegisterMR(dst, mreg.LocalWrite|mreg.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	wcs := make([]verbs.WC, 1)
	for i := range 64 {
		if i > 0 {
			time.Sleep(mssRecheck / 4)
		}
		wr := verbs.SendWR{Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{smr.SGE(0, size)}, RKey: dmr.RKey(), RemoteAddr: dmr.Addr()}
		if err := a.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		if _, err := a.cq.Wait(ctx, wcs, 1); err != nil || wcs[0].Status != verbs.StatusSuccess {
			t.Fatalf("WRITE %d: %v %+v", i, err, wcs[0])
		}
	}
	l.mu.Lock()
	got := l.pay[0]
	l.mu.Unlock()
	want := ulpduOf(maxSegment(l.fd)) - taggedHdr
	t.Logf("tagged payload per FPDU: %d at connect time, %d after 64 MiB (MSS now %d)", first, got, maxSegment(l.fd))
	if got != want {
		t.Errorf("tagged payload per FPDU %d, want %d (the MSS now)", got, want)
	}
	if got <= first {
		t.Skipf("the MSS did not grow from %d", first)
	}
}
