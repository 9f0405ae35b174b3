package dynproto

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/exsgo/exs/internal/errno"
)

// Mode selects how an engine moves data. Both ends of a connection must use
// the same mode.
type Mode uint8

const (
	// Dynamic chooses per transfer: direct into an advertised recv buffer
	// when a fresh ADVERT is at hand, otherwise indirect through the stream
	// buffer (the IPDPS 2014 protocol).
	Dynamic Mode = iota + 1
	// DirectOnly never uses the stream buffer: the sender always waits for
	// an ADVERT (the paper's direct-only baseline).
	DirectOnly
	// IndirectOnly never advertises: every byte goes through the stream
	// buffer (the paper's indirect-only baseline).
	IndirectOnly
)

func (m Mode) String() string {
	switch m {
	case Dynamic:
		return "dynamic"
	case DirectOnly:
		return "direct-only"
	case IndirectOnly:
		return "indirect-only"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// SockType is the socket type a connection carries.
type SockType uint8

const (
	// Stream is SOCK_STREAM: a byte stream; a recv completes with 1..n
	// bytes, exactly n with MSG_WAITALL (fewer only at the end of the stream).
	Stream SockType = iota + 1
	// SeqPacket is SOCK_SEQPACKET: each send is one message that fills
	// exactly one recv; a message longer than its recv is an error reported
	// to both ends (EMSGSIZE), never a silent truncation.
	SeqPacket
)

func (t SockType) String() string {
	switch t {
	case Stream:
		return "stream"
	case SeqPacket:
		return "seqpacket"
	}
	return fmt.Sprintf("SockType(%d)", uint8(t))
}

// Config configures one end of a connection. The two ends' configurations
// must mirror each other: this end's RecvBuffer is the peer's PeerRecvBuffer,
// and this end's Frames is the peer's PeerFrames.
type Config struct {
	Mode Mode     // required
	Type SockType // required

	// RecvBuffer is the size in bytes of this end's stream buffer, the
	// ring the peer writes indirect transfers into. It may be zero only in
	// DirectOnly mode.
	RecvBuffer int
	// PeerRecvBuffer is the size of the peer's stream buffer: the sender's
	// initial byte credits (b_s).
	PeerRecvBuffer int

	// Frames is the number of frame receive buffers this end keeps posted
	// for regular frames; it keeps one more posted for the credit slot.
	// PeerFrames is the same number at the peer: this end's initial frame
	// credits. Both must be between 1 and 65535.
	Frames     int
	PeerFrames int

	// AckThreshold is the number of freed stream-buffer bytes that makes
	// the receiver send an ACK (stream mode; message mode ACKs every
	// consumed message). Zero means half the stream buffer.
	AckThreshold int
	// MaxGather is the most send buffers one transfer gathers from (stream
	// mode). Zero means 8; 1 disables coalescing.
	MaxGather int
	// NoHeldHint turns off the held-recv hint of dynamic mode on a stream
	// (docs/protocol.md, departure 11): the receiver then opens a direct
	// phase with every waiting recv and the sender never pauses, as in the
	// slides. It exists for comparison; the two ends need not agree on it.
	NoHeldHint bool
	// HintMin is the least length, in bytes, of a send for the sender to
	// pause for the receiver's ADVERTs, and of a recv for the receiver to
	// open a direct phase with it alone (departure 11): smaller transfers
	// are cheaper through the stream buffer, gathered, than one direct
	// write each after a wait. Zero means a 32nd of the stream buffer
	// (at least 1); both ends then use the same value.
	HintMin int
	// MaxIndirect is the most bytes one indirect transfer carries (stream
	// mode); zero means no limit but the credits and the end of the stream
	// buffer. Smaller transfers let the receiver copy out one while the
	// sender writes the next.
	MaxIndirect int
	// AdvertMin is the least length, in bytes, of a recv that the receiver
	// advertises in dynamic mode (departure 12): a smaller recv, and the
	// recvs after it, are filled from the stream buffer, where small
	// transfers are gathered. Zero advertises every recv, as in the slides.
	AdvertMin int

	// InitialSeq and InitialPhase are where this end's outgoing stream
	// starts: the sequence number of its first unit and its first phase,
	// which must be even (a stream starts in an indirect phase).
	// PeerInitialSeq and PeerInitialPhase are the peer's InitialSeq and
	// InitialPhase: where the incoming stream starts. Like the stream
	// buffer sizes, they come with the peer's connection parameters; ends
	// that do not agree on them fail with ErrProtocol at the first frame
	// that names a sequence number. Zero, the default, starts both streams
	// at sequence 0 in phase 0; a start just below the wrap of Seq or Phase
	// lets a test take the serial-number comparisons across it.
	InitialSeq       Seq
	InitialPhase     Phase
	PeerInitialSeq   Seq
	PeerInitialPhase Phase
}

func (c *Config) check() error {
	switch {
	case c.Mode < Dynamic || c.Mode > IndirectOnly:
		return fmt.Errorf("%w: mode %d", ErrConfig, c.Mode)
	case c.Type < Stream || c.Type > SeqPacket:
		return fmt.Errorf("%w: socket type %d", ErrConfig, c.Type)
	case c.RecvBuffer < 0 || c.PeerRecvBuffer < 0 || c.RecvBuffer > 1<<31 || c.PeerRecvBuffer > 1<<31:
		return fmt.Errorf("%w: stream buffer sizes %d and %d", ErrConfig, c.RecvBuffer, c.PeerRecvBuffer)
	case c.Mode != DirectOnly && (c.RecvBuffer == 0 || c.PeerRecvBuffer == 0):
		return fmt.Errorf("%w: %v mode needs stream buffers", ErrConfig, c.Mode)
	case c.Frames < 1 || c.Frames > 65535 || c.PeerFrames < 1 || c.PeerFrames > 65535:
		return fmt.Errorf("%w: frame buffers %d and %d", ErrConfig, c.Frames, c.PeerFrames)
	case c.AckThreshold < 0 || c.AckThreshold > c.RecvBuffer:
		return fmt.Errorf("%w: ack threshold %d", ErrConfig, c.AckThreshold)
	case c.MaxGather < 0:
		return fmt.Errorf("%w: max gather %d", ErrConfig, c.MaxGather)
	case c.HintMin < 0:
		return fmt.Errorf("%w: hint minimum %d", ErrConfig, c.HintMin)
	case c.MaxIndirect < 0:
		return fmt.Errorf("%w: indirect transfer maximum %d", ErrConfig, c.MaxIndirect)
	case c.AdvertMin < 0:
		return fmt.Errorf("%w: advert minimum %d", ErrConfig, c.AdvertMin)
	case c.InitialPhase.IsDirect() || c.PeerInitialPhase.IsDirect():
		return fmt.Errorf("%w: initial phases %d and %d (a stream starts in an indirect phase)", ErrConfig, c.InitialPhase, c.PeerInitialPhase)
	}
	return nil
}

var (
	// ErrConfig reports an invalid Config.
	ErrConfig = errors.New("invalid protocol configuration")
	// ErrProtocol reports a frame that breaks the protocol: the peer is
	// faulty or hostile. It matches syscall.EPROTO with errors.Is.
	ErrProtocol error = errno.New("protocol violation", syscall.EPROTO)
)

// Completion errors carried by Action.Err. They are syscall.Errno values, so
// that an event keeps the errno it stands for.
const (
	errMsgSize = syscall.EMSGSIZE // a message longer than the recv it was for
	errPipe    = syscall.EPIPE    // a send posted after Shutdown
	errInval   = syscall.EINVAL   // a negative length, or an empty recv
)

// Kind says what an Action asks of the caller.
type Kind uint8

const (
	// WriteDirect: RDMA WRITE Len bytes from send ID at offset Off to the
	// peer's advertised buffer at (RKey, Addr). The advert's RKey and Addr
	// are those the caller put into the ADVERT frame; Addr already includes
	// the offset within the advertised buffer. Len is 0 for an empty
	// message (message mode): nothing is written, but the write still
	// counts, and its WriteDone is due once the frame after it completed.
	WriteDirect Kind = iota + 1
	// WriteIndirect: RDMA WRITE Len bytes from send ID at offset Off into
	// the peer's stream buffer at offset RingOff.
	WriteIndirect
	// SendFrame: send Frame to the peer, ordered after every write emitted
	// before it. For an ADVERT, ID is the recv being advertised and the
	// caller fills in Frame.RKey and Frame.Addr from that recv's buffer.
	SendFrame
	// CopyOut: copy Len bytes from this end's stream buffer at offset
	// RingOff into recv ID at offset Off.
	CopyOut
	// SendDone: send ID completed with Len bytes and Err.
	SendDone
	// RecvDone: recv ID completed with Len bytes and Err; EOF says it
	// met the end of the peer's stream (Len 0, no error).
	RecvDone
	// Discard: Len bytes at RingOff in this end's stream buffer belonged to
	// a message too long for its recv and were dropped. Nothing is to be
	// done; the action lets observers account for the space.
	Discard
)

var kindNames = [...]string{"", "WriteDirect", "WriteIndirect", "SendFrame", "CopyOut", "SendDone", "RecvDone", "Discard"}

func (k Kind) String() string {
	if int(k) < len(kindNames) && k > 0 {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Action is one thing the engine asks its caller to do, in order. Every
// WriteDirect and WriteIndirect must be followed, once the write has
// completed, by one call to Engine.WriteDone, in the order the writes were
// emitted.
type Action struct {
	Kind    Kind
	ID      uint64 // the send or recv the action concerns
	Off     int    // offset in that send's or recv's buffer
	Len     int
	RingOff int    // stream-buffer offset (WriteIndirect, CopyOut)
	RKey    uint32 // WriteDirect
	Addr    uint64 // WriteDirect
	Frame   Frame  // SendFrame
	Err     error  // SendDone, RecvDone
	// EOF marks a RecvDone at the end of the peer's stream: no unit
	// follows. Len is 0; in message mode it tells the end from an empty
	// message.
	EOF bool
}

func (a Action) String() string {
	switch a.Kind {
	case WriteDirect:
		return fmt.Sprintf("WriteDirect(send %d [%d:+%d] -> key %#x addr %#x)", a.ID, a.Off, a.Len, a.RKey, a.Addr)
	case WriteIndirect:
		return fmt.Sprintf("WriteIndirect(send %d [%d:+%d] -> ring %d)", a.ID, a.Off, a.Len, a.RingOff)
	case SendFrame:
		return "SendFrame(" + a.Frame.String() + ")"
	case CopyOut:
		return fmt.Sprintf("CopyOut(ring %d -> recv %d [%d:+%d])", a.RingOff, a.ID, a.Off, a.Len)
	case SendDone, RecvDone:
		switch {
		case a.Err != nil:
			return fmt.Sprintf("%v(%d, %d, %v)", a.Kind, a.ID, a.Len, a.Err)
		case a.EOF:
			return fmt.Sprintf("%v(%d, EOF)", a.Kind, a.ID)
		}
		return fmt.Sprintf("%v(%d, %d)", a.Kind, a.ID, a.Len)
	}
	return a.Kind.String()
}

// Stats counts what an engine has done. The zero value is a fresh engine's.
type Stats struct {
	BytesDirect       uint64 // payload bytes sent by direct transfers
	BytesIndirect     uint64 // payload bytes sent by indirect transfers
	TransfersDirect   uint64
	TransfersIndirect uint64
	MessagesTooLong   uint64 // messages refused or discarded as longer than their recv (either side)

	AdvertsSent      uint64 // by this end's receiver
	AdvertsReceived  uint64 // by this end's sender, from the peer
	AdvertsUsed      uint64 // by this end's sender
	AdvertsDiscarded uint64 // stale ADVERTs this end's sender threw away

	SenderPhaseSwitches   uint64
	ReceiverPhaseSwitches uint64

	CreditStalls uint64 // times the sender began waiting for stream-buffer space
	HeldPauses   uint64 // times the sender began pausing for the peer's ADVERTs (FlagHeld)
	PauseFrames  uint64 // PAUSE frames sent
	FrameStalls  uint64 // times this end began waiting for frame credits

	BytesCopied  uint64 // bytes the receiver copied out of its stream buffer
	AcksSent     uint64
	CreditFrames uint64 // CREDIT frames sent
	ResumeFrames uint64 // ACKs sent to answer a PAUSE (FlagResume)
}
