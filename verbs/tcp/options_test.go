//go:build linux

package tcp

import (
	"context"
	"testing"
	"time"

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
