package tcp

import (
	"context"
	"testing"
	"time"

	"github.com/exsgo/exs/verbs"
)

// readFPDU reads the provider's next FPDU at the raw peer, skipping its
// answers to the raw peer's fences.
func (h *hostile) readFPDU() (header, []byte) {
	h.t.Helper()
	for {
		hd, err := h.dec.next()
		if err != nil {
			h.t.Fatalf("reading the provider's FPDUs: %v", err)
		}
		p := make([]byte, hd.payload)
		if err := h.dec.readFull(p); err != nil {
			h.t.Fatal(err)
		}
		if err := h.dec.end(); err != nil {
			h.t.Fatalf("the provider's FPDU: %v", err)
		}
		if hd.op != opReadResp {
			return *hd, p
		}
	}
}

// expectFence reads the provider's next FPDU, which must be a fence, and
// answers it.
func (h *hostile) expectFence() {
	h.t.Helper()
	hd, p := h.readFPDU()
	if hd.op != opReadReq {
		h.t.Fatalf("opcode %d, want a fence (RDMA Read Request)", hd.op)
	}
	rr := parseReadRequest(p)
	if !rr.fence() && rr.srcTO&rtrMask != rtrMagic {
		h.t.Fatalf("RDMA Read Request %+v, want a fence", rr)
	}
	h.frame(tagged(opReadResp, rr.sinkSTag, rr.sinkTO, true), nil)
}

// TestUnsignaledFence: an unsignaled SEND goes without a fence of its own;
// one follows lazyConfirm later if nothing else brought one. A signaled
// SEND posted after unsignaled ones carries the one fence that confirms
// them all, and completes only once it is answered. A disconnect flushes
// an unsignaled SEND not yet confirmed, with a completion of its own.
func TestUnsignaledFence(t *testing.T) {
	h := newHostile(t, hostileOpts{policy: verbs.RNRFail})
	h.expectFence() // the provider's ready-to-receive
	post := func(id uint64, flags verbs.SendFlags) {
		t.Helper()
		if err := h.qp.PostSend(verbs.SendWR{WRID: id, Opcode: verbs.OpSend, Flags: flags, SGL: []verbs.SGE{h.rw.mr.SGE(0, 8)}}); err != nil {
			t.Fatal(err)
		}
	}
	expectSend := func(msn uint32) {
		t.Helper()
		if hd, _ := h.readFPDU(); hd.op != opSend || hd.msn != msn {
			t.Fatalf("opcode %d MSN %d, want a SEND with MSN %d", hd.op, hd.msn, msn)
		}
	}
	wcs := make([]verbs.WC, 4)

	// Alone, a fence lazyConfirm later.
	start := time.Now()
	post(1, 0)
	expectSend(1)
	h.expectFence()
	if d := time.Since(start); d < lazyConfirm {
		t.Errorf("fence %v after an unsignaled SEND, want one after %v", d, lazyConfirm)
	}

	// Unsignaled then signaled: one fence for both.
	post(2, 0)
	post(3, verbs.Signaled)
	expectSend(2)
	expectSend(3)
	time.Sleep(5 * time.Millisecond)
	if n := h.cq.Poll(wcs); n != 0 {
		t.Fatalf("completions %+v before the fence was answered", wcs[:n])
	}
	h.expectFence()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if n, err := h.cq.Wait(ctx, wcs, 1); err != nil || n != 1 || wcs[0].WRID != 3 || wcs[0].Status != verbs.StatusSuccess {
		t.Fatalf("completions %+v (%v), want WR 3's success alone", wcs[:n], err)
	}

	// Not yet confirmed at the peer's end: flushed.
	post(4, 0)
	expectSend(4)
	h.conn.Close()
	if n, err := h.cq.Wait(ctx, wcs, 1); err != nil || wcs[0].WRID != 4 || wcs[0].Status != verbs.StatusFlushed {
		t.Fatalf("completions %+v (%v), want WR 4 flushed", wcs[:n], err)
	}
}
