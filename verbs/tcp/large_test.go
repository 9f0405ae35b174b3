//go:build linux

package tcp_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/tcp"
)

// TestLargeMessages moves SENDs and WRITEs of several FPDUs, with and
// without immediate data, CRCs on and off: Transmit computes their CRCs
// after it queued their FPDUs, outside the link's mutex, while the
// goroutine writing may write the FPDUs before them; a CRC the receiver
// finds wrong ends the connection with a Terminate, and the message
// fails.
func TestLargeMessages(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	for _, mode := range []struct {
		name string
		opts []tcp.Option
	}{{"crc", nil}, {"nocrc", []tcp.Option{tcp.WithoutCRC()}}} {
		t.Run(mode.name, func(t *testing.T) {
			bp := newBenchPair(t, mode.opts...)
			const max = 1<<20 + 7
			src, dst, smr, dmr := bp.regions(t, max)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			wcs := make([]verbs.WC, 1)
			for _, op := range []verbs.Opcode{verbs.OpSend, verbs.OpSendWithImm, verbs.OpWrite, verbs.OpWriteWithImm} {
				for _, n := range []int{1, 4<<10 + 1, 100<<10 + 3, 1 << 20, max} {
					for i := range src[:n] {
						src[i] = byte(rng.Uint32())
					}
					clear(dst)
					if op != verbs.OpWrite {
						if err := bp.qb.PostRecv(verbs.RecvWR{WRID: 2, SGL: []verbs.SGE{dmr.SGE(0, max)}}); err != nil {
							t.Fatal(err)
						}
					}
					wr := verbs.SendWR{WRID: 1, Opcode: op, Imm: 7, Flags: verbs.Signaled, SGL: []verbs.SGE{smr.SGE(0, n)}, RKey: dmr.RKey(), RemoteAddr: dmr.Addr()}
					if err := bp.qa.PostSend(wr); err != nil {
						t.Fatal(err)
					}
					if _, err := bp.cqa.Wait(ctx, wcs, 1); err != nil {
						t.Fatal(err)
					}
					if wcs[0].Status != verbs.StatusSuccess {
						t.Fatalf("%v of %d bytes: completion %+v", op, n, wcs[0])
					}
					if op != verbs.OpWrite {
						if _, err := bp.cqb.Wait(ctx, wcs, 1); err != nil {
							t.Fatal(err)
						}
						if wcs[0].Status != verbs.StatusSuccess {
							t.Fatalf("%v of %d bytes: receive completion %+v", op, n, wcs[0])
						}
					}
					if !bytes.Equal(dst[:n], src[:n]) || bytes.Count(dst[n:], []byte{0}) != max-n {
						t.Fatalf("%v of %d bytes: the target's memory differs from the source's", op, n)
					}
				}
			}
		})
	}
}

// TestWriterWakesForRoom posts WRITEs of 256 KiB back to back, 32 at a
// time, so that a Transmit's writev, made with the link's mutex released,
// often meets a full socket while the writer goroutine waits for room: if
// the writer, woken for room while that writev is in flight, waited for
// room again instead of for the writev's end, nothing more woke it and
// the WRITEs stalled (in 3 of 3 runs of 3000 rounds).
func TestWriterWakesForRoom(t *testing.T) {
	bp := newBenchPair(t, tcp.WithoutCRC())
	const n, k = 256 << 10, 32
	_, _, smr, dmr := bp.regions(t, n)
	wcs := make([]verbs.WC, k)
	end := time.Now().Add(3 * time.Second)
	for round := 0; time.Now().Before(end); round++ {
		for i := range k {
			wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{smr.SGE(0, n)}, RKey: dmr.RKey(), RemoteAddr: dmr.Addr()}
			if err := bp.qa.PostSend(wr); err != nil {
				t.Fatal(err)
			}
		}
		for got := 0; got < k; {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			m, err := bp.cqa.Wait(ctx, wcs, 1)
			cancel()
			if err != nil {
				t.Fatalf("round %d: %d of %d WRITEs completed: %v", round, got, k, err)
			}
			for _, wc := range wcs[:m] {
				if wc.Status != verbs.StatusSuccess {
					t.Fatalf("round %d: completion %+v", round, wc)
				}
			}
			got += m
		}
	}
}

// regions registers n bytes at each end: src at the initiator, readable,
// and dst at the target, which the initiator may write.
func (bp *benchPair) regions(t *testing.T, n int) (src, dst []byte, smr, dmr *verbs.MR) {
	t.Helper()
	src, dst = make([]byte, n), make([]byte, n)
	smr, err := bp.pda.RegisterMR(src, 0)
	if err != nil {
		t.Fatal(err)
	}
	dmr, err = bp.pdb.RegisterMR(dst, mreg.LocalWrite|mreg.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	return src, dst, smr, dmr
}
