package tcp

import (
	"context"
	"errors"
	"os"
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

// lazyTest is the lazyConfirm of the tests that post messages one after
// the other and expect no fence between them: with the default of 1 ms,
// a test descheduled between two posts on a loaded machine saw the
// first message's lone fence come first.
const lazyTest = 100 * time.Millisecond

// TestUnsignaledFence: an unsignaled SEND goes without a fence of its own;
// one follows lazyConfirm later if nothing else brought one. A signaled
// SEND posted after unsignaled ones carries the one fence that confirms
// them all, and completes only once it is answered. A disconnect flushes
// an unsignaled SEND not yet confirmed, with a completion of its own.
func TestUnsignaledFence(t *testing.T) {
	h := newHostile(t, hostileOpts{policy: verbs.RNRFail, lazy: lazyTest})
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
	if d := time.Since(start); d < lazyTest {
		t.Errorf("fence %v after an unsignaled SEND, want one after %v", d, lazyTest)
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

// TestUnsignaledRead: a READ posted after an unsignaled SEND follows it
// with no fence between them, and its response confirms the SEND too: no
// fence comes after it, where one would lazyConfirm after the SEND if the
// READ did not count.
func TestUnsignaledRead(t *testing.T) {
	h := newHostile(t, hostileOpts{policy: verbs.RNRFail, lazy: lazyTest})
	h.expectFence() // the provider's ready-to-receive
	wrs := []verbs.SendWR{
		{WRID: 1, Opcode: verbs.OpSend, SGL: []verbs.SGE{h.rw.mr.SGE(0, 8)}},
		{WRID: 2, Opcode: verbs.OpRead, Flags: verbs.Signaled, SGL: []verbs.SGE{h.rw.mr.SGE(0, 8)}, RKey: 7},
	}
	for _, wr := range wrs {
		if err := h.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
	}
	if hd, _ := h.readFPDU(); hd.op != opSend {
		t.Fatalf("opcode %d, want the SEND", hd.op)
	}
	hd, p := h.readFPDU()
	rr := parseReadRequest(p)
	if hd.op != opReadReq || rr.fence() || rr.size != 8 {
		t.Fatalf("opcode %d, request %+v: want the READ's request of 8 bytes", hd.op, rr)
	}
	h.frame(tagged(opReadResp, rr.sinkSTag, rr.sinkTO, true), []byte("readback"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wcs := make([]verbs.WC, 2)
	if n, err := h.cq.Wait(ctx, wcs, 1); err != nil || n != 1 || wcs[0].WRID != 2 || wcs[0].Status != verbs.StatusSuccess {
		t.Fatalf("completions %+v (%v), want the READ's success alone", wcs[:n], err)
	}
	h.conn.SetReadDeadline(time.Now().Add(2 * lazyTest))
	for {
		hd, err := h.dec.next()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := h.dec.readFull(make([]byte, hd.payload)); err != nil {
			t.Fatal(err)
		}
		if err := h.dec.end(); err != nil {
			t.Fatal(err)
		}
		if hd.op != opReadResp {
			t.Fatalf("opcode %d after the READ's response, want nothing but answers to fences", hd.op)
		}
	}
}

// TestRecordsBounded: unsignaled SENDs, each posted after the fence that
// confirms the one before it went out and before its answer came, so that
// the link never has every message confirmed: its records of the messages
// in flight stay bounded instead of growing with every message.
func TestRecordsBounded(t *testing.T) {
	h := newHostile(t, hostileOpts{policy: verbs.RNRFail})
	h.expectFence() // the provider's ready-to-receive
	post := func() {
		t.Helper()
		if err := h.qp.PostSend(verbs.SendWR{Opcode: verbs.OpSend, SGL: []verbs.SGE{h.rw.mr.SGE(0, 8)}}); err != nil {
			t.Fatal(err)
		}
		if hd, _ := h.readFPDU(); hd.op != opSend {
			t.Fatalf("opcode %d, want a SEND", hd.op)
		}
	}
	const rounds = 300
	post()
	for range rounds {
		// The timer's fence for the SEND in flight; the next SEND goes
		// out before the fence is answered.
		hd, p := h.readFPDU()
		rr := parseReadRequest(p)
		if hd.op != opReadReq || !rr.fence() {
			t.Fatalf("opcode %d, want a fence", hd.op)
		}
		post()
		h.frame(tagged(opReadResp, rr.sinkSTag, rr.sinkTO, true), nil)
	}
	l := h.link()
	l.mu.Lock()
	held, size := len(l.recs)-l.rh, cap(l.recs)
	l.mu.Unlock()
	if size > 4*compactRecs {
		t.Errorf("after %d messages, %d of them in flight, the link's records take room for %d", rounds+1, held, size)
	}
}
