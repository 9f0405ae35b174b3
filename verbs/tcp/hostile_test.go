//go:build linux

package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"maps"
	"math"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/verbstest"
)

// Tests with a hostile peer: raw TCP that speaks MPA and then sends, one
// violation per test, what a broken or malicious iWARP peer could send.
// Each checks the Terminate that comes back (layer, error type, code), that
// the queue pair moved to Error and flushed its RECVs, that the connection
// was closed after the Terminate, and that no byte changed in the target
// regions nor in the guard bytes around them.

const (
	hostileRegion = 64
	guard         = verbstest.Guard
)

// guarded is a registered region with guard bytes on both sides.
type guarded struct {
	buf []byte // guard | region | guard
	mr  *verbs.MR
}

func (g *guarded) region() []byte { return g.buf[guard : len(g.buf)-guard] }

// untouched reports whether the region still holds FillByte and the
// guards GuardByte.
func (g *guarded) untouched() bool {
	for i, b := range g.buf {
		want := byte(verbstest.GuardByte)
		if i >= guard && i < len(g.buf)-guard {
			want = verbstest.FillByte
		}
		if b != want {
			return false
		}
	}
	return true
}

// hostile is a queue pair accepted by the provider with a raw peer.
type hostile struct {
	t      *testing.T
	p      *Provider
	qp     *verbs.QP
	cq     *verbs.CQ
	rw, ro *guarded // remote read/write, and remote read only
	recv   *guarded // the RECV's buffer
	conn   *net.TCPConn
	dec    decoder
	crc    bool
	// recvStatus is the status the RECV completes with: flushed (zero),
	// or the error of a SEND that reached it, whose bytes may then be
	// in its buffer (never beyond it).
	recvStatus verbs.Status
	recvs      int // RECVs posted
}

type hostileOpts struct {
	crc      bool            // the raw peer asks for CRCs
	policy   verbs.RNRPolicy // announced in the raw peer's RTR; 0 sends none
	recvs    int             // RECVs posted
	recvSize int
	lazy     time.Duration // the provider's lazyConfirm, if not 0
}

// link returns the provider's one link, the raw peer's.
func (h *hostile) link() *link {
	h.t.Helper()
	h.p.mu.Lock()
	links := slices.Collect(maps.Keys(h.p.links))
	h.p.mu.Unlock()
	if len(links) != 1 {
		h.t.Fatalf("%d links, want 1", len(links))
	}
	return links[0]
}

// newHostile sets up a queue pair accepted from a raw peer that asked for
// o's CRC setting and sent its ready-to-receive message.
func newHostile(t *testing.T, o hostileOpts) *hostile {
	t.Helper()
	p := New(WithLinger(time.Second))
	if o.lazy > 0 {
		p.opts.lazy = o.lazy
	}
	t.Cleanup(func() { p.Close() })
	dev, err := verbs.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := dev.CreateCQ(64, verbs.CQOptions{})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	reg := func(n int, access mreg.Access) *guarded {
		g := &guarded{buf: bytes.Repeat([]byte{verbstest.GuardByte}, n+2*guard)}
		copy(g.region(), bytes.Repeat([]byte{verbstest.FillByte}, n))
		if g.mr, err = pd.RegisterMR(g.region(), access); err != nil {
			t.Fatal(err)
		}
		return g
	}
	h := &hostile{t: t, p: p, qp: qp, cq: cq, crc: o.crc, recvs: o.recvs}
	h.rw = reg(hostileRegion, mreg.LocalWrite|mreg.RemoteWrite|mreg.RemoteRead)
	h.ro = reg(hostileRegion, mreg.LocalWrite|mreg.RemoteRead)
	size := max(o.recvSize, 16)
	h.recv = reg(size, mreg.LocalWrite)
	for i := range o.recvs {
		if err := qp.PostRecv(verbs.RecvWR{WRID: uint64(100 + i), SGL: []verbs.SGE{h.recv.mr.SGE(0, size)}}); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := dev.Listen("tcp:127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, err := ln.Accept(ctx)
		if err == nil {
			err = req.Accept(qp, []byte("welcome"))
		}
		accepted <- err
	}()
	hp, _ := parseAddr(ln.Addr())
	c, err := net.Dial("tcp", hp)
	if err != nil {
		t.Fatal(err)
	}
	h.conn = c.(*net.TCPConn)
	t.Cleanup(func() { h.conn.Close() })
	h.conn.SetDeadline(time.Now().Add(10 * time.Second))
	h.write(appendMPA(nil, mpaFrame{crc: o.crc, rev: mpaRevision, private: []byte("hostile")}))
	rep, err := readMPA(h.conn, true, new([mpaHdrLen + verbs.MaxPrivateData]byte))
	if err != nil || rep.reject || string(rep.private) != "welcome" {
		t.Fatalf("MPA reply %+v: %v", rep, err)
	}
	if o.crc && !rep.crc {
		t.Errorf("the reply does not set the CRC flag the request set")
	}
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	h.crc = rep.crc
	h.dec = decoder{r: h.conn, crc: h.crc}
	if o.policy != 0 {
		params := uint64(rtrMagic | rtrVersion)
		if o.policy == verbs.RNRFail {
			params |= rtrRNRFail
		}
		h.frame(untagged(opReadReq, qnRead, 1, 0, true), (&readRequest{srcTO: params}).put(make([]byte, readReqLen)))
	}
	return h
}

func (h *hostile) write(b []byte) {
	h.t.Helper()
	if _, err := h.conn.Write(b); err != nil {
		h.t.Fatalf("raw peer write: %v", err)
	}
}

// untagged and tagged return an FPDU header (length filled in by frame).
func untagged(op uint8, qn, msn, mo uint32, last bool) []byte {
	return putUntagged(make([]byte, 2+untaggedHdr), op, last, qn, msn, mo, 0)
}

func tagged(op uint8, stag uint32, to uint64, last bool) []byte {
	return putTagged(make([]byte, 2+taggedHdr), op, last, stag, to, 0)
}

// fpdu returns an FPDU of header h (its length set) and payload.
func fpdu(crc bool, h, payload []byte) []byte {
	b := append(append([]byte(nil), h...), payload...)
	binary.BigEndian.PutUint16(b, uint16(len(b)-2))
	var tb [8]byte
	return append(b, trailer(tb[:], crcOf(b), len(b)-2, crc)...)
}

// frame writes one FPDU.
func (h *hostile) frame(hdr, payload []byte) {
	h.t.Helper()
	h.write(fpdu(h.crc, hdr, payload))
}

// expectTerminate reads FPDUs until a Terminate, checks its codes, and
// then that the provider closes the connection; then that the queue pair
// is in Error, its RECVs flushed, and the regions untouched. It returns
// the Terminate.
func (h *hostile) expectTerminate(layer, etype, code uint8) termInfo {
	h.t.Helper()
	var tm termInfo
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
		if hd.op != opTerminate {
			continue
		}
		if hd.qn != qnTerm || hd.msn != 1 || !hd.last {
			h.t.Errorf("Terminate on queue %d MSN %d (L %v), want queue 2, MSN 1, L", hd.qn, hd.msn, hd.last)
		}
		if tm, err = parseTerm(p); err != nil {
			h.t.Fatal(err)
		}
		if tm.layer != layer || tm.etype != etype || tm.code != code {
			h.t.Errorf("Terminate layer %d, type %d, code %#x; want %d, %d, %#x", tm.layer, tm.etype, tm.code, layer, etype, code)
		}
		break
	}
	h.expectClosed()
	return tm
}

// expectClosed checks that the provider closes the connection (with
// nothing but FPDUs before its end), that the queue pair is in Error with
// its RECVs flushed, and that the regions are untouched.
func (h *hostile) expectClosed() {
	h.t.Helper()
	for {
		if _, err := h.dec.next(); err != nil {
			if err != io.EOF {
				h.t.Errorf("after the Terminate: %v, want the end of the stream", err)
			}
			break
		}
		if err := h.dec.discard(); err != nil {
			h.t.Fatal(err)
		}
		if err := h.dec.end(); err != nil {
			h.t.Fatal(err)
		}
	}
	select {
	case <-h.qp.Done():
	case <-time.After(10 * time.Second):
		h.t.Fatalf("queue pair in %v, want Error", h.qp.State())
	}
	if err := h.qp.Err(); !errors.Is(err, verbs.ErrTerminated) {
		h.t.Errorf("queue pair's error %v, want ErrTerminated", err)
	}
	h.checkMemory()
}

// checkMemory checks the regions and their guards, and the RECVs'
// completions.
func (h *hostile) checkMemory() {
	h.t.Helper()
	for _, g := range []*guarded{h.rw, h.ro, h.recv} {
		if g == h.recv && h.recvStatus != 0 {
			if !bytes.Equal(g.buf[:guard], g.buf[len(g.buf)-guard:]) || g.buf[0] != verbstest.GuardByte || bytes.Count(g.buf[:guard], g.buf[:1]) != guard {
				h.t.Errorf("guard bytes of the receive buffer changed: %x", g.buf)
			}
			continue
		}
		if !g.untouched() {
			h.t.Errorf("memory changed: %x", g.buf)
		}
	}
	want := h.recvStatus
	if want == 0 {
		want = verbs.StatusFlushed
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wcs := make([]verbs.WC, 8)
	n, err := h.cq.Wait(ctx, wcs, h.recvs)
	if err != nil || n != h.recvs {
		h.t.Errorf("%d completions of %d RECVs: %v", n, h.recvs, err)
	}
	for _, wc := range wcs[:n] {
		if wc.Status != want {
			h.t.Errorf("completion %+v, want status %v", wc, want)
		}
	}
}

// readRequest returns a Read Request's payload.
func readReq(stag uint32, to uint64, size uint32) []byte {
	return (&readRequest{sinkSTag: 0x80000001, size: size, srcSTag: stag, srcTO: to}).put(make([]byte, readReqLen))
}

// TestHostilePeer sends each violation in turn.
func TestHostilePeer(t *testing.T) {
	type env = hostile
	rkey := func(h *env) uint32 { return uint32(h.rw.mr.RKey()) }
	addr := func(h *env) uint64 { return h.rw.mr.Addr() }
	cases := []struct {
		name               string
		o                  hostileOpts
		send               func(h *env)
		layer, etype, code uint8
		recv               verbs.Status // the RECV's status: flushed unless the SEND reached it
	}{
		{"WriteForgedSTag", hostileOpts{crc: true, recvs: 1}, func(h *env) {
			h.frame(tagged(opWrite, rkey(h)^0x10000, addr(h), true), []byte("12345678"))
		}, layerDDP, etypeTagged, codeTInvalidSTag, 0},
		{"WriteZeroSTag", hostileOpts{crc: true, recvs: 1}, func(h *env) {
			h.frame(tagged(opWrite, 0, addr(h), true), []byte("12345678"))
		}, layerDDP, etypeTagged, codeTInvalidSTag, 0},
		{"WriteLKey", hostileOpts{crc: true, recvs: 1}, func(h *env) {
			h.frame(tagged(opWrite, uint32(h.rw.mr.LKey()), addr(h), true), []byte("12345678"))
		}, layerRDMAP, etypeRemoteProtection, codeAccess, 0},
		{"WritePastEnd", hostileOpts{crc: true, recvs: 1}, func(h *env) {
			h.frame(tagged(opWrite, rkey(h), addr(h)+hostileRegion-4, true), []byte("12345678"))
		}, layerDDP, etypeTagged, codeTBounds, 0},
		{"WriteBeforeStart", hostileOpts{crc: true, recvs: 1}, func(h *env) {
			h.frame(tagged(opWrite, rkey(h), addr(h)-1, true), []byte("12"))
		}, layerDDP, etypeTagged, codeTBounds, 0},
		{"WriteTOWraps", hostileOpts{crc: true, recvs: 1}, func(h *env) {
			h.frame(tagged(opWrite, rkey(h), math.MaxUint64-3, true), []byte("12345678"))
		}, layerDDP, etypeTagged, codeTTOWrap, 0},
		{"WriteNoRight", hostileOpts{crc: true, recvs: 1}, func(h *env) {
			h.frame(tagged(opWrite, uint32(h.ro.mr.RKey()), h.ro.mr.Addr(), true), []byte("12345678"))
		}, layerRDMAP, etypeRemoteProtection, codeAccess, 0},
		{"WriteSecondSegmentPastEnd", hostileOpts{crc: true, recvs: 1}, func(h *env) {
			// The first segment is placed (inside the region), the
			// second refused: checked below with the region's image.
			h.frame(tagged(opWrite, rkey(h), addr(h)+hostileRegion-8, false), []byte("abcdefgh"))
			h.frame(tagged(opWrite, rkey(h), addr(h)+hostileRegion, true), []byte("X"))
		}, layerDDP, etypeTagged, codeTBounds, 0},
		{"ReadForgedSTag", hostileOpts{crc: true, policy: verbs.RNRWait, recvs: 1}, func(h *env) {
			h.frame(untagged(opReadReq, qnRead, 2, 0, true), readReq(rkey(h)^0x10000, addr(h), 8))
		}, layerRDMAP, etypeRemoteProtection, codeInvalidSTag, 0},
		{"ReadPastEnd", hostileOpts{crc: true, policy: verbs.RNRWait, recvs: 1}, func(h *env) {
			h.frame(untagged(opReadReq, qnRead, 2, 0, true), readReq(rkey(h), addr(h)+60, 8))
		}, layerRDMAP, etypeRemoteProtection, codeBounds, 0},
		{"ReadNoRight", hostileOpts{crc: true, policy: verbs.RNRWait, recvs: 1}, func(h *env) {
			h.frame(untagged(opReadReq, qnRead, 2, 0, true), readReq(uint32(h.recv.mr.RKey()), h.recv.mr.Addr(), 8))
		}, layerRDMAP, etypeRemoteProtection, codeAccess, 0},
		{"ReadTooLong", hostileOpts{crc: true, policy: verbs.RNRWait, recvs: 1}, func(h *env) {
			h.frame(untagged(opReadReq, qnRead, 2, 0, true), readReq(rkey(h), addr(h), 1<<31+1))
		}, layerDDP, etypeUntagged, codeUTooLong, 0},
		{"SendBadMSN", hostileOpts{crc: true, recvs: 1}, func(h *env) {
			h.frame(untagged(opSend, qnSend, 5, 0, true), []byte("hello"))
		}, layerDDP, etypeUntagged, codeUBadMSN, 0},
		{"ReadRequestBadMSN", hostileOpts{crc: true, recvs: 1}, func(h *env) {
			h.frame(untagged(opReadReq, qnRead, 9, 0, true), readReq(rkey(h), addr(h), 8))
		}, layerDDP, etypeUntagged, codeUBadMSN, 0},
		{"SendBadMO", hostileOpts{crc: true, recvs: 1}, func(h *env) {
			// The MO is read with the payload, placed where the first
			// segment's goes: the RECV is consumed and fails.
			h.frame(untagged(opSend, qnSend, 1, 4, true), []byte("hello"))
		}, layerDDP, etypeUntagged, codeUBadMO, verbs.StatusLocalQPOperationError},
		{"SendBadMOPastRecv", hostileOpts{crc: true, recvs: 1, recvSize: 16}, func(h *env) {
			// An MO far past the RECV's end: its bytes land at the
			// offset expected, inside the RECV, not at the one sent.
			h.frame(untagged(opSend, qnSend, 1, 1<<20, true), bytes.Repeat([]byte{'x'}, 16))
		}, layerDDP, etypeUntagged, codeUBadMO, verbs.StatusLocalQPOperationError},
		{"SendSegmentBadMOFullRecv", hostileOpts{crc: true, recvs: 1, recvSize: 16}, func(h *env) {
			// The RECV is full after the first segment: the second's
			// wrong MO is read with a byte that has no room in it.
			h.frame(untagged(opSend, qnSend, 1, 0, false), bytes.Repeat([]byte{'x'}, 16))
			h.frame(untagged(opSend, qnSend, 1, 15, true), bytes.Repeat([]byte{'y'}, 32))
		}, layerDDP, etypeUntagged, codeUBadMO, verbs.StatusLocalQPOperationError},
		{"SendBadMONoRecv", hostileOpts{crc: true, policy: verbs.RNRFail}, func(h *env) {
			// Refused for want of a RECV before its MO was read: the
			// MO is still checked first.
			h.frame(untagged(opSend, qnSend, 1, 4, true), []byte("hello"))
		}, layerDDP, etypeUntagged, codeUBadMO, 0},
		{"SendSegmentBadMO", hostileOpts{crc: true, recvs: 1, recvSize: 64}, func(h *env) {
			h.frame(untagged(opSend, qnSend, 1, 0, false), []byte("hello"))
			h.frame(untagged(opSend, qnSend, 1, 6, true), []byte("world"))
		}, layerDDP, etypeUntagged, codeUBadMO, verbs.StatusLocalQPOperationError},
		{"SendSegmentBadMSN", hostileOpts{crc: true, recvs: 1, recvSize: 64}, func(h *env) {
			h.frame(untagged(opSend, qnSend, 1, 0, false), []byte("hello"))
			h.frame(untagged(opSend, qnSend, 2, 5, true), []byte("world"))
		}, layerDDP, etypeUntagged, codeUBadMSN, verbs.StatusLocalQPOperationError},
		{"SendBadQN", hostileOpts{crc: true, recvs: 1}, func(h *env) {
			h.frame(untagged(opSend, 3, 1, 0, true), []byte("hello"))
		}, layerDDP, etypeUntagged, codeUInvalidQN, 0},
		{"UnknownOpcode", hostileOpts{crc: true, recvs: 1}, func(h *env) {
			h.frame(untagged(0xC, qnSend, 1, 0, true), []byte("hello"))
		}, layerRDMAP, etypeRemoteOperation, codeUnexpectedOp, 0},
		{"TaggedSend", hostileOpts{crc: true, recvs: 1}, func(h *env) {
			h.frame(tagged(opSend, rkey(h), addr(h), true), []byte("hello"))
		}, layerRDMAP, etypeRemoteOperation, codeUnexpectedOp, 0},
		{"SendWithInvalidate", hostileOpts{crc: true, recvs: 1}, func(h *env) {
			h.frame(untagged(opSendInv, qnSend, 1, 0, true), []byte("hello"))
		}, layerRDMAP, etypeRemoteOperation, codeUnexpectedOp, 0},
		{"UnexpectedReadResponse", hostileOpts{crc: true, recvs: 1}, func(h *env) {
			h.frame(tagged(opReadResp, 0x1234, 0, true), []byte("data"))
		}, layerDDP, etypeTagged, codeTInvalidSTag, 0},
		{"ImmediateWithoutWrite", hostileOpts{crc: true, recvs: 1}, func(h *env) {
			h.frame(untagged(opImm, qnSend, 1, 0, true), make([]byte, immLen))
		}, layerRDMAP, etypeRemoteOperation, codeUnexpectedOp, 0},
		{"DDPVersion", hostileOpts{crc: true, recvs: 1}, func(h *env) {
			b := untagged(opSend, qnSend, 1, 0, true)
			b[2] = b[2]&^0x03 | 0x02
			h.frame(b, []byte("hello"))
		}, layerDDP, etypeUntagged, codeUBadVersion, 0},
		{"DDPVersionTagged", hostileOpts{crc: true, recvs: 1}, func(h *env) {
			b := tagged(opWrite, rkey(h), addr(h), true)
			b[2] = b[2]&^0x03 | 0x00
			h.frame(b, []byte("hello"))
		}, layerDDP, etypeTagged, codeTBadVersion, 0},
		{"RDMAPVersion", hostileOpts{crc: true, recvs: 1}, func(h *env) {
			b := untagged(opSend, qnSend, 1, 0, true)
			b[3] = b[3]&^0xC0 | 0x80
			h.frame(b, []byte("hello"))
		}, layerRDMAP, etypeRemoteOperation, codeBadRDMAPVersion, 0},
		{"BadCRC", hostileOpts{crc: true, recvs: 1}, func(h *env) {
			b := fpdu(true, untagged(opSend, qnSend, 1, 0, true), []byte("hello"))
			b[len(b)-1] ^= 0x40
			h.write(b)
		}, layerLLP, etypeMPA, codeCRC, verbs.StatusLocalQPOperationError},
		{"BadCRCWrite", hostileOpts{crc: true, recvs: 1}, func(h *env) {
			// The payload is placed inside the region before the CRC
			// is read: the region may change, never its guards.
			b := fpdu(true, tagged(opWrite, rkey(h), addr(h), true), []byte("12345678"))
			b[len(b)-1] ^= 0x40
			h.write(b)
		}, layerLLP, etypeMPA, codeCRC, 0},
		{"TruncatedULPDU", hostileOpts{crc: true, recvs: 1}, func(h *env) {
			b := fpdu(true, untagged(opSend, qnSend, 1, 0, true), nil)
			binary.BigEndian.PutUint16(b, 10) // shorter than the DDP header
			h.write(b)
		}, layerLLP, etypeMPA, codeLengthField, 0},
		{"OversizedReadRequest", hostileOpts{crc: true, policy: verbs.RNRWait, recvs: 1}, func(h *env) {
			h.frame(untagged(opReadReq, qnRead, 2, 0, true), append(readReq(rkey(h), addr(h), 8), 0, 0, 0, 0))
		}, layerLLP, etypeMPA, codeLengthField, 0},
		{"ShortImmediate", hostileOpts{crc: true, recvs: 1}, func(h *env) {
			h.frame(untagged(opImm, qnSend, 1, 0, true), make([]byte, 4))
		}, layerLLP, etypeMPA, codeLengthField, 0},
		{"SendTooLong", hostileOpts{crc: true, recvs: 1, recvSize: 16}, func(h *env) {
			h.frame(untagged(opSend, qnSend, 1, 0, true), bytes.Repeat([]byte{'x'}, 17))
		}, layerDDP, etypeUntagged, codeUTooLong, verbs.StatusLocalLengthError},
		{"SendTooLongSegments", hostileOpts{crc: true, recvs: 1, recvSize: 16}, func(h *env) {
			h.frame(untagged(opSend, qnSend, 1, 0, false), bytes.Repeat([]byte{'x'}, 10))
			h.frame(untagged(opSend, qnSend, 1, 10, true), bytes.Repeat([]byte{'y'}, 10))
		}, layerDDP, etypeUntagged, codeUTooLong, verbs.StatusLocalLengthError},
		{"SendNoRecvRNRFail", hostileOpts{crc: true, policy: verbs.RNRFail}, func(h *env) {
			h.frame(untagged(opSend, qnSend, 1, 0, true), []byte("hello"))
		}, layerDDP, etypeUntagged, codeUNoBuffer, 0},
		{"SendNoRecvNoRTR", hostileOpts{crc: false}, func(h *env) {
			// A peer that says nothing gets iWARP's own rule.
			h.frame(untagged(opSend, qnSend, 1, 0, true), []byte("hello"))
		}, layerDDP, etypeUntagged, codeUNoBuffer, 0},
		{"NoCRCPeerBadCRC", hostileOpts{crc: false, recvs: 1}, func(h *env) {
			// Neither side asked for CRCs (WithoutCRC is not set here,
			// so the provider did): the CRC field is checked.
			b := fpdu(h.crc, untagged(opSend, qnSend, 1, 0, true), []byte("hello"))
			b[len(b)-2] ^= 1
			h.write(b)
		}, layerLLP, etypeMPA, codeCRC, verbs.StatusLocalQPOperationError},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHostile(t, c.o)
			h.recvStatus = c.recv
			c.send(h)
			if c.name == "WriteSecondSegmentPastEnd" || c.name == "BadCRCWrite" {
				h.expectTerminatePlaced(c.layer, c.etype, c.code)
				return
			}
			h.expectTerminate(c.layer, c.etype, c.code)
		})
	}
}

// expectTerminatePlaced is expectTerminate for a violation after which
// bytes inside the read-write region may have been placed: its guards, and
// every other region, are checked.
func (h *hostile) expectTerminatePlaced(layer, etype, code uint8) {
	h.t.Helper()
	rw := h.rw
	h.rw = &guarded{buf: append([]byte(nil), rw.buf...)} // skip it in checkMemory
	for i := range h.rw.region() {
		h.rw.region()[i] = verbstest.FillByte
	}
	h.expectTerminate(layer, etype, code)
	for i := range guard {
		if rw.buf[i] != verbstest.GuardByte || rw.buf[len(rw.buf)-1-i] != verbstest.GuardByte {
			h.t.Fatalf("guard bytes changed: %x", rw.buf)
		}
	}
}

// TestHostileLateMOCopy: the Terminate of a SEND refused before its
// payload was read, whose MO is read with the payload, carries the whole
// header it came with, MO included, and its code is that of a wrong MO
// before the refusal's; also when the MO comes after the refusal (the
// peer writes the FPDU in pieces, cut at cuts, a pause after each).
func TestHostileLateMOCopy(t *testing.T) {
	for _, c := range []struct {
		name string
		mo   uint32
		cuts []int
		code uint8
	}{
		{"NoRecv", 0, nil, codeUNoBuffer},
		{"NoRecvBadMO", 0x01020304, nil, codeUBadMO},
		{"NoRecvMOAfter", 0, []int{16}, codeUNoBuffer},
		{"NoRecvBadMOAfter", 0x01020304, []int{16}, codeUBadMO},
		{"NoRecvBadMOHalfAfter", 0x01020304, []int{16, 18}, codeUBadMO},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHostile(t, hostileOpts{crc: true, policy: verbs.RNRFail})
			hdr := untagged(opSend, qnSend, 1, c.mo, true)
			b := fpdu(h.crc, hdr, []byte("hello"))
			at := 0
			for _, cut := range c.cuts {
				h.write(b[at:cut])
				time.Sleep(50 * time.Millisecond) // the provider refuses the SEND meanwhile
				at = cut
			}
			h.write(b[at:])
			tm := h.expectTerminate(layerDDP, etypeUntagged, c.code)
			if diff := cmp.Diff(b[2:2+untaggedHdr], tm.hdr); diff != "" {
				t.Errorf("the Terminate's copy of the header (-sent +copy):\n%s", diff)
			}
			if want := binary.BigEndian.Uint16(b); tm.segLen != want {
				t.Errorf("segment length %d in the copy, sent %d", tm.segLen, want)
			}
		})
	}
}

// TestHostileHeldSend: a SEND that meets no RECV from a peer that asked
// for RNRWait is held, not refused, and delivered once a RECV is posted.
func TestHostileHeldSend(t *testing.T) {
	h := newHostile(t, hostileOpts{crc: true, policy: verbs.RNRWait})
	h.frame(untagged(opSend, qnSend, 1, 0, true), []byte("hello"))
	h.frame(untagged(opReadReq, qnRead, 2, 0, true), readReq(0, 0, 0)) // a fence
	time.Sleep(50 * time.Millisecond)
	if s := h.qp.State(); s != verbs.StateReadyToSend {
		t.Fatalf("state %v while the SEND waits", s)
	}
	if err := h.qp.PostRecv(verbs.RecvWR{WRID: 7, SGL: []verbs.SGE{h.recv.mr.SGE(0, 16)}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wcs := make([]verbs.WC, 1)
	if _, err := h.cq.Wait(ctx, wcs, 1); err != nil {
		t.Fatal(err)
	}
	if wcs[0].Status != verbs.StatusSuccess || wcs[0].ByteLen != 5 || !bytes.Equal(h.recv.region()[:5], []byte("hello")) {
		t.Errorf("completion %+v, buffer %q", wcs[0], h.recv.region()[:5])
	}
	// The fence behind it is answered: a zero-length Read Response.
	for {
		hd, err := h.dec.next()
		if err != nil {
			t.Fatal(err)
		}
		if err := h.dec.discard(); err != nil {
			t.Fatal(err)
		}
		if err := h.dec.end(); err != nil {
			t.Fatal(err)
		}
		if hd.op == opReadResp {
			if hd.payload != 0 || !hd.last {
				t.Errorf("fence answered with %+v", hd)
			}
			break
		}
	}
}

// TestHostileMPA: a request with more than 512 bytes of private data, a
// request of another revision and one that asks for markers are answered
// with the reject bit and closed; a peer that sends no request is
// disconnected after the handshake timeout; a dialer that gets a reply
// with more than 512 bytes of private data sends a Terminate (LLP, invalid
// MPA frame) and fails.
func TestHostileMPA(t *testing.T) {
	p := New(WithHandshakeTimeout(200 * time.Millisecond))
	defer p.Close()
	ll, err := p.Listen("tcp:127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ll.Close()
	hp, _ := parseAddr(ll.Addr())
	for _, c := range []struct {
		name  string
		frame []byte
	}{
		{"PrivateDataOver512", func() []byte {
			b := appendMPA(nil, mpaFrame{rev: mpaRevision, private: make([]byte, 513)})
			return b
		}()},
		{"Revision2", appendMPA(nil, mpaFrame{rev: 2})},
		{"Markers", appendMPA(nil, mpaFrame{markers: true, rev: mpaRevision})},
		{"ReplyKey", appendMPA(nil, mpaFrame{reply: true, rev: mpaRevision})},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", hp)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			conn.Write(c.frame)
			rep, err := readMPA(conn, true, new([mpaHdrLen + verbs.MaxPrivateData]byte))
			if err != nil || !rep.reject || len(rep.private) != 0 {
				t.Fatalf("reply %+v, %v; want a reject", rep, err)
			}
			if n, err := conn.Read(make([]byte, 1)); err != io.EOF {
				t.Errorf("after the reject: %d bytes, %v; want the end of the stream", n, err)
			}
		})
	}
	t.Run("Silent", func(t *testing.T) {
		conn, err := net.Dial("tcp", hp)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		start := time.Now()
		if n, err := conn.Read(make([]byte, 1)); err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("a silent peer: %d bytes, %v; want to be disconnected", n, err)
		}
		if d := time.Since(start); d < 150*time.Millisecond {
			t.Errorf("disconnected after %v, before the handshake timeout", d)
		}
	})
	t.Run("ReplyPrivateDataOver512", func(t *testing.T) {
		nl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer nl.Close()
		got := make(chan []byte, 1)
		go func() {
			c, err := nl.Accept()
			if err != nil {
				got <- nil
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			req, err := readMPA(c, false, new([mpaHdrLen + verbs.MaxPrivateData]byte))
			if err != nil || !req.crc {
				got <- nil
				return
			}
			c.Write(appendMPA(nil, mpaFrame{reply: true, crc: true, rev: mpaRevision, private: make([]byte, 600)}))
			b, _ := io.ReadAll(c)
			got <- b
		}()
		dev, err := verbs.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer dev.Close()
		pd, _ := dev.AllocPD()
		cq, _ := dev.CreateCQ(8, verbs.CQOptions{})
		qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := qp.Connect(ctx, "tcp:"+nl.Addr().String(), nil); !errors.Is(err, syscall.ECONNABORTED) {
			t.Errorf("Connect: %v, want ECONNABORTED", err)
		}
		if s := qp.State(); s != verbs.StateInit {
			t.Errorf("state %v after the failed connect, want Init", s)
		}
		// What the dialer sent after its request: a Terminate.
		b := <-got
		d := decoder{r: bytes.NewReader(b), crc: true}
		hd, err := d.next()
		if err != nil || hd.op != opTerminate {
			t.Fatalf("after the bad reply the dialer sent %x (%v)", b, err)
		}
		pl := make([]byte, hd.payload)
		if err := d.readFull(pl); err != nil {
			t.Fatal(err)
		}
		if err := d.end(); err != nil {
			t.Fatal(err)
		}
		tm, err := parseTerm(pl)
		if err != nil || tm.layer != layerLLP || tm.etype != etypeMPA || tm.code != codeBadMPAFrame {
			t.Errorf("Terminate %+v, %v; want LLP, MPA error, invalid MPA frame", tm, err)
		}
	})
}

// TestHostileNoAllocation: a peer that sends fences and never reads the
// responses meets TCP back-pressure: the provider stops reading once a
// bounded number of responses is queued, and its memory does not grow
// with what the peer sends.
func TestHostileNoAllocation(t *testing.T) {
	h := newHostile(t, hostileOpts{crc: true, policy: verbs.RNRWait, recvs: 1})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fence := fpdu(true, untagged(opReadReq, qnRead, 0, 0, true), readReq(0, 0, 0))
	const batch = 1024
	buf := make([]byte, 0, batch*len(fence))
	msn := uint32(2)
	sent := 0
	// Beyond what the sockets hold without the provider reading a fence:
	// its receive buffer, and the raw peer's send buffer, at their
	// system maxima (32 MiB and 4 MiB on some machines: 700,000 fences).
	limit := 200_000 + socketRoom()/len(fence)
	h.conn.SetWriteDeadline(time.Now().Add(time.Second))
	for sent < limit {
		buf = buf[:0]
		for range batch {
			f := append([]byte(nil), fence...)
			hd := untagged(opReadReq, qnRead, msn, 0, true)
			copy(f[2:], hd[2:])
			var tb [8]byte
			copy(f[len(f)-4:], trailer(tb[:], crcOf(f[:len(f)-4]), len(f)-6, true))
			buf = append(buf, f...)
			msn++
		}
		if _, err := h.conn.Write(buf); err != nil {
			if !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
				t.Fatal(err)
			}
			break // the provider stopped reading: back-pressure
		}
		sent += batch
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if sent >= limit {
		t.Errorf("the provider read %d fences without their responses being read", sent)
	}
	// What bounds the provider's memory: the control FPDUs it queued.
	l := h.link()
	l.mu.Lock()
	peak := l.ctlPeak
	l.mu.Unlock()
	if peak > maxCtlQueued+flushCtl {
		t.Errorf("the provider queued up to %d control FPDUs, more than its bound of %d (and %d being flushed)", peak, maxCtlQueued, flushCtl)
	}
	if grow := int64(after.HeapInuse) - int64(before.HeapInuse); grow > 16<<20 {
		t.Errorf("heap grew by %d bytes while the peer sent %d fences", grow, sent)
	}
	t.Logf("%d fences sent before the provider stopped reading, at most %d responses queued; heap %d -> %d", sent, peak, before.HeapInuse, after.HeapInuse)
}

// socketRoom is the most bytes a TCP connection's receive buffer and its
// peer's send buffer hold together on this system (tcp_rmem and tcp_wmem's
// maxima), or 64 MiB where those cannot be read.
func socketRoom() int {
	room := 0
	for _, f := range []string{"/proc/sys/net/ipv4/tcp_rmem", "/proc/sys/net/ipv4/tcp_wmem"} {
		b, err := os.ReadFile(f)
		fields := strings.Fields(string(b))
		if err != nil || len(fields) != 3 {
			return 64 << 20
		}
		n, err := strconv.Atoi(fields[2])
		if err != nil {
			return 64 << 20
		}
		room += n
	}
	return room
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestDialContext: a listener that accepts the TCP connection and never
// answers the MPA request holds a Connect only as long as its context:
// its deadline, or its cancellation, ends the connect with the context's
// error, and the queue pair is back in Init.
func TestDialContext(t *testing.T) {
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	go func() {
		for {
			c, err := nl.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			go io.Copy(io.Discard, c) // reads the request, answers nothing
		}
	}()
	p := New()
	defer p.Close()
	dev, _ := verbs.Open(p)
	defer dev.Close()
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(8, verbs.CQOptions{})
	qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	addr := "tcp:" + nl.Addr().String()

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := qp.Connect(ctx, addr, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Connect past its deadline: %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Connect returned %v after its deadline of 100ms", d)
	}
	if s := qp.State(); s != verbs.StateInit {
		t.Errorf("state %v, want Init", s)
	}

	ctx2, cancel2 := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel2)
	if _, err := qp.Connect(ctx2, addr, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Connect canceled: %v, want Canceled", err)
	}
}
