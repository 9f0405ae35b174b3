package tcp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/exsgo/exs/verbs"
)

// Fuzz targets of the two parsers a peer's bytes meet first: the MPA frame
// parser (readMPA) and the FPDU decoder. The seed corpus is in
// testdata/fuzz (written by TestSeedCorpus -update-seeds from mpaSeeds and
// fpduSeeds); go test runs it, go test -fuzz explores further.

// FuzzMPAFrame parses arbitrary bytes as an MPA request or reply frame. A
// frame it accepts must re-encode to exactly the bytes it consumed, hold
// at most verbs.MaxPrivateData bytes of private data, and leave every byte
// after it unread; a frame it refuses must be refused as a violation of
// RFC 5044 or for want of bytes.
func FuzzMPAFrame(f *testing.F) {
	f.Fuzz(func(t *testing.T, reply bool, b []byte) {
		r := bytes.NewReader(b)
		buf := new([mpaHdrLen + verbs.MaxPrivateData]byte)
		fr, err := readMPA(r, reply, buf)
		consumed := len(b) - r.Len()
		if err != nil {
			var we *wireError
			if !errors.As(err, &we) && err != io.EOF && err != io.ErrUnexpectedEOF {
				t.Fatalf("error %v is neither a violation nor a short frame", err)
			}
			if consumed > mpaHdrLen+verbs.MaxPrivateData {
				t.Fatalf("a refused frame consumed %d bytes", consumed)
			}
			return
		}
		if len(fr.private) > verbs.MaxPrivateData {
			t.Fatalf("accepted %d bytes of private data", len(fr.private))
		}
		if fr.reply != reply || fr.rev != mpaRevision || (!reply && fr.reject) {
			t.Fatalf("accepted frame %+v for reply=%v", fr, reply)
		}
		if got := appendMPA(nil, fr); !bytes.Equal(got, b[:consumed]) {
			t.Fatalf("re-encoded %x, consumed %x", got, b[:consumed])
		}
	})
}

// FuzzFPDU decodes arbitrary bytes as a stream of FPDUs, with and without
// CRCs, reading every payload as the provider does (in pieces, into
// memory of the caller's), from a plain reader and from one that fills
// several buffers at once (vecReader), where a SEND's MO is read with its
// payload. It checks the decoder against a plain model of the framing:
// each FPDU it accepts starts where the model says, its header fields and
// payload are the bytes the model finds there, its CRC was checked, and
// re-encoding it gives the same bytes back; and the decoder reads no
// payload byte with a header (but a control message's, whose payload is
// the provider's own) and never more than 16 bytes beyond the FPDU it
// works on. With a vecReader it also expects, once, another MO than the
// one sent: a SEND's payload must then fail with a violation, its bytes
// placed only inside the memory given for them.
func FuzzFPDU(f *testing.F) {
	f.Fuzz(func(t *testing.T, crc bool, b []byte) {
		for _, m := range []fpduMode{plainReader, vecReaderMode, wrongMO} {
			decodeStream(t, crc, b, m)
		}
	})
}

// fpduMode is how FuzzFPDU reads a stream.
type fpduMode int

const (
	plainReader   fpduMode = iota
	vecReaderMode          // a vecReader, in pieces of varied sizes
	wrongMO                // a vecReader, expecting another MO than the first late one's
)

// decodeStream is FuzzFPDU's run over b in mode m.
func decodeStream(t *testing.T, crc bool, b []byte, m fpduMode) {
	t.Helper()
	var r interface {
		io.Reader
		count() int
	}
	cr := &countReader{r: bytes.NewReader(b)}
	r = cr
	if m != plainReader {
		r = &countVecReader{countReader: cr}
	}
	d := decoder{r: r, crc: crc}
	off := 0 // where the model says the next FPDU starts
	const guardLen = 8
	buf := make([]byte, guardLen+maxULPDU+guardLen)
	for range 64 {
		h, err := d.next()
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		ulpdu := int(binary.BigEndian.Uint16(b[off:]))
		// A header alone, but for a control message or an FPDU
		// without payload, read whole with what follows it; a SEND's
		// header but its MO, with a vecReader.
		limit := off + h.hdrLen
		if len(d.inline) > 0 || h.payload == 0 {
			limit = off + 2 + ulpdu + padOf(ulpdu) + 4 + minHeader
		}
		if r.count() > limit {
			t.Fatalf("read %d bytes for an FPDU at %d (payload %d)", r.count(), off, h.payload)
		}
		if h.moLate != (m != plainReader && !h.tagged && (h.op == opSend || h.op == opSendSE) && len(d.inline) == 0 && h.payload > 0) {
			t.Fatalf("MO read late %v for %+v in mode %d", h.moLate, h, m)
		}
		late := h.moLate
		if late && len(b) >= off+2+untaggedHdr {
			mo := binary.BigEndian.Uint32(b[off+2+untaggedHdr-4:])
			if m == wrongMO {
				mo++
			}
			d.expectMO(mo)
		}
		if h.ulpdu != ulpdu || h.payload != ulpdu-h.hdrLen+2 {
			t.Fatalf("header %+v at %d, model: length %d", h, off, ulpdu)
		}
		// Read the payload in pieces of 1, 2, 3... bytes.
		mem := buf[:guardLen+h.payload+guardLen]
		for i := range mem {
			mem[i] = 0xA5
		}
		p := mem[guardLen : guardLen+h.payload]
		for k, step := 0, 1; k < len(p); step++ {
			n, err := d.read(p[k:min(len(p), k+step)])
			if err != nil {
				checkDecodeError(t, err)
				var we *wireError
				if errors.As(err, &we) && (m != wrongMO || !late || we.code != codeUBadMO) {
					t.Fatalf("payload read: %v", err)
				}
				if bytes.Count(mem[:guardLen], []byte{0xA5}) != guardLen || bytes.Count(mem[guardLen+len(p):], []byte{0xA5}) != guardLen {
					t.Fatalf("bytes placed outside the payload's memory: %x", mem)
				}
				return
			}
			k += n
		}
		if m == wrongMO && late {
			t.Fatalf("payload of a SEND read with MO %d expected %d", h.mo, d.wantMO)
		}
		if !bytes.Equal(h.raw, b[off+2:off+h.hdrLen]) {
			t.Fatalf("header %x at %d, model %x", h.raw, off, b[off+2:off+h.hdrLen])
		}
		if err := d.end(); err != nil {
			checkDecodeError(t, err)
			if err == errCRC && !crc {
				t.Fatalf("CRC error with CRCs off")
			}
			return
		}
		end := off + 2 + ulpdu + padOf(ulpdu) + 4
		if !bytes.Equal(p, b[off+h.hdrLen:off+2+ulpdu]) {
			t.Fatalf("payload differs from the model's")
		}
		if r.count() > end+minHeader {
			t.Fatalf("read %d bytes, %d beyond the FPDU that ends at %d", r.count(), r.count()-end, end)
		}
		// Re-encode: the header the decoder parsed, the payload,
		// zero padding and, with CRCs, the CRC it checked.
		var hb [2 + untaggedHdr]byte
		var enc []byte
		if h.tagged {
			enc = putTagged(hb[:], h.op, h.last, h.stag, h.to, h.payload)
		} else {
			enc = putUntagged(hb[:], h.op, h.last, h.qn, h.msn, h.mo, h.payload)
			binary.BigEndian.PutUint32(enc[4:], h.rsvd)
		}
		binary.BigEndian.PutUint16(enc[2:], h.ctl)
		enc = append(append([]byte(nil), enc...), p...)
		var tb [8]byte
		enc = append(enc, trailer(tb[:], crcOf(enc), len(enc)-2, crc)...)
		orig := b[off:end]
		if !crc {
			orig = append(append([]byte(nil), orig[:len(orig)-4]...), 0, 0, 0, 0)
		}
		if pad := padOf(ulpdu); !bytes.Equal(enc[:len(enc)-4-pad], orig[:len(orig)-4-pad]) || !bytes.Equal(enc[len(enc)-4:], orig[len(orig)-4:]) {
			t.Fatalf("re-encoded FPDU\n%x\nreceived\n%x", enc, orig)
		}
		off = end
	}
}

// checkDecodeError fails the test unless err is one a peer's bytes may
// cause: a violation, or the stream ending.
func checkDecodeError(t *testing.T, err error) {
	t.Helper()
	var we *wireError
	if !errors.As(err, &we) && err != io.EOF && err != io.ErrUnexpectedEOF {
		t.Fatalf("decoder error %v is neither a violation nor the stream's end", err)
	}
}

// countReader counts the bytes read.
type countReader struct {
	r io.Reader
	n int
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func (c *countReader) count() int { return c.n }

// countVecReader is a countReader that is a vecReader, as a socket is:
// each ReadVec fills a, then b, then c, with what it reads at once, in
// pieces of varied sizes (the stream as it may come).
type countVecReader struct {
	*countReader
	calls int
}

func (c *countVecReader) ReadVec(a, b, cc []byte) (int, error) {
	c.calls++
	room := []int{1, 3, 1 << 20, 2, 1 << 20}[c.calls%5]
	n := 0
	for _, p := range [3][]byte{a, b, cc} {
		p = p[:min(len(p), room-n)]
		if len(p) == 0 {
			continue
		}
		k, err := c.Read(p)
		n += k
		if k < len(p) || err != nil {
			if n > 0 {
				err = nil
			}
			return n, err
		}
	}
	return n, nil
}

type mpaSeed struct {
	reply bool
	b     []byte
}

// mpaSeeds returns valid and invalid MPA frames.
func mpaSeeds() []mpaSeed {
	return []mpaSeed{
		{false, appendMPA(nil, mpaFrame{crc: true, rev: 1, private: []byte("hello")})},
		{false, appendMPA(nil, mpaFrame{rev: 1})},
		{false, appendMPA(nil, mpaFrame{crc: true, rev: 1, private: bytes.Repeat([]byte{7}, verbs.MaxPrivateData)})},
		{true, appendMPA(nil, mpaFrame{reply: true, crc: true, rev: 1, private: []byte("world")})},
		{true, appendMPA(appendMPA(nil, mpaFrame{reply: true, reject: true, rev: 1, private: []byte("no")}), mpaFrame{rev: 1})},
		{true, appendMPA(nil, mpaFrame{reply: true, markers: true, rev: 1})},
		{false, appendMPA(nil, mpaFrame{rev: 2})},
		{false, append(appendMPA(nil, mpaFrame{rev: 1})[:18], 0x02, 0x01)}, // 513 bytes of private data announced
		{false, []byte("MPA ID Req Fram")},
	}
}

type fpduSeed struct {
	crc bool
	b   []byte
}

// fpduSeeds returns streams of FPDUs of every opcode the provider sends,
// and broken ones.
func fpduSeeds() []fpduSeed {
	frame := func(crc bool, h []byte, payload []byte) []byte {
		b := append(append([]byte(nil), h...), payload...)
		var tb [8]byte
		return append(b, trailer(tb[:], crcOf(b), len(b)-2, crc)...)
	}
	var hb [2 + untaggedHdr]byte
	var rr [readReqLen]byte
	req := readRequest{sinkSTag: 0x80000001, size: 64, srcSTag: 0x1234, srcTO: 0x7000}
	t := termInfo{layer: layerDDP, etype: etypeTagged, code: codeTBounds, segLen: 22}
	t.hdr = putTagged(make([]byte, 16), opWrite, true, 0x1234, 0x7000, 8)[2:]
	stream := func(crc bool) []byte {
		var b []byte
		b = append(b, frame(crc, putUntagged(hb[:], opReadReq, true, qnRead, 1, 0, readReqLen), (&readRequest{srcTO: rtrMagic | rtrVersion}).put(rr[:]))...)
		b = append(b, frame(crc, putUntagged(hb[:], opSend, true, qnSend, 1, 0, 5), []byte("hello"))...)
		b = append(b, frame(crc, putTagged(hb[:], opWrite, false, 0x1234, 0x7000, 3), []byte("abc"))...)
		b = append(b, frame(crc, putTagged(hb[:], opWrite, true, 0x1234, 0x7003, 2), []byte("de"))...)
		b = append(b, frame(crc, putUntagged(hb[:], opImm, true, qnSend, 2, 0, immLen), []byte{0, 0, 0, 42, 0, 0, 0, 0})...)
		b = append(b, frame(crc, putUntagged(hb[:], opReadReq, true, qnRead, 2, 0, readReqLen), req.put(rr[:]))...)
		b = append(b, frame(crc, putTagged(hb[:], opReadResp, true, 0x80000001, 0, 4), []byte("data"))...)
		b = append(b, frame(crc, putUntagged(hb[:], opTerminate, true, qnTerm, 1, 0, 4+2+taggedHdr), appendTerm(nil, &t))...)
		return b
	}
	good := stream(true)
	badCRC := append([]byte(nil), good...)
	badCRC[len(badCRC)-1] ^= 1
	short := frame(true, putTagged(hb[:], opWrite, true, 1, 0, 0), nil)
	binary.BigEndian.PutUint16(short, 4) // shorter than its header
	badVersion := frame(true, putUntagged(hb[:], opSend, true, qnSend, 1, 0, 0), nil)
	badVersion[2] ^= 0x02
	badQN := frame(true, putUntagged(hb[:], opSend, true, 7, 1, 0, 0), nil)
	return []fpduSeed{
		{true, good},
		{false, stream(false)},
		{true, badCRC},
		{true, short},
		{true, badVersion},
		{true, badQN},
		{true, good[:len(good)/2]},
	}
}
