package exs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"github.com/exsgo/exs/internal/errno"
)

// hello is the private data of a connection request, of its accept and of
// its rejection: one end's protocol parameters. Layout (big-endian, 32
// bytes):
//
//	0 magic "EXSP"   4 version   5 mode   6 socket type   7 reject reason
//	8 frame buffers (16)   10 zero (16)   12 stream buffer size (32)
//	16 stream buffer rkey (32)   20 zero (32)   24 stream buffer address (64)
type hello struct {
	version  uint8
	mode     Mode
	typ      SockType
	reason   rejectReason
	frames   uint16
	ringSize uint32
	ringKey  uint32
	ringAddr uint64
}

const (
	helloSize    = 32
	helloMagic   = "EXSP"
	helloVersion = 1
)

// rejectReason says why a passive end refused a request.
type rejectReason uint8

const (
	rejectNone     rejectReason = iota
	rejectVersion               // different protocol version
	rejectMode                  // different protocol mode
	rejectType                  // different socket type
	rejectBad                   // malformed request
	rejectResource              // the passive end could not set up the connection
	rejectBacklog               // the listener's backlog is full
	rejectClosed                // the listener closed with the request waiting
	rejectEnd
)

var reasonText = [...]string{"", "protocol version", "protocol mode", "socket type", "malformed request", "no resources", "backlog full", "listener closed"}

var errHello = errors.New("malformed connection parameters")

func (h *hello) encode() []byte {
	b := make([]byte, helloSize)
	copy(b, helloMagic)
	b[4] = h.version
	b[5] = uint8(h.mode)
	b[6] = uint8(h.typ)
	b[7] = uint8(h.reason)
	binary.BigEndian.PutUint16(b[8:], h.frames)
	binary.BigEndian.PutUint32(b[12:], h.ringSize)
	binary.BigEndian.PutUint32(b[16:], h.ringKey)
	binary.BigEndian.PutUint64(b[24:], h.ringAddr)
	return b
}

// decodeHello parses private data. It checks the form only (length, magic,
// zero fields, known reason); a version it does not know is returned for the
// caller to report, and the other fields are then not checked. For the
// current version it also checks that mode and type are known, that there
// is at least one frame buffer, and (but in a rejection, which describes no
// connection) that only direct-only mode goes without a stream buffer.
func decodeHello(b []byte) (hello, error) {
	var h hello
	if len(b) != helloSize || string(b[:4]) != helloMagic {
		return h, fmt.Errorf("%w: %d bytes", errHello, len(b))
	}
	h.version = b[4]
	h.mode = Mode(b[5])
	h.typ = SockType(b[6])
	h.reason = rejectReason(b[7])
	h.frames = binary.BigEndian.Uint16(b[8:])
	h.ringSize = binary.BigEndian.Uint32(b[12:])
	h.ringKey = binary.BigEndian.Uint32(b[16:])
	h.ringAddr = binary.BigEndian.Uint64(b[24:])
	if h.version != helloVersion {
		return h, nil
	}
	switch {
	case binary.BigEndian.Uint16(b[10:]) != 0 || binary.BigEndian.Uint32(b[20:]) != 0:
		return h, fmt.Errorf("%w: non-zero padding", errHello)
	case h.reason >= rejectEnd:
		return h, fmt.Errorf("%w: reason %d", errHello, h.reason)
	case h.mode < ModeDynamic || h.mode > ModeIndirectOnly:
		return h, fmt.Errorf("%w: %v", errHello, h.mode)
	case h.typ < SockStream || h.typ > SockSeqPacket:
		return h, fmt.Errorf("%w: %v", errHello, h.typ)
	case h.frames == 0 || h.frames > MaxFrames:
		return h, fmt.Errorf("%w: %d frame buffers", errHello, h.frames)
	case h.ringSize > MaxStreamBuffer:
		return h, fmt.Errorf("%w: stream buffer of %d bytes", errHello, h.ringSize)
	case h.reason == rejectNone && (h.ringSize == 0) != (h.mode == ModeDirectOnly):
		return h, fmt.Errorf("%w: stream buffer of %d bytes in %v mode", errHello, h.ringSize, h.mode)
	}
	return h, nil
}

// match checks a peer's parameters against ours and returns the reason to
// refuse, if any.
func (h *hello) match(peer *hello) rejectReason {
	switch {
	case peer.version != h.version:
		return rejectVersion
	case peer.mode != h.mode:
		return rejectMode
	case peer.typ != h.typ:
		return rejectType
	}
	return rejectNone
}

// mismatchError describes a refusal for the reason r, from the parameters
// of both ends.
func mismatchError(r rejectReason, local, peer *hello) error {
	switch r {
	case rejectVersion:
		return fmt.Errorf("%w: protocol version %d, peer %d", ErrMismatch, local.version, peer.version)
	case rejectMode:
		return fmt.Errorf("%w: protocol mode %v, peer %v", ErrMismatch, local.mode, peer.mode)
	case rejectType:
		return fmt.Errorf("%w: socket type %v, peer %v", ErrMismatch, local.typ, peer.typ)
	}
	text := "unknown reason"
	if int(r) < len(reasonText) {
		text = reasonText[r]
	}
	return errno.New("connection refused by peer: "+text, syscall.ECONNREFUSED)
}
