package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/exsgo/exs/verbs"
)

// The wire format: the IETF iWARP stack over TCP. All fields are
// big-endian but the CRC (see below).
//
// MPA (RFC 5044) sets the connection up: the active side sends a request
// frame, the passive side a reply frame:
//
//	0  key        16 bytes  "MPA ID Req Frame" or "MPA ID Rep Frame"
//	16 flags      8 bits    0x80 markers, 0x40 CRC, 0x20 reject
//	17 revision   8 bits    1
//	18 pd length  16 bits   at most 512
//	20 private data
//
// Then each side sends FPDUs: a 16-bit ULPDU length, the ULPDU (a DDP
// segment: header and payload), zero padding to a multiple of 4 bytes, and
// a CRC32c (Castagnoli) of everything before it, sent in the byte order of
// iSCSI's digests (least significant byte first), or zero when neither side
// asked for CRCs. Markers are never used.
//
// A DDP segment (RFC 5041) with its RDMAP fields (RFC 5040) starts with a
// 16-bit control field, then the tagged or untagged header:
//
//	tagged:   control | STag (32) | tagged offset (64)                              14 bytes
//	untagged: control | RDMAP word (32) | queue number | MSN (32) | message offset  18 bytes
const (
	mpaKeyReq    = "MPA ID Req Frame"
	mpaKeyRep    = "MPA ID Rep Frame"
	mpaHdrLen    = 20
	mpaMarkers   = 0x80
	mpaCRC       = 0x40
	mpaReject    = 0x20
	mpaRevision  = 1
	maxULPDU     = 0xFFFF
	taggedHdr    = 14
	untaggedHdr  = 18
	readReqLen   = 28 // an RDMA Read Request's payload
	immLen       = 8  // an Immediate Data message's payload (RFC 7306)
	termCtlLen   = 4  // a Terminate's control field
	maxTermLen   = termCtlLen + 2 + untaggedHdr + readReqLen
	maxHeaderLen = 2 + untaggedHdr + maxTermLen // the most a decoder holds of one FPDU
)

// DDP control field.
const (
	ctlTagged   = 0x8000
	ctlLast     = 0x4000
	ctlDDPVer   = 0x0300
	ctlRDMAPVer = 0x00C0
	ctlOpcode   = 0x000F
	ddpVersion  = 1 << 8
	rdmaVersion = 1 << 6
)

// RDMAP opcodes (RFC 5040; 8 and 9 from RFC 7306).
const (
	opWrite     = 0
	opReadReq   = 1
	opReadResp  = 2
	opSend      = 3
	opSendInv   = 4
	opSendSE    = 5
	opSendSEInv = 6
	opTerminate = 7
	opImm       = 8
	opImmSE     = 9
)

// Untagged queue numbers.
const (
	qnSend = 0
	qnRead = 1
	qnTerm = 2
)

// immNextSend in the second word of an Immediate Data message's payload
// binds it to the SEND that follows it (SEND_WITH_IMM); zero makes it the
// notification of the RDMA WRITE before it (RDMA_WRITE_WITH_IMM).
const immNextSend = 1

// The ready-to-receive message: the first FPDU of each side is a
// zero-length RDMA Read Request with zero STags (as RFC 6581's RTR), whose
// Data Source Tagged Offset carries the sender's parameters: rtrMagic in
// the high 48 bits, then the version and, in bit 0, the RNR policy.
const (
	rtrMagic   = 0x4558_5354_4350_0000 // "EXSTCP"
	rtrMask    = 0xFFFF_FFFF_FFFF_0000
	rtrVersion = 1 << 8
	rtrRNRFail = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// crcOf returns the CRC32c of b.
func crcOf(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// crcUpdate returns the CRC32c of the bytes summed into s followed by b.
func crcUpdate(s uint32, b []byte) uint32 { return crc32.Update(s, castagnoli, b) }

// padOf returns the padding after a ULPDU of n bytes.
func padOf(n int) int { return (4 - (2+n)%4) % 4 }

// ---- MPA frames ----

// mpaFrame is an MPA request or reply frame.
type mpaFrame struct {
	reply   bool
	markers bool
	crc     bool
	reject  bool
	rev     uint8
	private []byte
}

// appendMPA appends f's encoding to b.
func appendMPA(b []byte, f mpaFrame) []byte {
	key := mpaKeyReq
	if f.reply {
		key = mpaKeyRep
	}
	b = append(b, key...)
	var flags byte
	if f.markers {
		flags |= mpaMarkers
	}
	if f.crc {
		flags |= mpaCRC
	}
	if f.reject {
		flags |= mpaReject
	}
	b = append(b, flags, f.rev)
	b = binary.BigEndian.AppendUint16(b, uint16(len(f.private)))
	return append(b, f.private...)
}

// errMPA reports an MPA frame that breaks RFC 5044 (its Terminate: LLP
// layer, MPA error, "invalid MPA request or reply frame").
var errMPA = &wireError{layer: layerLLP, etype: etypeMPA, code: codeBadMPAFrame, msg: "invalid MPA frame"}

// readMPA reads an MPA frame of the given kind from r, using buf for its
// private data (which the result aliases). It reads no byte beyond the
// frame and allocates nothing. A frame that is not of the kind, has
// reserved bits set, another revision, or more than verbs.MaxPrivateData
// bytes of private data is an error wrapping errMPA; the private data of
// an oversized frame is not read.
func readMPA(r io.Reader, reply bool, buf *[mpaHdrLen + verbs.MaxPrivateData]byte) (mpaFrame, error) {
	h := buf[:mpaHdrLen]
	if _, err := io.ReadFull(r, h); err != nil {
		return mpaFrame{}, err
	}
	key := mpaKeyReq
	if reply {
		key = mpaKeyRep
	}
	if string(h[:16]) != key {
		return mpaFrame{}, fmt.Errorf("%w: key %q, want %q", errMPA, h[:16], key)
	}
	flags, rev := h[16], h[17]
	f := mpaFrame{reply: reply, markers: flags&mpaMarkers != 0, crc: flags&mpaCRC != 0, reject: flags&mpaReject != 0, rev: rev}
	if flags&0x1F != 0 {
		return f, fmt.Errorf("%w: reserved flag bits %#x", errMPA, flags&0x1F)
	}
	if !reply && f.reject {
		return f, fmt.Errorf("%w: reject bit in a request", errMPA)
	}
	if rev != mpaRevision {
		return f, fmt.Errorf("%w: revision %d, want %d", errMPA, rev, mpaRevision)
	}
	n := int(binary.BigEndian.Uint16(h[18:]))
	if n > verbs.MaxPrivateData {
		return f, fmt.Errorf("%w: %d bytes of private data, limit %d", errMPA, n, verbs.MaxPrivateData)
	}
	pd := buf[mpaHdrLen : mpaHdrLen+n]
	if _, err := io.ReadFull(r, pd); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return f, err
	}
	f.private = pd
	return f, nil
}

// ---- Terminate ----

// Terminate layers, error types and codes (RFC 5040 section 7, RFC 5041
// section 7, RFC 5044 section 8).
const (
	layerRDMAP = 0
	layerDDP   = 1
	layerLLP   = 2

	etypeLocalCatastrophic = 0 // RDMAP
	etypeRemoteProtection  = 1 // RDMAP
	etypeRemoteOperation   = 2 // RDMAP
	etypeTagged            = 1 // DDP
	etypeUntagged          = 2 // DDP
	etypeMPA               = 0 // LLP

	// RDMAP remote protection.
	codeInvalidSTag = 0
	codeBounds      = 1
	codeAccess      = 2
	codeNotAssoc    = 3
	codeTOWrap      = 4
	// RDMAP remote operation.
	codeBadRDMAPVersion = 5
	codeUnexpectedOp    = 6
	codeCatastrophic    = 7
	codeUnspecified     = 0xFF
	// DDP tagged.
	codeTInvalidSTag = 0
	codeTBounds      = 1
	codeTNotAssoc    = 2
	codeTTOWrap      = 3
	codeTBadVersion  = 4
	// DDP untagged.
	codeUInvalidQN  = 1
	codeUNoBuffer   = 2
	codeUBadMSN     = 3
	codeUBadMO      = 4
	codeUTooLong    = 5
	codeUBadVersion = 6
	codeCRC         = 2 // LLP: MPA CRC error
	codeLengthField = 3 // LLP: ULPDU length field mismatch
	codeBadMPAFrame = 4 // LLP: invalid MPA request or reply frame
	termFlagM       = 0x8000
	termFlagD       = 0x4000
	termFlagR       = 0x2000
)

// wireError is a violation of the wire protocol, or the refusal of a
// message, with the Terminate that reports it.
type wireError struct {
	layer, etype, code uint8
	msg                string
}

func (e *wireError) Error() string { return "tcp: " + e.msg }

// violation returns a wireError with a formatted message.
func violation(layer, etype, code uint8, format string, args ...any) *wireError {
	return &wireError{layer: layer, etype: etype, code: code, msg: fmt.Sprintf(format, args...)}
}

// termInfo is a Terminate message: its control word and the copies of the
// offending segment's headers.
type termInfo struct {
	layer, etype, code uint8
	segLen             uint16   // the offending DDP segment's length, with hdr
	hdr                []byte   // its DDP header (14 or 18 bytes), or nil
	rdma               []byte   // its RDMA Read Request header (28 bytes), or nil
	hdrBuf             [18]byte // backing for hdr
	rdmaBuf            [28]byte // backing for rdma
}

// appendTerm appends the Terminate's payload (after its untagged header).
func appendTerm(b []byte, t *termInfo) []byte {
	w := uint32(t.layer&0xF)<<28 | uint32(t.etype&0xF)<<24 | uint32(t.code)<<16
	if t.hdr != nil {
		w |= termFlagM | termFlagD
	}
	if t.rdma != nil {
		w |= termFlagR
	}
	b = binary.BigEndian.AppendUint32(b, w)
	if t.hdr != nil {
		b = binary.BigEndian.AppendUint16(b, t.segLen)
		b = append(b, t.hdr...)
	}
	if t.rdma != nil {
		b = append(b, t.rdma...)
	}
	return b
}

// parseTerm parses a Terminate's payload. It accepts any payload that
// holds what its flags announce.
func parseTerm(p []byte) (termInfo, error) {
	var t termInfo
	if len(p) < termCtlLen {
		return t, errors.New("tcp: Terminate without its control field")
	}
	w := binary.BigEndian.Uint32(p)
	t.layer, t.etype, t.code = uint8(w>>28), uint8(w>>24&0xF), uint8(w>>16)
	p = p[termCtlLen:]
	if w&termFlagD != 0 {
		if len(p) < 2+taggedHdr {
			return t, errors.New("tcp: Terminate too short for its DDP header copy")
		}
		t.segLen = binary.BigEndian.Uint16(p)
		p = p[2:]
		n := untaggedHdr
		if binary.BigEndian.Uint16(p)&ctlTagged != 0 {
			n = taggedHdr
		}
		if len(p) < n {
			return t, errors.New("tcp: Terminate too short for its DDP header copy")
		}
		t.hdr = t.hdrBuf[:copy(t.hdrBuf[:], p[:n])]
		p = p[n:]
	}
	if w&termFlagR != 0 {
		if len(p) < readReqLen {
			return t, errors.New("tcp: Terminate too short for its RDMA header copy")
		}
		t.rdma = t.rdmaBuf[:copy(t.rdmaBuf[:], p[:readReqLen])]
	}
	return t, nil
}

// ---- FPDU decoding ----

// header is what a decoder learned of one FPDU.
type header struct {
	ulpdu   int // ULPDU length
	ctl     uint16
	op      uint8
	tagged  bool
	last    bool
	stag    uint32 // tagged
	to      uint64 // tagged
	rsvd    uint32 // untagged: RDMAP's word (the STag to invalidate)
	qn      uint32 // untagged
	msn     uint32 // untagged
	mo      uint32 // untagged
	moLate  bool   // a SEND's MO, read with its first payload bytes (decoder.read)
	hdrLen  int    // 2 + DDP header
	payload int    // payload bytes
	raw     []byte // the DDP header as received
	rawBuf  [untaggedHdr]byte
}

// decoder reads FPDUs from a byte stream: the header of each (next), then
// its payload straight into the caller's memory (read), then its padding
// and CRC (end), checking the CRC on the way. It never allocates, and it
// reads no payload byte into memory of its own: after a trailer it reads
// ahead at most the 16 bytes that every FPDU starts with.
//
// Those 16 bytes hold an untagged header but for its last field, the
// message offset (MO). From a reader that can fill several buffers at
// once (vecReader), the MO of a SEND with payload is read with the first
// payload bytes, into the caller's memory, in one readv: the header's
// last 4 bytes, then the payload, placed where a SEND's segment at the
// expected MO goes (the segments of a message come in order over TCP),
// then checked against that MO (expectMO): a segment whose MO differs
// fails with a violation, its bytes placed only inside the memory the
// caller gave read for the segment's payload at the expected MO.
//
// A decoder is thread-compatible.
type decoder struct {
	r   io.Reader
	crc bool // CRCs are checked

	sum  uint32 // running CRC of the current FPDU
	h    header
	left int  // payload bytes of the current FPDU not yet read
	open bool // between next and end

	buf      [maxHeaderLen]byte // the current header; then bytes read ahead
	have     int                // bytes of the next FPDU already in buf
	tail     [3 + 4 + 16]byte   // padding, CRC and read-ahead
	tailHave int                // bytes of tail read with the payload's last bytes
	inline   []byte             // the payload, when read with the header (control messages)
	late     int                // bytes of the header still to read with the payload (h.moLate)
	wantMO   uint32             // the MO the late header bytes must hold (expectMO)
}

// vecReader is a reader that can fill up to three buffers with one read
// (readv), each only once the one before is full (b and c may be empty):
// the decoder reads an FPDU's last payload bytes, its padding and CRC and
// the next FPDU's first bytes at once, and a SEND's MO with its payload.
type vecReader interface {
	ReadVec(a, b, c []byte) (int, error)
}

// minHeader is what every FPDU starts with: its length and the shorter
// (tagged) DDP header.
const minHeader = 2 + taggedHdr

// next reads the next FPDU's header and checks what the DDP and RDMAP
// layers can check alone: lengths, versions, the opcode against the
// buffer model and the queue number. It returns io.EOF at a clean end of
// the stream (between FPDUs), io.ErrUnexpectedEOF inside a header, and a
// *wireError for a violation.
func (d *decoder) next() (*header, error) {
	if d.open {
		panic("tcp: decoder.next before end")
	}
	if d.have < minHeader {
		n, err := io.ReadAtLeast(d.r, d.buf[d.have:minHeader], minHeader-d.have)
		d.have += n
		if err != nil {
			if err == io.EOF && d.have == 0 {
				return nil, io.EOF
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	h := &d.h
	*h = header{}
	h.ulpdu = int(binary.BigEndian.Uint16(d.buf[0:]))
	h.ctl = binary.BigEndian.Uint16(d.buf[2:])
	h.tagged = h.ctl&ctlTagged != 0
	h.last = h.ctl&ctlLast != 0
	h.op = uint8(h.ctl & ctlOpcode)
	hl := taggedHdr
	if !h.tagged {
		hl = untaggedHdr
	}
	if h.ulpdu < hl {
		return nil, violation(layerLLP, etypeMPA, codeLengthField, "ULPDU length %d shorter than its %d-byte DDP header", h.ulpdu, hl)
	}
	h.hdrLen = 2 + hl
	h.payload = h.ulpdu - hl
	// A control message (its payload the provider's own) or an FPDU
	// without payload is read whole, with the rest of its header, its
	// padding and CRC and the next FPDU's first bytes, in one read; a
	// SEND's MO with its payload (read).
	inline, late := 0, 0
	_, vec := d.r.(vecReader)
	switch {
	case h.payload == 0 || !h.tagged && h.payload <= maxTermLen && (h.op == opReadReq || h.op == opImm || h.op == opImmSE || h.op == opTerminate):
		inline = h.payload
		if err := d.readWhole(2 + hl + inline); err != nil {
			return nil, err
		}
	case vec && !h.tagged && (h.op == opSend || h.op == opSendSE) && d.have < 2+hl:
		late = 2 + hl - d.have
		clear(d.buf[d.have : 2+hl])
	case d.have < 2+hl:
		n, err := io.ReadFull(d.r, d.buf[d.have:2+hl])
		d.have += n
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	h.raw = h.rawBuf[:copy(h.rawBuf[:], d.buf[2:2+hl])]
	h.moLate = late > 0
	if h.tagged {
		h.stag = binary.BigEndian.Uint32(d.buf[4:])
		h.to = binary.BigEndian.Uint64(d.buf[8:])
	} else {
		h.rsvd = binary.BigEndian.Uint32(d.buf[4:])
		h.qn = binary.BigEndian.Uint32(d.buf[8:])
		h.msn = binary.BigEndian.Uint32(d.buf[12:])
		h.mo = binary.BigEndian.Uint32(d.buf[16:])
	}
	d.have = 0
	d.open = true
	d.left = h.payload
	d.inline = d.buf[h.hdrLen : h.hdrLen+inline]
	d.late, d.wantMO = late, 0
	if d.crc {
		d.sum = crc32.Update(0, castagnoli, d.buf[:h.hdrLen+inline-late])
	}
	if err := checkHeader(h); err != nil {
		return nil, err
	}
	return h, nil
}

// readWhole reads the FPDU up to byte n into buf (the decoder has
// d.have of them) and its padding and CRC and up to minHeader bytes of the
// next FPDU into tail, using one readv where the reader can.
func (d *decoder) readWhole(n int) error {
	need := padOf(int(binary.BigEndian.Uint16(d.buf[0:]))) + 4
	vr, vec := d.r.(vecReader)
	for d.have < n || d.tailHave < need {
		var k int
		var err error
		switch {
		case d.have < n && vec:
			k, err = vr.ReadVec(d.buf[d.have:n], d.tail[:need+minHeader], nil)
			extra := max(0, d.have+k-n)
			d.have, d.tailHave = min(n, d.have+k), extra
		case d.have < n:
			k, err = d.r.Read(d.buf[d.have:n])
			d.have += k
		default:
			k, err = d.r.Read(d.tail[d.tailHave : need+minHeader])
			d.tailHave += k
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// checkHeader checks versions, the opcode against the buffer model and
// the untagged queue number.
func checkHeader(h *header) error {
	if h.ctl&ctlDDPVer != ddpVersion {
		if h.tagged {
			return violation(layerDDP, etypeTagged, codeTBadVersion, "DDP version %d", h.ctl&ctlDDPVer>>8)
		}
		return violation(layerDDP, etypeUntagged, codeUBadVersion, "DDP version %d", h.ctl&ctlDDPVer>>8)
	}
	if h.ctl&ctlRDMAPVer != rdmaVersion {
		return violation(layerRDMAP, etypeRemoteOperation, codeBadRDMAPVersion, "RDMAP version %d", h.ctl&ctlRDMAPVer>>6)
	}
	switch h.op {
	case opWrite, opReadResp:
		if !h.tagged {
			return violation(layerRDMAP, etypeRemoteOperation, codeUnexpectedOp, "untagged opcode %d", h.op)
		}
		return nil
	case opSend, opSendSE, opImm, opImmSE, opReadReq, opTerminate:
		if h.tagged {
			return violation(layerRDMAP, etypeRemoteOperation, codeUnexpectedOp, "tagged opcode %d", h.op)
		}
	default:
		return violation(layerRDMAP, etypeRemoteOperation, codeUnexpectedOp, "opcode %d", h.op)
	}
	want := uint32(qnSend)
	switch h.op {
	case opReadReq:
		want = qnRead
	case opTerminate:
		want = qnTerm
	}
	if h.qn != want {
		return violation(layerDDP, etypeUntagged, codeUInvalidQN, "queue number %d for opcode %d", h.qn, h.op)
	}
	return nil
}

// expectMO sets the MO that the current FPDU's header must hold, if it
// is read with the payload (h.moLate): read fails with a violation once
// it finds another. It is 0, a message's first segment's, unless set.
func (d *decoder) expectMO(mo uint32) { d.wantMO = mo }

// read reads payload bytes of the current FPDU into p, at most what is
// left of it; it makes one Read call on the stream (or, while the header's
// MO is still to be read, one for each part of it that comes alone).
func (d *decoder) read(p []byte) (int, error) {
	if len(p) > d.left {
		p = p[:d.left]
	}
	if len(p) == 0 {
		return 0, nil
	}
	if len(d.inline) > 0 {
		n := copy(p, d.inline) // the provider's own bytes, summed already
		d.inline = d.inline[n:]
		d.left -= n
		return n, nil
	}
	var tail []byte
	if len(p) == d.left {
		// The payload's last bytes, and with them the padding, the CRC
		// and the next FPDU's first bytes.
		tail = d.tail[:padOf(d.h.ulpdu)+4+minHeader]
	}
	var n, more int
	var err error
	vr, vec := d.r.(vecReader)
	for d.late > 0 && err == nil && n == 0 {
		// The header's last bytes, the MO, and the payload.
		at := d.h.hdrLen - d.late
		var k int
		if vec {
			k, err = vr.ReadVec(d.buf[at:d.h.hdrLen], p, tail)
		} else {
			k, err = d.r.Read(d.buf[at:d.h.hdrLen])
		}
		hk := min(k, d.late)
		d.late -= hk
		n = k - hk
		if d.late == 0 && k > 0 {
			if lerr := d.lateHeader(); lerr != nil {
				return 0, lerr
			}
		}
	}
	switch {
	case n > 0 || err != nil:
		n, more = min(n, len(p)), n-min(n, len(p))
	case vec && tail != nil:
		n, err = vr.ReadVec(p, tail, nil)
		n, more = min(n, len(p)), n-min(n, len(p))
	default:
		n, err = d.r.Read(p)
	}
	if d.crc && n > 0 {
		d.sum = crc32.Update(d.sum, castagnoli, p[:n])
	}
	d.left -= n
	d.tailHave = more
	if err == io.EOF {
		err = io.ErrUnexpectedEOF // the FPDU is not over
	}
	return n, err
}

// lateHeader takes the header's last bytes, read after next: it checks
// the MO against the one expected and sums the bytes into the CRC.
func (d *decoder) lateHeader() error {
	h := &d.h
	b := d.buf[2:h.hdrLen]
	copy(h.rawBuf[:], b)
	h.mo = binary.BigEndian.Uint32(d.buf[16:])
	h.moLate = false
	if d.crc {
		d.sum = crc32.Update(d.sum, castagnoli, d.buf[minHeader:h.hdrLen])
	}
	if h.mo != d.wantMO {
		return violation(layerDDP, etypeUntagged, codeUBadMO, "message offset %d, want %d", h.mo, d.wantMO)
	}
	return nil
}

// fillLate reads the header's last bytes, if they are still to be read
// (the FPDU was refused before its payload was read), for the MO check
// and the copy of the header a Terminate carries. It waits for them as
// next waits for a header's bytes (which it read whole before the MO was
// read late): the MO must not depend on when the peer's bytes came. What
// a failed read (the stream's end, Terminate's deadline) leaves out stays
// zero, and h.moLate true.
func (d *decoder) fillLate() {
	for d.late > 0 {
		at := d.h.hdrLen - d.late
		k, err := d.r.Read(d.buf[at:d.h.hdrLen])
		d.late -= k
		if err != nil || k == 0 {
			break
		}
	}
	copy(d.h.rawBuf[:], d.buf[2:d.h.hdrLen])
	if d.late == 0 {
		d.h.mo = binary.BigEndian.Uint32(d.buf[16:])
		d.h.moLate = false
	}
}

// readFull fills p with payload bytes.
func (d *decoder) readFull(p []byte) error {
	if len(p) > d.left {
		return violation(layerLLP, etypeMPA, codeLengthField, "payload of %d bytes, want at least %d", d.left, len(p))
	}
	for len(p) > 0 {
		n, err := d.read(p)
		p = p[n:]
		if err != nil {
			return err
		}
	}
	return nil
}

// discard skips the rest of the payload.
func (d *decoder) discard() error {
	var scratch [512]byte
	for d.left > 0 {
		if _, err := d.read(scratch[:min(d.left, len(scratch))]); err != nil {
			return err
		}
	}
	return nil
}

// errCRC reports an FPDU whose CRC does not match.
var errCRC = &wireError{layer: layerLLP, etype: etypeMPA, code: codeCRC, msg: "MPA CRC error"}

// end reads the current FPDU's padding and CRC, checks the CRC, and reads
// ahead what is already there of the next FPDU's first bytes. The payload
// must have been read.
func (d *decoder) end() error {
	if !d.open || d.left != 0 {
		panic("tcp: decoder.end with payload left")
	}
	d.open = false
	pad := padOf(d.h.ulpdu)
	need := pad + 4
	n := d.tailHave
	d.tailHave = 0
	if n < need {
		k, err := io.ReadAtLeast(d.r, d.tail[n:need+minHeader], need-n)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		n += k
	}
	if d.crc {
		sum := crc32.Update(d.sum, castagnoli, d.tail[:pad])
		if got := binary.LittleEndian.Uint32(d.tail[pad:]); got != sum {
			return errCRC
		}
	}
	d.have = copy(d.buf[:], d.tail[need:n])
	return nil
}

// ---- FPDU encoding ----

// putTagged writes a tagged FPDU's length and header into b (16 bytes)
// and returns them.
func putTagged(b []byte, op uint8, last bool, stag uint32, to uint64, payload int) []byte {
	ctl := uint16(ctlTagged | ddpVersion | rdmaVersion | uint16(op))
	if last {
		ctl |= ctlLast
	}
	binary.BigEndian.PutUint16(b[0:], uint16(taggedHdr+payload))
	binary.BigEndian.PutUint16(b[2:], ctl)
	binary.BigEndian.PutUint32(b[4:], stag)
	binary.BigEndian.PutUint64(b[8:], to)
	return b[:2+taggedHdr]
}

// putUntagged writes an untagged FPDU's length and header into b (20
// bytes) and returns them.
func putUntagged(b []byte, op uint8, last bool, qn, msn, mo uint32, payload int) []byte {
	ctl := uint16(ddpVersion | rdmaVersion | uint16(op))
	if last {
		ctl |= ctlLast
	}
	binary.BigEndian.PutUint16(b[0:], uint16(untaggedHdr+payload))
	binary.BigEndian.PutUint16(b[2:], ctl)
	binary.BigEndian.PutUint32(b[4:], 0)
	binary.BigEndian.PutUint32(b[8:], qn)
	binary.BigEndian.PutUint32(b[12:], msn)
	binary.BigEndian.PutUint32(b[16:], mo)
	return b[:2+untaggedHdr]
}

// readRequest is an RDMA Read Request's payload.
type readRequest struct {
	sinkSTag uint32
	sinkTO   uint64
	size     uint32
	srcSTag  uint32
	srcTO    uint64
}

func (r *readRequest) put(b []byte) []byte {
	binary.BigEndian.PutUint32(b[0:], r.sinkSTag)
	binary.BigEndian.PutUint64(b[4:], r.sinkTO)
	binary.BigEndian.PutUint32(b[12:], r.size)
	binary.BigEndian.PutUint32(b[16:], r.srcSTag)
	binary.BigEndian.PutUint64(b[20:], r.srcTO)
	return b[:readReqLen]
}

func parseReadRequest(b []byte) readRequest {
	return readRequest{
		sinkSTag: binary.BigEndian.Uint32(b[0:]),
		sinkTO:   binary.BigEndian.Uint64(b[4:]),
		size:     binary.BigEndian.Uint32(b[12:]),
		srcSTag:  binary.BigEndian.Uint32(b[16:]),
		srcTO:    binary.BigEndian.Uint64(b[20:]),
	}
}

// fence reports whether r is a zero-length read of no memory: the
// provider's fence or ready-to-receive message, answered without looking
// at memory.
func (r *readRequest) fence() bool { return r.size == 0 && r.srcSTag == 0 }

// trailer computes the padding and CRC of an FPDU whose running CRC is sum
// and whose ULPDU is n bytes long, writes them into b and returns them.
func trailer(b []byte, sum uint32, n int, crc bool) []byte {
	pad := padOf(n)
	clear(b[:pad])
	if crc {
		sum = crc32.Update(sum, castagnoli, b[:pad])
	} else {
		sum = 0
	}
	binary.LittleEndian.PutUint32(b[pad:], sum)
	return b[:pad+4]
}
