//go:build linux

package shm

// Fuzz targets for the decoders of what a peer sends: the handshake's
// messages, the mapping's header, the rings' framing, request records with
// their iovecs and fragments, arena messages and published registration
// entries. Their corpora (testdata/fuzz) run as plain tests; FuzzHostile*
// (hostile_fuzz_test.go) drive a whole victim.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"syscall"
	"testing"
	"unsafe"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// FuzzParseHello feeds arbitrary bytes to the dialer's decoder of the
// listener's first message: it fails with an error wrapping errProtocol
// (or syscall.EACCES for an exact refusal), and a hello it accepts encodes
// back to the same bytes.
func FuzzParseHello(f *testing.F) {
	b := make([]byte, helloLen)
	f.Add(b[:putHello(b, helloMsg{probeAddr: 0x7f00_1234_5678, probeVal: 0xfeed})])
	r := make([]byte, refusalLen)
	f.Add(r[:putRefusal(r)])
	f.Add(append(bytes.Clone(r[:putRefusal(r)]), 0))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseHello(b)
		if err != nil {
			if errors.Is(err, syscall.EACCES) {
				if want := r[:putRefusal(r)]; !bytes.Equal(b, want) {
					t.Fatalf("%x read as a refusal", b)
				}
				return
			}
			if !errors.Is(err, errProtocol) {
				t.Fatalf("error %v wraps neither errProtocol nor EACCES", err)
			}
			return
		}
		again := make([]byte, helloLen)
		if n := putHello(again, m); !bytes.Equal(again[:n], b) {
			t.Fatalf("decoded hello encodes differently:\n%x\n%x", b, again[:n])
		}
	})
}

// FuzzParseRequest feeds arbitrary bytes to the listener's decoder of the
// dialer's request, and a header page to checkHeader for the rings it
// names: a request it accepts has ring sizes the listener maps, an RNR
// policy, at most verbs.MaxPrivateData bytes of private data, and encodes
// back to the same bytes (up to the encoding of the cross-memory-attach
// flag and the reserved bytes); checkHeader accepts exactly the header
// that matches it.
func FuzzParseRequest(f *testing.F) {
	b := make([]byte, requestLen+verbs.MaxPrivateData)
	ok := requestMsg{rnr: verbs.RNRWait, cma: true, probeAddr: 0x7f00_1000, probeVal: 7,
		reqSize: 16 << 10, respSize: 64 << 10, private: []byte("private")}
	hdr := make([]byte, 40)
	putHeader := func(magic, version, req, resp uint64) []byte {
		h := make([]byte, 40)
		binary.LittleEndian.PutUint64(h[0:], magic)
		binary.LittleEndian.PutUint64(h[8:], version)
		binary.LittleEndian.PutUint64(h[16:], req)
		binary.LittleEndian.PutUint64(h[24:], resp)
		return h
	}
	good := putHeader(headerMagic, protoVersion, ok.reqSize, ok.respSize)
	f.Add(bytes.Clone(b[:putRequest(b, ok)]), good)
	f.Add(bytes.Clone(b[:putRequest(b, requestMsg{rnr: verbs.RNRFail, reqSize: 64 << 20, respSize: 16 << 10})]),
		putHeader(headerMagic, protoVersion, 64<<20, 16<<10))
	f.Add(bytes.Clone(b[:putRequest(b, ok)]), putHeader(headerMagic, protoVersion, ok.respSize, ok.reqSize))
	f.Add(bytes.Clone(b[:putRequest(b, requestMsg{rnr: 3, reqSize: 32 << 10, respSize: 16 << 10})]), hdr)
	f.Add(bytes.Clone(b[:putRequest(b, requestMsg{rnr: verbs.RNRWait, reqSize: 8 << 10, respSize: 16 << 10})]), good)
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, b, hdr []byte) {
		m, err := parseRequest(b)
		if err != nil {
			if !errors.Is(err, errProtocol) {
				t.Fatalf("error %v does not wrap errProtocol", err)
			}
			return
		}
		switch {
		case !validRingSize(m.reqSize) || !validRingSize(m.respSize):
			t.Fatalf("accepted rings of %d and %d bytes", m.reqSize, m.respSize)
		case !validRNR(m.rnr):
			t.Fatalf("accepted RNR policy %d", m.rnr)
		case len(m.private) > verbs.MaxPrivateData:
			t.Fatalf("accepted %d bytes of private data", len(m.private))
		}
		again := make([]byte, requestLen+verbs.MaxPrivateData)
		n := putRequest(again, m)
		want := bytes.Clone(b)
		want[7] = again[7]
		copy(want[42:requestLen], again[42:requestLen])
		if !bytes.Equal(again[:n], want) {
			t.Fatalf("decoded request encodes differently:\n%x\n%x", b, again[:n])
		}

		lo := newLayout(m.reqSize, m.respSize)
		if lo.total < 2*(2*pageSize+m.reqSize+m.respSize) || lo.table[1]+tableSlots*entrySize > lo.total {
			t.Fatalf("layout %+v does not hold its parts", lo)
		}
		page := make([]byte, pageSize)
		copy(page, hdr)
		h := (*header)(unsafe.Pointer(&page[0]))
		match := h.magic == headerMagic && h.version == protoVersion && h.reqSize == m.reqSize && h.respSize == m.respSize
		if err := checkHeader(page, lo); (err == nil) != match {
			t.Fatalf("checkHeader(%x) = %v for rings of %d and %d bytes", page[:40], err, m.reqSize, m.respSize)
		} else if err != nil && !errors.Is(err, errProtocol) {
			t.Fatalf("error %v does not wrap errProtocol", err)
		}
	})
}

// FuzzArenaMsg feeds arbitrary bytes, with a number of descriptors, to the
// decoder of the socket's messages after the handshake: what it accepts is
// an arenaAdd of a nonzero id and a size of whole pages up to maxArena,
// with one descriptor, or an arenaDrop, and encodes back to the same bytes
// up to the reserved ones.
func FuzzArenaMsg(f *testing.F) {
	enc := func(m arenaMsg) []byte {
		b := make([]byte, arenaMsgLen)
		putArenaMsg(b, m)
		return b
	}
	f.Add(enc(arenaMsg{kind: arenaAdd, id: 1, size: pageSize}), uint8(1))
	f.Add(enc(arenaMsg{kind: arenaAdd, id: 7, size: maxArena}), uint8(1))
	f.Add(enc(arenaMsg{kind: arenaAdd, id: 7, size: maxArena + pageSize}), uint8(1))
	f.Add(enc(arenaMsg{kind: arenaAdd, id: 2, size: pageSize + 1}), uint8(1))
	f.Add(enc(arenaMsg{kind: arenaAdd, id: 0, size: pageSize}), uint8(1))
	f.Add(enc(arenaMsg{kind: arenaAdd, id: 3, size: pageSize}), uint8(2))
	f.Add(enc(arenaMsg{kind: arenaDrop, id: 3}), uint8(0))
	f.Add(enc(arenaMsg{kind: 9, id: 3}), uint8(0))
	f.Add([]byte("exsh"), uint8(0))
	f.Fuzz(func(t *testing.T, b []byte, nfds uint8) {
		m, ok := parseArenaMsg(b, int(nfds))
		if !ok {
			return
		}
		switch {
		case m.fd != -1:
			t.Fatalf("decoded message carries descriptor %d", m.fd)
		case m.kind == arenaAdd && (m.id == 0 || nfds != 1 || m.size == 0 || m.size > maxArena || m.size%pageSize != 0):
			t.Fatalf("accepted arenaAdd of id %d, %d bytes, with %d descriptors", m.id, m.size, nfds)
		case m.kind != arenaAdd && m.kind != arenaDrop:
			t.Fatalf("accepted a message of kind %d", m.kind)
		}
		again := make([]byte, arenaMsgLen)
		putArenaMsg(again, m)
		want := bytes.Clone(b)
		copy(want[5:8], again[5:8])
		copy(want[12:16], again[12:16])
		if !bytes.Equal(again, want) {
			t.Fatalf("decoded message encodes differently:\n%x\n%x", b, again)
		}
	})
}

// FuzzArenaSpan gives the initiator's check of a peer's published
// registration (directLocked: RegionInfo.Check, then arenaSpan) arbitrary
// entry fields, arena sizes and operations: a span it returns has the
// operation's length and lies inside the arena, at the place the entry
// says the region's bytes are.
func FuzzArenaSpan(f *testing.F) {
	const key, rkey = 0x0101, 0x0202
	all := uint32(mreg.LocalWrite | mreg.RemoteRead | mreg.RemoteWrite)
	// entry: lkey, rkey, access, addr, n, arena offset; arena pages; the
	// operation: key, address, length, write.
	f.Add(uint32(key), uint32(rkey), all, uint64(0x1000), uint64(100), uint64(0), uint16(1), uint32(rkey), uint64(0x1000), uint32(100), true)
	f.Add(uint32(key), uint32(rkey), all, uint64(0x1000), uint64(100), uint64(4000), uint16(1), uint32(rkey), uint64(0x1000), uint32(100), true)
	f.Add(uint32(key), uint32(rkey), uint32(mreg.RemoteRead), uint64(0x1000), uint64(8192), uint64(0), uint16(2), uint32(rkey), uint64(0x2000), uint32(4096), false)
	f.Add(uint32(key), uint32(rkey), all, uint64(1<<63), uint64(1<<63), uint64(1<<62), uint16(3), uint32(rkey), uint64(1<<63+5), uint32(7), true)
	f.Add(uint32(key), uint32(rkey), all, uint64(0xffff_ffff_ffff_f000), uint64(0x1000), uint64(0), uint16(1), uint32(rkey), uint64(0xffff_ffff_ffff_fff0), uint32(16), true)
	f.Fuzz(func(t *testing.T, lkey, rk, access uint32, addr, n, off uint64, pages uint16, opKey uint32, raddr uint64, k uint32, write bool) {
		a := make([]byte, int(pages%64)*pageSize)
		ri := verbs.RegionInfo{LKey: mreg.Key(lkey), RKey: mreg.Key(rk), Addr: addr, Len: n, Access: mreg.Access(access)}
		want := mreg.RemoteRead
		if write {
			want = mreg.RemoteWrite
		}
		if ri.Check(mreg.Key(opKey), raddr, uint64(k), want) != nil {
			return
		}
		span, ok := arenaSpan(a, off, ri, raddr, int(k))
		if !ok {
			if off <= uint64(len(a)) && n <= uint64(len(a))-off {
				t.Fatalf("region of %d bytes at offset %d of an arena of %d refused", n, off, len(a))
			}
			return
		}
		if len(span) != int(k) || cap(span) != int(k) {
			t.Fatalf("span of %d bytes (capacity %d) for an operation of %d", len(span), cap(span), k)
		}
		if k == 0 {
			return
		}
		start := uint64(uintptr(unsafe.Pointer(&span[0])) - uintptr(unsafe.Pointer(&a[0])))
		if start != off+(raddr-addr) || start+uint64(k) > uint64(len(a)) {
			t.Fatalf("span at %d..%d of an arena of %d, want at %d", start, start+uint64(k), len(a), off+(raddr-addr))
		}
	})
}

// fuzzRingSize is the size of the rings the ring fuzz targets read: the
// smallest a peer may ask for.
const fuzzRingSize = 16 << 10

// fuzzRing returns a consumer of a ring of fuzzRingSize bytes in local
// memory whose bytes from position head (modulo the size, wrapping) are
// data, and whose producer published tail = head + span.
func fuzzRing(data []byte, head uint64, span uint64) *consumer {
	var ctl ringCtl
	buf := make([]byte, fuzzRingSize)
	for i, x := range data[:min(len(data), fuzzRingSize)] {
		buf[(head+uint64(i))&(fuzzRingSize-1)] = x
	}
	ctl.tail.Store(head + span)
	ctl.head.Store(head)
	return &consumer{r: ring{ctl: &ctl, data: buf, size: fuzzRingSize}, head: head, tailCache: head}
}

// FuzzRingPeek reads arbitrary ring contents with the consumer, from an
// arbitrary aligned position, as the receiver reads both rings: every
// record peek returns lies inside the ring's data, before the published
// tail, is at least a header long and is not a pad; the reading ends
// (empty or corrupt) within a ring's worth.
func FuzzRingPeek(f *testing.F) {
	recs := func(rs ...[]byte) []byte {
		var b []byte
		for _, r := range rs {
			b = append(b, r...)
			b = append(b, make([]byte, align8(len(r))-len(r))...)
		}
		return b
	}
	hdr := func(n uint32, typ byte) []byte {
		b := make([]byte, max(n, recHdr))
		binary.LittleEndian.PutUint32(b, n)
		b[4] = typ
		return b
	}
	two := recs(hdr(16, recAck), hdr(21, recRData))
	f.Add(two, uint64(0), uint32(len(two)))
	f.Add(two, uint64(fuzzRingSize-16), uint32(len(two)))                              // the second record does not fit before the end
	f.Add(recs(hdr(16, recPad), hdr(16, recAck)), uint64(fuzzRingSize-16), uint32(32)) // a pad to the end
	f.Add(recs(hdr(4, recAck)), uint64(0), uint32(8))
	f.Add(recs(hdr(24, recAck)), uint64(0), uint32(16))
	f.Add(two, uint64(8), uint32(len(two)+3))
	f.Add([]byte{}, uint64(0), uint32(fuzzRingSize+8))
	f.Fuzz(func(t *testing.T, data []byte, head uint64, span uint32) {
		head &^= 7
		c := fuzzRing(data, head, uint64(span))
		for i := 0; ; i++ {
			if i > fuzzRingSize/recHdr {
				t.Fatalf("more than %d records in a ring of %d bytes", i, fuzzRingSize)
			}
			before := c.head
			rec, err := c.peek()
			if err != nil {
				if !errors.Is(err, errCorrupt) {
					t.Fatalf("peek: %v", err)
				}
				if c.head-before > fuzzRingSize {
					t.Fatalf("the head moved by %d before a corrupt record", c.head-before)
				}
				return
			}
			if rec == nil {
				if c.head != head+uint64(span) {
					t.Fatalf("empty at %d, tail at %d", c.head-head, span)
				}
				return
			}
			pos := uint64(uintptr(unsafe.Pointer(&rec[0])) - uintptr(unsafe.Pointer(&c.r.data[0])))
			switch {
			case len(rec) < recHdr || rec[4] == recPad:
				t.Fatalf("record of %d bytes, type %d", len(rec), rec[4])
			case int(binary.LittleEndian.Uint32(rec)) != len(rec):
				t.Fatalf("record of %d bytes says %d", len(rec), binary.LittleEndian.Uint32(rec))
			case pos != c.head&(fuzzRingSize-1) || pos+uint64(len(rec)) > fuzzRingSize:
				t.Fatalf("record at %d..%d, head at %d", pos, pos+uint64(len(rec)), c.head&(fuzzRingSize-1))
			case c.head+uint64(align8(len(rec))) > head+uint64(span) || c.head+uint64(align8(len(rec))) > head+fuzzRingSize:
				t.Fatalf("record ends at %d, past the tail at %d", c.head-head+uint64(len(rec)), span)
			}
			c.advance(len(rec))
		}
	})
}

// FuzzRequestRing reads arbitrary contents of a request ring as the
// receiver does (processReq, deliver): each request's header decoded by
// parseReqHdr, its body (inline bytes, iovecs) checked by
// payloadReader.reset, its inline bytes read from it and the fragments
// after it. A request that passes gives exactly the bytes it says, never
// more; one whose fragments are wrong fails with errCorrupt; nothing
// panics or reads outside the ring. (Without a peer, iovecs are decoded
// but not followed: the peer is marked closed.)
func FuzzRequestRing(f *testing.F) {
	recs := func(rs ...[]byte) []byte {
		var b []byte
		for _, r := range rs {
			b = append(b, r...)
			b = append(b, make([]byte, align8(len(r))-len(r))...)
		}
		return b
	}
	frag := func(body string) []byte { return rec(recFrag, 0, []byte(body)) }
	w := func(n uint64, body string) []byte {
		return reqRec(verbs.OpWrite, modeInline, 0, 1, 0x0202, 0x1000, n, []byte(body))
	}
	f.Add(recs(w(5, "hello")), false)
	f.Add(recs(w(11, "hello"), frag(" world")), false)
	f.Add(recs(w(11, "hello"), frag(" world!")), false)
	f.Add(recs(w(11, "hello"), w(6, " world")), false)
	f.Add(recs(w(3, "hello")), false)
	f.Add(recs(reqRec(verbs.OpSend, modeInline, 0, 2, 0, 0, 0, nil), reqRec(verbs.OpRead, modeRData, 0, 3, 0x0202, 0x1000, 64, nil)), false)
	f.Add(recs(reqRec(verbs.OpRead, modeIov, 2, 4, 0x0202, 0x1000, 96, iovBody([2]uint64{0x7000, 64}, [2]uint64{0x9000, 32}))), true)
	f.Add(recs(reqRec(verbs.OpWrite, modeIov, 1, 5, 0x0202, 0x1000, 64, iovBody([2]uint64{0xffff_ffff_ffff_fff0, 64}))), true)
	f.Add(recs(reqRec(verbs.OpWrite, modeIov, 1, 5, 0x0202, 0x1000, 64, iovBody([2]uint64{0x7000, 64}))), false)
	f.Add(recs(reqRec(verbs.OpWrite, 9, 0, 6, 0x0202, 0x1000, 0, nil)), false)
	f.Fuzz(func(t *testing.T, data []byte, cma bool) {
		span := uint64(align8(min(len(data), fuzzRingSize)))
		l := &link{cma: cma, peer: &sideBlock{}}
		l.peer.closed.Store(1)
		l.stop.Store(true) // waitIn: no more records come
		l.rx.reqIn = *fuzzRing(data, 0, span)
		l.rx.rd.l = l
		rd := &l.rx.rd
		buf := make([]byte, 4096)
		for range fuzzRingSize / recHdr {
			rec, err := l.rx.reqIn.peek()
			if err != nil || rec == nil {
				return
			}
			h, err := parseReqHdr(rec)
			if err == nil {
				err = rd.reset(h.op, h.mode, rec, h.n, h.nseg)
			}
			if err != nil {
				if !errors.Is(err, errCorrupt) {
					t.Fatalf("decoding a request: %v", err)
				}
				return
			}
			switch h.mode {
			case modeInline:
				if h.op == verbs.OpRead || len(rec)-reqHdr > h.n {
					t.Fatalf("accepted an inline %v of %d bytes in a record of %d", h.op, h.n, len(rec))
				}
			case modeIov:
				total := 0
				for _, s := range rd.iov {
					total += s.Len
					if s.Len <= 0 || uint64(s.Base)+uint64(s.Len) < uint64(s.Base) {
						t.Fatalf("accepted iovec %#x+%d", s.Base, s.Len)
					}
				}
				if !cma || total != h.n || len(rd.iov) > verbs.MaxSGE {
					t.Fatalf("accepted %d iovecs of %d bytes for %d (cross-memory attach %v)", len(rd.iov), total, h.n, cma)
				}
			case modeRData:
				if h.op != verbs.OpRead || len(rec) != reqHdr {
					t.Fatalf("accepted a %v of %d bytes in modeRData", h.op, len(rec))
				}
			default:
				t.Fatalf("accepted mode %d", h.mode)
			}
			if h.op == verbs.OpRead {
				// The receiver's Sink writes the response; the
				// request is its record alone.
				l.rx.reqIn.advance(rd.recLen)
				continue
			}
			got := 0
			for {
				n, err := rd.Read(buf)
				got += n
				if n < 0 || n > len(buf) || got > h.n {
					t.Fatalf("read %d bytes (%d in all) of a request of %d", n, got, h.n)
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					if h.mode == modeInline && !errors.Is(err, errCorrupt) && !errors.Is(err, io.ErrUnexpectedEOF) {
						t.Fatalf("reading an inline request: %v", err)
					}
					return
				}
			}
			if got != h.n {
				t.Fatalf("read %d bytes of a request of %d", got, h.n)
			}
			l.rx.reqIn.advance(rd.recLen)
		}
	})
}
