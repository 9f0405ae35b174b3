//go:build linux

package shm_test

import (
	"context"
	"testing"
	"time"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/verbstest"
)

// TestLargeTransfers moves large WRITEs, READs and SENDs in every mode and
// checks the bytes, so that messages spanning many ring records (without
// cross-memory attach) and vectored copies (with it) are exercised.
func TestLargeTransfers(t *testing.T) {
	for _, mode := range []string{"default", "direct", "ring", "nocma", "nocma-default"} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), verbstest.Timeout)
			defer cancel()
			dir := sockDir(t)
			a, b := newProvider(modeOptions(mode)...), newProvider(modeOptions(mode)...)
			qa, qb := connectPair(t, ctx, a, b, "shm:"+dir+"/s")
			const n = 3<<20 + 123
			srcBuf, dstBuf, rbuf := make([]byte, n), make([]byte, n), make([]byte, n)
			for i := range srcBuf {
				srcBuf[i] = byte(i * 7)
			}
			src, _ := qa.PD().RegisterMR(srcBuf, mreg.LocalWrite)
			dst, _ := qb.PD().RegisterMR(dstBuf, mreg.LocalWrite|mreg.RemoteWrite|mreg.RemoteRead)
			rmr, _ := qb.PD().RegisterMR(rbuf, mreg.LocalWrite)
			if err := qb.PostRecv(verbs.RecvWR{WRID: 1, SGL: []verbs.SGE{rmr.SGE(0, n/2), rmr.SGE(n/2, n-n/2)}}); err != nil {
				t.Fatal(err)
			}
			half := n / 2
			wrs := []verbs.SendWR{
				{WRID: 1, Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{src.SGE(0, half), src.SGE(half, n-half)}, RKey: dst.RKey(), RemoteAddr: dst.Addr()},
				{WRID: 2, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{src.SGE(0, n)}},
				{WRID: 3, Opcode: verbs.OpRead, Flags: verbs.Signaled, SGL: []verbs.SGE{src.SGE(0, 100), src.SGE(100, n-100)}, RKey: dst.RKey(), RemoteAddr: dst.Addr()},
			}
			start := time.Now()
			cq := qa.Config().SendCQ
			wcs := make([]verbs.WC, 1)
			for _, wr := range wrs {
				t0 := time.Now()
				if err := qa.PostSend(wr); err != nil {
					t.Fatal(err)
				}
				if _, err := cq.Wait(ctx, wcs, 1); err != nil {
					t.Fatalf("%v: %v", wr.Opcode, err)
				}
				if wcs[0].Status != verbs.StatusSuccess {
					t.Fatalf("completion %+v", wcs[0])
				}
				t.Logf("%v: %v", wr.Opcode, time.Since(t0))
			}
			t.Logf("%v for %d bytes three times", time.Since(start), n)
			for i := range n {
				if dstBuf[i] != byte(i*7) || rbuf[i] != byte(i*7) || srcBuf[i] != byte(i*7) {
					t.Fatalf("byte %d: dst %d recv %d src %d, want %d", i, dstBuf[i], rbuf[i], srcBuf[i], byte(i*7))
				}
			}
		})
	}
}
