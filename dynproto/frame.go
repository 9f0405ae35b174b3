package dynproto

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// FrameType says what a frame carries.
type FrameType uint8

// Frame types. Every message between two engines is one frame, sent as a
// verbs SEND into one of the peer's frame receive buffers.
const (
	// FrameAdvert offers a posted recv buffer (receiver to sender).
	FrameAdvert FrameType = iota + 1
	// FrameAck returns stream-buffer space, and in message mode reports
	// consumed messages (receiver to sender).
	FrameAck
	// FrameDirect announces a direct transfer into an advertised buffer
	// (sender to receiver); it follows the transfer's RDMA WRITE.
	FrameDirect
	// FrameIndirect announces an indirect transfer into the stream buffer
	// (sender to receiver); it follows the transfer's RDMA WRITE.
	FrameIndirect
	// FrameFin ends the sender's stream (sender to receiver).
	FrameFin
	// FrameCredit only returns frame credits.
	FrameCredit
	// FramePause says that the sender, at sequence number Seq, waits for the
	// ADVERTs the receiver's FlagHeld promised instead of writing into the
	// stream buffer (sender to receiver, dynamic mode on a stream).
	FramePause
	frameTypeEnd
)

var frameTypeNames = [...]string{"", "ADVERT", "ACK", "DIRECT", "INDIRECT", "FIN", "CREDIT", "PAUSE"}

func (t FrameType) String() string {
	if t > 0 && t < frameTypeEnd {
		return frameTypeNames[t]
	}
	return fmt.Sprintf("FrameType(%d)", uint8(t))
}

// Frame flags.
const (
	// FlagWaitAll marks an ADVERT for a MSG_WAITALL recv: the sender must fill
	// it completely, possibly with several direct transfers.
	FlagWaitAll uint8 = 1 << iota
	// FlagEOM marks the last transfer of a message (message mode).
	FlagEOM
	// FlagTooLong marks a message that did not fit the receiver's buffer: on
	// a DIRECT frame (with Len 0) the sender refused to write it; on an ACK
	// the last message counted in Msgs was discarded by the receiver.
	FlagTooLong
	// FlagSlot returns the peer's credit slot (frame flow control,
	// docs/protocol.md departure 7).
	FlagSlot
	// FlagHeld, on any frame, says that the sending end's receiver has
	// ADVERTs out, or will send some without more data from the stream
	// buffer (dynamic mode on a stream, docs/protocol.md departure 11).
	FlagHeld
	// FlagResume on an ACK answers the PAUSE at its Seq: the receiver will
	// not advertise without more data; the sender goes on.
	FlagResume
	flagsAll = FlagWaitAll | FlagEOM | FlagTooLong | FlagSlot | FlagHeld | FlagResume
)

// FrameSize is the encoded size of every frame, in bytes.
const FrameSize = 48

const frameVersion = 1

// Frame is one control or notification message. Which fields are meaningful
// depends on Type:
//
//	ADVERT:   Phase (P_A), Seq (S_A), ID (advert number), Len (buffer length),
//	          RKey and Addr (the buffer, filled in by the caller), FlagWaitAll
//	ACK:      Len (stream-buffer bytes freed), Msgs (messages consumed), FlagTooLong,
//	          FlagResume with Seq (the PAUSE answered)
//	DIRECT:   Phase, Seq (of the first unit), ID (the advert filled), Len, FlagEOM, FlagTooLong
//	INDIRECT: Phase, Seq, Len, RingOff (where in the stream buffer), FlagEOM
//	FIN:      Seq (the end of the stream)
//	CREDIT:   nothing else
//	PAUSE:    Seq (where the sender waits)
//
// Every frame carries Credits (frame credits returned) and may carry FlagSlot
// and FlagHeld.
type Frame struct {
	Type    FrameType
	Flags   uint8
	Credits uint16
	Phase   Phase
	Seq     Seq
	ID      uint32
	Len     uint32
	Msgs    uint32
	RingOff uint32
	RKey    uint32
	Addr    uint64
}

// ErrFrame reports a frame that cannot be decoded.
var ErrFrame = errors.New("malformed protocol frame")

// Encode writes f into b, which must hold at least FrameSize bytes. The
// layout (big-endian, 48 bytes):
//
//	0 version (4 bits) | type (4 bits)   1 flags   2 credits (16)
//	4 phase (32)   8 seq (64)   16 id (32)   20 len (32)   24 msgs (32)
//	28 ring offset (32)   32 rkey (32)   36 addr (64)   44 zero (32)
func (f *Frame) Encode(b []byte) {
	_ = b[FrameSize-1]
	b[0] = frameVersion<<4 | uint8(f.Type)&0x0f
	b[1] = f.Flags
	binary.BigEndian.PutUint16(b[2:], f.Credits)
	binary.BigEndian.PutUint32(b[4:], uint32(f.Phase))
	binary.BigEndian.PutUint64(b[8:], uint64(f.Seq))
	binary.BigEndian.PutUint32(b[16:], f.ID)
	binary.BigEndian.PutUint32(b[20:], f.Len)
	binary.BigEndian.PutUint32(b[24:], f.Msgs)
	binary.BigEndian.PutUint32(b[28:], f.RingOff)
	binary.BigEndian.PutUint32(b[32:], f.RKey)
	binary.BigEndian.PutUint64(b[36:], f.Addr)
	binary.BigEndian.PutUint32(b[44:], 0)
}

// Decode parses a frame from b. It rejects a short buffer, an unknown version
// or type, unknown flags and non-zero padding with an error matching ErrFrame.
// It does not judge whether the frame makes sense in the connection's state:
// the Engine does.
func (f *Frame) Decode(b []byte) error {
	if len(b) < FrameSize {
		return fmt.Errorf("%w: %d bytes, want %d", ErrFrame, len(b), FrameSize)
	}
	if v := b[0] >> 4; v != frameVersion {
		return fmt.Errorf("%w: version %d", ErrFrame, v)
	}
	t := FrameType(b[0] & 0x0f)
	if t == 0 || t >= frameTypeEnd {
		return fmt.Errorf("%w: type %d", ErrFrame, uint8(t))
	}
	if b[1]&^flagsAll != 0 {
		return fmt.Errorf("%w: flags %#x", ErrFrame, b[1])
	}
	if binary.BigEndian.Uint32(b[44:]) != 0 {
		return fmt.Errorf("%w: non-zero padding", ErrFrame)
	}
	*f = Frame{
		Type:    t,
		Flags:   b[1],
		Credits: binary.BigEndian.Uint16(b[2:]),
		Phase:   Phase(binary.BigEndian.Uint32(b[4:])),
		Seq:     Seq(binary.BigEndian.Uint64(b[8:])),
		ID:      binary.BigEndian.Uint32(b[16:]),
		Len:     binary.BigEndian.Uint32(b[20:]),
		Msgs:    binary.BigEndian.Uint32(b[24:]),
		RingOff: binary.BigEndian.Uint32(b[28:]),
		RKey:    binary.BigEndian.Uint32(b[32:]),
		Addr:    binary.BigEndian.Uint64(b[36:]),
	}
	return nil
}

func (f Frame) String() string {
	switch f.Type {
	case FrameAdvert:
		w := ""
		if f.Flags&FlagWaitAll != 0 {
			w = " waitall"
		}
		return fmt.Sprintf("ADVERT#%d{P=%d S=%d len=%d%s}", f.ID, f.Phase, f.Seq, f.Len, w)
	case FrameAck:
		if f.Flags&FlagResume != 0 {
			return fmt.Sprintf("ACK{bytes=%d msgs=%d resume S=%d%s}", f.Len, f.Msgs, f.Seq, flagText(f.Flags&FlagTooLong))
		}
		return fmt.Sprintf("ACK{bytes=%d msgs=%d%s}", f.Len, f.Msgs, flagText(f.Flags&FlagTooLong))
	case FrameDirect:
		return fmt.Sprintf("DIRECT{advert=%d P=%d S=%d len=%d%s}", f.ID, f.Phase, f.Seq, f.Len, flagText(f.Flags&(FlagEOM|FlagTooLong)))
	case FrameIndirect:
		return fmt.Sprintf("INDIRECT{P=%d S=%d len=%d at=%d%s}", f.Phase, f.Seq, f.Len, f.RingOff, flagText(f.Flags&FlagEOM))
	case FrameFin:
		return fmt.Sprintf("FIN{S=%d}", f.Seq)
	case FramePause:
		return fmt.Sprintf("PAUSE{S=%d}", f.Seq)
	}
	return f.Type.String()
}

func flagText(fl uint8) string {
	s := ""
	if fl&FlagEOM != 0 {
		s += " eom"
	}
	if fl&FlagTooLong != 0 {
		s += " toolong"
	}
	return s
}
