package tcp

import (
	"context"
	"errors"
	"io"
	"maps"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// TestDisconnectAnswersLateFence: a side that disconnects right after a
// SEND was delivered still answers the fence that confirms it when the
// fence comes a moment later (the sender's writer goroutine, or its lazy
// fence, was slower than the receiving application's close), and only
// then ends its stream. Otherwise the sender's SEND fails with the
// connection although its target had it: a peer that received everything
// and closed would fail the sender's last sends (exs's orderly end).
func TestDisconnectAnswersLateFence(t *testing.T) {
	h := newHostile(t, hostileOpts{crc: true, policy: verbs.RNRWait, recvs: 1})
	msg := []byte("the last one")
	h.frame(untagged(opSend, qnSend, 1, 0, true), msg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wcs := make([]verbs.WC, 4)
	if n, err := h.cq.Wait(ctx, wcs, 1); err != nil || n != 1 || wcs[0].Status != verbs.StatusSuccess {
		t.Fatalf("the RECV: %+v: %v", wcs[:n], err)
	}
	if err := h.qp.Disconnect(); err != nil {
		t.Fatal(err)
	}
	// The fence goes once the receiver, interrupted by the disconnect, is
	// in its grace: one that only looked at what the socket held found
	// nothing there and ended the stream.
	l := h.link()
	for {
		l.mu.Lock()
		grace := l.grace
		l.mu.Unlock()
		if grace {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the receiver never entered its grace after the disconnect")
		}
		time.Sleep(time.Millisecond)
	}
	const sink = 0x80000002
	h.write(fpdu(h.crc, untagged(opReadReq, qnRead, 2, 0, true), (&readRequest{sinkSTag: sink}).put(make([]byte, readReqLen))))
	answered := false
	for {
		hd, err := h.dec.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading the provider's FPDUs: %v", err)
		}
		if hd.op == opReadResp && hd.stag == sink {
			answered = true
		}
		if err := h.dec.discard(); err != nil {
			t.Fatal(err)
		}
		if err := h.dec.end(); err != nil {
			t.Fatal(err)
		}
	}
	if !answered {
		t.Errorf("the provider ended its stream without answering the fence after the SEND it delivered")
	}
}

// TestDisconnectFencesUnsignaled: a disconnect right after an unsignaled
// SEND, whose fence would have gone lazyConfirm later, sends that fence
// before the end of the stream: the peer, which waits for the fence
// after a message it delivered before it ends its own stream, then needs
// no wait for the linger time, also when both ends disconnect at once.
func TestDisconnectFencesUnsignaled(t *testing.T) {
	h := newHostile(t, hostileOpts{policy: verbs.RNRFail, lazy: time.Hour})
	h.expectFence() // the provider's ready-to-receive
	if err := h.qp.PostSend(verbs.SendWR{WRID: 1, Opcode: verbs.OpSend, SGL: []verbs.SGE{h.rw.mr.SGE(0, 8)}}); err != nil {
		t.Fatal(err)
	}
	if hd, _ := h.readFPDU(); hd.op != opSend {
		t.Fatalf("opcode %d, want the SEND", hd.op)
	}
	if err := h.qp.Disconnect(); err != nil {
		t.Fatal(err)
	}
	hd, p := h.readFPDU()
	if rr := parseReadRequest(p); hd.op != opReadReq || !rr.fence() {
		t.Fatalf("opcode %d, request %+v after the disconnect: want a fence", hd.op, rr)
	}
	if _, err := h.dec.next(); err != io.EOF {
		t.Fatalf("after the fence: %v, want the end of the stream", err)
	}
}

// TestBothDisconnectAtOnce: two ends that each delivered the other's
// unsignaled SEND disconnect at once; each waits for the fence after the
// SEND it delivered, which the other sends at its disconnect, so both
// connections end without waiting for the linger time (an hour here).
func TestBothDisconnectAtOnce(t *testing.T) {
	pa, pb := New(WithLinger(time.Hour)), New(WithLinger(time.Hour))
	pa.opts.lazy, pb.opts.lazy = time.Hour, time.Hour
	a, b := connectPair(t, pa, pb)
	for _, e := range []end{a, b} {
		buf := make([]byte, 8)
		mr, err := e.pd.RegisterMR(buf, mreg.LocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.qp.PostRecv(verbs.RecvWR{WRID: 1, SGL: []verbs.SGE{mr.SGE(0, 8)}}); err != nil {
			t.Fatal(err)
		}
		if err := e.qp.PostSend(verbs.SendWR{WRID: 2, Opcode: verbs.OpSend, SGL: []verbs.SGE{mr.SGE(0, 8)}}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wcs := make([]verbs.WC, 4)
	for _, e := range []end{a, b} {
		if n, err := e.cq.Wait(ctx, wcs, 1); err != nil || n != 1 || wcs[0].WRID != 1 || wcs[0].Status != verbs.StatusSuccess {
			t.Fatalf("the RECV: %+v: %v", wcs[:n], err)
		}
	}
	a.qp.Disconnect()
	b.qp.Disconnect()
	for who, p := range map[string]*Provider{"a": pa, "b": pb} {
		for {
			p.mu.Lock()
			links := slices.Collect(maps.Keys(p.links))
			p.mu.Unlock()
			if len(links) == 0 {
				break
			}
			if ctx.Err() != nil {
				for _, l := range links {
					l.abort() // so that the providers' Close does not wait
				}
				t.Fatalf("%s: the connection is still ending after 10 s", who)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// TestStreamEndsInsideSend: a peer whose stream ends between the FPDUs of
// a SEND (it went after the first segments, as a disconnect in the middle
// of a long message leaves it) never completes the RECV with part of the
// message: the RECV is flushed, and the queue pair's cause is the peer's
// disconnect (ECONNRESET), not a violation.
func TestStreamEndsInsideSend(t *testing.T) {
	h := newHostile(t, hostileOpts{crc: true, policy: verbs.RNRWait, recvs: 1, recvSize: 64})
	h.frame(untagged(opSend, qnSend, 1, 0, false), []byte("the first half"))
	if err := h.conn.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wcs := make([]verbs.WC, 4)
	n, err := h.cq.Wait(ctx, wcs, 1)
	if err != nil || n != 1 || wcs[0].Status != verbs.StatusFlushed {
		t.Fatalf("the RECV: %+v (%v), want it flushed", wcs[:n], err)
	}
	<-h.qp.Done()
	if err := h.qp.Err(); !errors.Is(err, verbs.ErrDisconnected) || !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("queue pair's error %v, want the peer's disconnect", err)
	}
}
