package dynproto

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/exsgo/exs/dynproto/internal/mut"
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

// recv states.
const (
	recvWaiting    uint8 = iota // not advertised (yet): counted in k_b
	recvAdvertised              // an ADVERT was sent for it
	recvPlain                   // never to be advertised (IndirectOnly mode, or after FIN)
)

type sendReq struct {
	id       uint64
	no       uint64 // serial number, for matching write completions
	n        int
	issued   int  // bytes handed to transfers
	all      bool // every transfer it needs has been emitted
	writes   int  // writes emitted and not yet done
	awaitAck bool // message sent indirectly, not yet consumed by the receiver
	err      error
}

type advert struct {
	phase   Phase
	seq     Seq
	id      uint32
	n       int
	filled  int
	waitAll bool
	rkey    uint32
	addr    uint64
}

type recvReq struct {
	id      uint64
	n       int
	waitAll bool
	filled  int
	state   uint8
	stale   bool // advertised, but to be filled from the stream buffer (counted in k_a)
	advert  uint32
	phase   Phase // of its ADVERT
	tooLong bool  // message mode: the message arriving is longer than the recv
}

// segment is an indirect transfer's data in the stream buffer (message mode).
type segment struct {
	n   int
	eom bool
}

// Engine is one end of a connection running the dynamic protocol: a sender
// half for the outgoing stream and a receiver half for the incoming one.
//
// The engine is pure: it performs no I/O, starts no goroutines, reads no
// clock and logs nothing. Each input is a method call; each method appends
// the actions it decides on to the caller's slice and returns it, so that a
// caller reusing its slice allocates nothing in steady state. The caller
// carries the actions out in order.
//
// An Engine is not safe for concurrent use: the caller serialises calls.
//
// Sender half (per transfer, after IPDPS 2014, algorithm 1):
//
//	          fresh ADVERT at head of q_A               no usable ADVERT, b_s > 0
//	indirect ─────────────────────────────► direct ─────────────────────────────► indirect
//	(P_S even)  P_S = P_A                   (P_S odd)   P_S = NEXT_PHASE(P_S)
//	   │ stale ADVERT (P_A < P_S or S_A < S_S): drop it; if P_S < P_A, P_S = NEXT_PHASE(P_A)
//
// Receiver half (algorithms 2-4): a new recv is advertised only when the
// stream buffer is empty and no earlier recv is pending from an earlier
// indirect phase (b_r = k_a = k_b = 0), moving P_r to a direct phase; an
// indirect transfer moves P_r to an indirect phase and makes every
// outstanding ADVERT stale (k_a).
type Engine struct {
	cfg Config

	dead    bool  // aborted
	deadErr error // the abort's error
	gone    bool  // the connection is gone (PeerGone); the stream buffer still delivers
	goneErr error // PeerGone's error

	// Frame flow control. fc is the regular frame credits this end holds,
	// owed the regular buffers it has reposted and not yet reported; slot
	// says the peer's credit-slot buffer is free, slotOwed that ours was
	// used and is to be reported.
	fc       int
	owed     int
	slot     bool
	slotOwed bool
	fstalled bool

	// Sender half.
	sends     fifo[sendReq] // incomplete sends, in post order
	cur       int           // index in sends of the first send not fully issued
	nextNo    uint64
	writes    fifo[uint64] // serial numbers of the sends of outstanding writes
	adverts   fifo[advert] // q_A
	ps        Phase        // P_S
	ss        Seq          // S_S
	bs        int          // b_s: byte credits for the peer's stream buffer
	wpos      int          // next write offset in the peer's stream buffer
	cstalled  bool
	shutdown  bool // Shutdown was called
	finSent   bool
	msgInRing bool // message mode: a message is partly written to the stream buffer
	held      bool // the peer's last frame carried FlagHeld
	paused    bool // waiting for the ADVERTs FlagHeld promised (departure 11)
	pauseSent bool // the PAUSE frame for this pause has been sent
	hstalled  bool

	// Receiver half.
	recvs      fifo[recvReq]
	adv        int // index of the first recv not advertised
	pr         Phase
	sr         Seq // S_r: next unit to deliver
	sest       Seq // S'_r
	arr        Seq // next unit expected to arrive
	br         int // b_r: bytes in the stream buffer not yet copied out
	ka, kb     int
	rpos       int // next read offset in the stream buffer
	rwpos      int // next write offset expected from the peer
	segs       fifo[segment]
	unacked    int  // bytes freed and not yet ACKed
	msgs       int  // messages consumed and not yet ACKed
	ackTooLong bool // the last of msgs was too long
	nextAdvert uint32
	fin        bool // the peer's FIN arrived
	pausedAt   bool // a PAUSE arrived, not yet answered nor followed by data
	probing    bool // this direct phase's first ADVERT is out, no DIRECT yet

	stats Stats
}

// New returns an engine for one end of a connection.
func New(cfg Config) (*Engine, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.AckThreshold == 0 {
		cfg.AckThreshold = max(1, cfg.RecvBuffer/2)
	}
	if cfg.MaxGather == 0 {
		cfg.MaxGather = 8
	}
	return &Engine{
		cfg:  cfg,
		fc:   cfg.PeerFrames,
		slot: true,
		bs:   cfg.PeerRecvBuffer,
	}, nil
}

// Config returns the engine's configuration, with defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats { return e.stats }

// QueueSend adds a send of n bytes with the caller's identifier id to the
// send queue without starting any transfer; a caller that queues several
// sends and then calls Pump lets the engine coalesce them. Use PostSend to
// queue and pump at once.
func (e *Engine) QueueSend(out []Action, id uint64, n int) []Action {
	switch {
	case e.dead:
		return append(out, Action{Kind: SendDone, ID: id, Err: e.deadErr})
	case e.shutdown:
		return append(out, Action{Kind: SendDone, ID: id, Err: errPipe})
	case e.gone:
		return append(out, Action{Kind: SendDone, ID: id, Err: e.goneErr})
	case n < 0:
		return append(out, Action{Kind: SendDone, ID: id, Err: errInval})
	}
	s := sendReq{id: id, no: e.nextNo, n: n}
	e.nextNo++
	if n == 0 && e.cfg.Type == Stream {
		s.all = true // nothing to transfer
	}
	e.sends.push(s)
	if s.all {
		e.skipIssued()
		out = e.completeSends(out)
	}
	return out
}

// PostSend is QueueSend followed by Pump.
func (e *Engine) PostSend(out []Action, id uint64, n int) []Action {
	out = e.QueueSend(out, id, n)
	return e.Pump(out)
}

// PostRecv adds a recv of n bytes (n >= 1) with the caller's identifier id.
// With waitAll (MSG_WAITALL, stream mode only) the recv completes only when
// n bytes have arrived or the stream has ended.
func (e *Engine) PostRecv(out []Action, id uint64, n int, waitAll bool) []Action {
	switch {
	case e.dead:
		return append(out, Action{Kind: RecvDone, ID: id, Err: e.deadErr})
	case n < 1:
		return append(out, Action{Kind: RecvDone, ID: id, Err: errInval})
	}
	if e.cfg.Type == SeqPacket {
		waitAll = false // a message is whole anyway
	}
	r := recvReq{id: id, n: n, waitAll: waitAll, state: recvWaiting}
	if e.cfg.Mode == IndirectOnly || e.fin || e.gone {
		r.state = recvPlain
	} else {
		e.kb++
	}
	e.recvs.push(r)
	return e.Pump(out)
}

// Shutdown ends this end's outgoing stream: sends already posted are still
// transferred, then a FIN follows the last byte. Sends posted afterwards
// complete with EPIPE.
func (e *Engine) Shutdown(out []Action) []Action {
	if e.dead || e.gone || e.shutdown {
		return out
	}
	e.shutdown = true
	return e.Pump(out)
}

// Abort fails the connection: every posted send and recv completes with err
// (in post order: sends first, then recvs), and so does every later post.
// Outstanding writes need no WriteDone any more.
func (e *Engine) Abort(out []Action, err error) []Action {
	if e.dead {
		return out
	}
	e.dead, e.deadErr = true, err
	for e.sends.len() > 0 {
		s := e.sends.pop()
		out = append(out, Action{Kind: SendDone, ID: s.id, Err: err})
	}
	for e.recvs.len() > 0 {
		r := e.recvs.pop()
		out = append(out, Action{Kind: RecvDone, ID: r.id, Len: r.filled, Err: err})
	}
	e.cur, e.adv, e.kb = 0, 0, 0
	e.writes = fifo[uint64]{}
	return out
}

// PeerGone reports that the connection is gone while this end still
// stands: the peer closed or reset it, or died. No frame will arrive and
// none can leave. What already arrived is kept (a byte whose send
// completed at the peer is never lost because the peer went): the recvs
// still take every byte (every whole message) the stream buffer holds, in
// order, and then the end of the stream if the peer's FIN arrived, or err
// if it did not. In stream mode a recv holding bytes completes with them
// (a short MSG_WAITALL recv) and err goes to the next one; in message mode
// a message the peer had not finished is dropped. Every send not yet
// complete fails with err, and so does every later send; later recvs
// complete as above. Outstanding writes need no WriteDone any more.
func (e *Engine) PeerGone(out []Action, err error) []Action {
	if e.dead || e.gone {
		return out
	}
	if mut.GoneDiscards {
		return e.Abort(out, err)
	}
	e.gone, e.goneErr = true, err
	for e.sends.len() > 0 {
		s := e.sends.pop()
		out = append(out, Action{Kind: SendDone, ID: s.id, Err: err})
	}
	e.cur = 0
	e.writes = fifo[uint64]{}
	e.adverts = fifo[advert]{}
	e.paused, e.pauseSent = false, false
	// Nothing more will be advertised.
	for i := e.adv; i < e.recvs.len(); i++ {
		if r := e.recvs.at(i); r.state == recvWaiting {
			r.state = recvPlain
		}
	}
	e.kb = 0
	if e.cfg.Type == SeqPacket {
		// The segments after the last whole message will never be
		// completed by the rest of their message.
		keep := e.segs.len()
		for keep > 0 && !e.segs.at(keep-1).eom {
			keep--
			e.br -= e.segs.at(keep).n
		}
		e.segs.truncate(keep)
	}
	return e.finishGone(out)
}

// finishGone completes the pending recvs of a connection that is gone once
// its stream buffer has nothing more for them.
func (e *Engine) finishGone(out []Action) []Action {
	if !e.gone || e.fin || e.br > 0 || e.segs.len() > 0 {
		return out
	}
	if mut.GoneEOF {
		e.fin = true
		return e.finishAtEOF(out)
	}
	for e.recvs.len() > 0 {
		r := e.recvs.at(0)
		if e.cfg.Type == Stream && r.filled > 0 {
			out = e.completeRecv(out, nil)
			continue
		}
		out = e.completeRecv(out, e.goneErr)
	}
	return out
}

// Dead reports whether the engine was aborted.
func (e *Engine) Dead() bool { return e.dead }

// Gone reports whether PeerGone was called (and Abort was not).
func (e *Engine) Gone() bool { return e.gone && !e.dead }

// Done reports whether both directions have ended in order: this end's FIN
// has been sent and all its sends completed, and the peer's FIN has arrived
// and every byte before it has been copied out.
func (e *Engine) Done() bool {
	return e.finSent && e.sends.len() == 0 && e.fin && e.br == 0 && e.segs.len() == 0
}

// WriteDone reports that the oldest outstanding write has completed.
func (e *Engine) WriteDone(out []Action) ([]Action, error) {
	if e.dead || e.gone {
		return out, nil
	}
	if e.writes.len() == 0 {
		return out, fmt.Errorf("%w: write completion with no write outstanding", ErrProtocol)
	}
	no := e.writes.pop()
	s := e.sends.at(int(no - e.sends.at(0).no))
	s.writes--
	out = e.completeSends(out)
	return e.Pump(out), nil
}

// completeSends completes, in order, every send at the head of the queue
// whose transfers are all done.
func (e *Engine) completeSends(out []Action) []Action {
	for e.sends.len() > 0 {
		s := e.sends.at(0)
		if !s.all || s.writes > 0 || s.awaitAck {
			break
		}
		a := Action{Kind: SendDone, ID: s.id, Len: s.n, Err: s.err}
		if s.err != nil {
			a.Len = 0
		}
		out = append(out, a)
		e.sends.pop()
		if e.cur > 0 {
			e.cur--
		}
	}
	return out
}

// skipIssued moves e.cur past sends that need no (more) transfers: empty
// sends on a stream.
func (e *Engine) skipIssued() {
	for e.cur < e.sends.len() && e.sends.at(e.cur).all {
		e.cur++
	}
}

// OnFrame handles a frame from the peer. The caller must repost the frame's
// receive buffer before the peer can use it again; the engine counts it as
// reposted and reports it to the peer as a credit. An error means the peer
// broke the protocol: the caller should Abort.
func (e *Engine) OnFrame(out []Action, f *Frame) ([]Action, error) {
	if e.dead {
		return out, nil
	}
	if e.gone {
		return out, fmt.Errorf("%w: frame after the connection went", ErrProtocol)
	}
	if f.Type == FrameCredit {
		if e.slotOwed {
			return out, fmt.Errorf("%w: second CREDIT frame before the slot was returned", ErrProtocol)
		}
		e.slotOwed = true
	} else {
		e.owed++
		if e.owed > e.cfg.Frames {
			return out, fmt.Errorf("%w: more frames than buffers", ErrProtocol)
		}
	}
	e.fc += int(f.Credits)
	if e.fc > e.cfg.PeerFrames {
		return out, fmt.Errorf("%w: %d frame credits returned, more than the peer's %d buffers", ErrProtocol, f.Credits, e.cfg.PeerFrames)
	}
	e.held = f.Flags&FlagHeld != 0
	if f.Flags&FlagSlot != 0 {
		if e.slot {
			return out, fmt.Errorf("%w: credit slot returned twice", ErrProtocol)
		}
		e.slot = true
	}
	var err error
	switch f.Type {
	case FrameAdvert:
		err = e.onAdvert(f)
	case FrameAck:
		out, err = e.onAck(out, f)
	case FrameDirect:
		out, err = e.onDirect(out, f)
	case FrameIndirect:
		err = e.onIndirect(f)
	case FrameFin:
		out, err = e.onFin(out, f)
	case FramePause:
		err = e.onPause(f)
	case FrameCredit:
	default:
		err = fmt.Errorf("%w: frame type %v", ErrProtocol, f.Type)
	}
	if err != nil {
		return out, err
	}
	return e.Pump(out), nil
}

func (e *Engine) onAdvert(f *Frame) error {
	if e.cfg.Mode == IndirectOnly {
		return fmt.Errorf("%w: ADVERT in indirect-only mode", ErrProtocol)
	}
	if f.Len == 0 {
		return fmt.Errorf("%w: empty ADVERT", ErrProtocol)
	}
	if !f.Phase.IsDirect() {
		return fmt.Errorf("%w: ADVERT in indirect phase %d", ErrProtocol, f.Phase)
	}
	e.adverts.push(advert{
		phase:   f.Phase,
		seq:     f.Seq,
		id:      f.ID,
		n:       int(f.Len),
		waitAll: f.Flags&FlagWaitAll != 0,
		rkey:    f.RKey,
		addr:    f.Addr,
	})
	return nil
}

// onPause: the peer's sender waits, at f.Seq, for the ADVERTs this end's
// FlagHeld promised.
func (e *Engine) onPause(f *Frame) error {
	switch {
	case e.cfg.Mode != Dynamic || e.cfg.Type != Stream:
		return fmt.Errorf("%w: PAUSE in %v %v mode", ErrProtocol, e.cfg.Mode, e.cfg.Type)
	case f.Seq != e.arr:
		return fmt.Errorf("%w: PAUSE at sequence %d, expected %d", ErrProtocol, f.Seq, e.arr)
	case e.pausedAt:
		return fmt.Errorf("%w: second PAUSE at sequence %d", ErrProtocol, f.Seq)
	}
	e.pausedAt = true
	return nil
}

func (e *Engine) onAck(out []Action, f *Frame) ([]Action, error) {
	if f.Flags&FlagResume != 0 && e.paused && f.Seq == e.ss {
		e.paused, e.pauseSent = false, false
	}
	if e.bs+int(f.Len) > e.cfg.PeerRecvBuffer {
		return out, fmt.Errorf("%w: ACK returns more stream-buffer space than was used", ErrProtocol)
	}
	e.bs += int(f.Len)
	if f.Msgs == 0 {
		if f.Flags&FlagTooLong != 0 {
			return out, fmt.Errorf("%w: too-long flag on an ACK of no message", ErrProtocol)
		}
		return out, nil
	}
	// Message mode: the receiver consumed f.Msgs messages sent indirectly.
	left := int(f.Msgs)
	for i := 0; i < e.sends.len() && left > 0; i++ {
		s := e.sends.at(i)
		if !s.awaitAck {
			continue
		}
		if !s.all {
			break
		}
		s.awaitAck = false
		left--
		if left == 0 && f.Flags&FlagTooLong != 0 {
			s.err = errMsgSize
			e.stats.MessagesTooLong++
		}
	}
	if left > 0 {
		return out, fmt.Errorf("%w: ACK of %d messages not sent", ErrProtocol, left)
	}
	return e.completeSends(out), nil
}

func (e *Engine) onDirect(out []Action, f *Frame) ([]Action, error) {
	if e.recvs.len() == 0 {
		return out, fmt.Errorf("%w: direct transfer with no recv posted", ErrProtocol)
	}
	r := e.recvs.at(0)
	switch {
	case r.state != recvAdvertised || r.advert != f.ID:
		return out, fmt.Errorf("%w: direct transfer for ADVERT %d, but the next recv is not that ADVERT's", ErrProtocol, f.ID)
	case r.stale:
		return out, fmt.Errorf("%w: direct transfer into stale ADVERT %d", ErrProtocol, f.ID)
	case f.Phase != r.phase || f.Phase != e.pr:
		return out, fmt.Errorf("%w: direct transfer in phase %d, ADVERT %d in phase %d, receiver in phase %d", ErrProtocol, f.Phase, f.ID, r.phase, e.pr)
	case f.Seq != e.arr:
		return out, fmt.Errorf("%w: direct transfer at sequence %d, expected %d", ErrProtocol, f.Seq, e.arr)
	case int(f.Len) > r.n-r.filled:
		return out, fmt.Errorf("%w: direct transfer of %d bytes into %d free", ErrProtocol, f.Len, r.n-r.filled)
	}
	n := int(f.Len)
	e.pausedAt, e.probing = false, false
	if e.cfg.Type == SeqPacket {
		e.arr++
		e.sr++
		r.filled = n
		var err error
		if f.Flags&FlagTooLong != 0 {
			err = errMsgSize
			e.stats.MessagesTooLong++
		}
		return e.completeRecv(out, err), nil
	}
	if n == 0 {
		return out, fmt.Errorf("%w: empty direct transfer", ErrProtocol)
	}
	e.arr = e.arr.Add(uint64(n))
	e.sr = e.sr.Add(uint64(n))
	r.filled += n
	if !r.waitAll {
		if !mut.NoEstimateCorrection {
			e.sest = e.sest.Add(uint64(n - 1))
		}
		return e.completeRecv(out, nil), nil
	}
	if r.filled == r.n {
		return e.completeRecv(out, nil), nil
	}
	return out, nil
}

func (e *Engine) onIndirect(f *Frame) error {
	n := int(f.Len)
	switch {
	case e.cfg.Mode == DirectOnly:
		return fmt.Errorf("%w: indirect transfer in direct-only mode", ErrProtocol)
	case f.Phase.IsDirect():
		return fmt.Errorf("%w: indirect transfer in direct phase %d", ErrProtocol, f.Phase)
	case f.Seq != e.arr:
		return fmt.Errorf("%w: indirect transfer at sequence %d, expected %d", ErrProtocol, f.Seq, e.arr)
	case int(f.RingOff) != e.rwpos:
		return fmt.Errorf("%w: indirect transfer at stream-buffer offset %d, expected %d", ErrProtocol, f.RingOff, e.rwpos)
	case n > e.cfg.RecvBuffer-e.rwpos || e.br+e.unacked+n > e.cfg.RecvBuffer:
		return fmt.Errorf("%w: indirect transfer of %d bytes overruns the stream buffer", ErrProtocol, n)
	case e.cfg.Type == Stream && (n == 0 || f.Flags&FlagEOM != 0):
		return fmt.Errorf("%w: empty or message-marked indirect transfer on a stream", ErrProtocol)
	}
	if e.pr.IsDirect() && !mut.NoLeaveDirect {
		// Every outstanding ADVERT is now stale: the sender will discard
		// it, and its recv will be filled from the stream buffer.
		e.pr = e.pr.Next()
		e.stats.ReceiverPhaseSwitches++
		for i := 0; i < e.recvs.len(); i++ {
			r := e.recvs.at(i)
			if r.state == recvAdvertised && !r.stale {
				if r.filled > 0 {
					return fmt.Errorf("%w: indirect transfer while ADVERT %d is partly filled", ErrProtocol, r.advert)
				}
				r.stale = true
				e.ka++
			}
		}
	}
	e.pausedAt = false
	e.br += n
	e.rwpos += n
	if e.rwpos == e.cfg.RecvBuffer {
		e.rwpos = 0
	}
	if e.cfg.Type == SeqPacket {
		eom := f.Flags&FlagEOM != 0
		e.segs.push(segment{n: n, eom: eom})
		if eom {
			e.arr++
		}
	} else {
		e.arr = e.arr.Add(uint64(n))
	}
	return nil
}

func (e *Engine) onFin(out []Action, f *Frame) ([]Action, error) {
	if e.fin {
		return out, fmt.Errorf("%w: second FIN", ErrProtocol)
	}
	if f.Seq != e.arr {
		return out, fmt.Errorf("%w: FIN at sequence %d, expected %d", ErrProtocol, f.Seq, e.arr)
	}
	e.fin = true
	// Recvs not advertised yet never will be.
	for i := 0; i < e.recvs.len(); i++ {
		if r := e.recvs.at(i); r.state == recvWaiting {
			r.state = recvPlain
		}
	}
	e.kb = 0
	return e.finishAtEOF(out), nil
}

// finishAtEOF completes the pending recvs once the peer's stream has ended and
// its stream buffer is drained.
func (e *Engine) finishAtEOF(out []Action) []Action {
	if !e.fin || e.br > 0 || e.segs.len() > 0 {
		return out
	}
	for e.recvs.len() > 0 {
		eof := e.recvs.at(0).filled == 0
		out = e.completeRecv(out, nil)
		out[len(out)-1].EOF = eof
	}
	return out
}

// completeRecv completes the head recv with its filled bytes.
func (e *Engine) completeRecv(out []Action, err error) []Action {
	r := e.recvs.pop()
	switch {
	case r.stale:
		e.ka--
	case r.state == recvWaiting:
		e.kb--
	}
	if e.adv > 0 {
		e.adv--
	}
	a := Action{Kind: RecvDone, ID: r.id, Len: r.filled, Err: err}
	if err != nil {
		a.Len = 0
	}
	return append(out, a)
}

// CanCopy reports whether Copy would move data out of the stream buffer.
func (e *Engine) CanCopy() bool {
	if e.dead || e.recvs.len() == 0 {
		return false
	}
	if e.cfg.Type == SeqPacket {
		// After a too-long message, copying waits for its ACK to go.
		return e.segs.len() > 0 && (!e.ackTooLong || e.gone)
	}
	return e.br > 0
}

// Copy copies data from the stream buffer into posted recvs (algorithm 4),
// completing recvs as they fill, then pumps.
func (e *Engine) Copy(out []Action) []Action {
	if e.dead {
		return out
	}
	if e.cfg.Type == SeqPacket {
		out = e.copyMessages(out)
	} else {
		out = e.copyStream(out)
	}
	return e.Pump(out)
}

func (e *Engine) copyStream(out []Action) []Action {
	for e.br > 0 && e.recvs.len() > 0 {
		r := e.recvs.at(0)
		lc := min(e.br, r.n-r.filled)
		out = e.copyOut(out, r, lc)
		e.sr = e.sr.Add(uint64(lc))
		switch {
		case r.state == recvAdvertised && !r.waitAll:
			// The ADVERT counted one byte for this recv.
			e.sest = e.sest.Add(uint64(lc - 1))
		case r.state != recvAdvertised && !mut.LiteralCopyOut:
			// Never advertised, so never counted: keep S'_r with S_r.
			e.sest = e.sest.Add(uint64(lc))
		}
		if !r.waitAll || r.filled == r.n {
			out = e.completeRecv(out, nil)
		}
	}
	return out
}

// copyOut emits the copy of lc bytes from the head of the stream buffer to
// recv r (two copies when the data wraps around the end of the buffer).
func (e *Engine) copyOut(out []Action, r *recvReq, lc int) []Action {
	for left := lc; left > 0; {
		c := min(left, e.cfg.RecvBuffer-e.rpos)
		out = append(out, Action{Kind: CopyOut, ID: r.id, Off: r.filled, Len: c, RingOff: e.rpos})
		r.filled += c
		e.consume(c)
		left -= c
	}
	e.stats.BytesCopied += uint64(lc)
	return out
}

// consume frees n bytes at the head of the stream buffer.
func (e *Engine) consume(n int) {
	e.br -= n
	e.unacked += n
	e.rpos += n
	if e.rpos == e.cfg.RecvBuffer {
		e.rpos = 0
	}
}

func (e *Engine) copyMessages(out []Action) []Action {
	for e.segs.len() > 0 && e.recvs.len() > 0 {
		if e.ackTooLong && !e.gone {
			// An ACK reporting a too-long message is still to be sent:
			// wait, so that each such ACK names exactly one message.
			break
		}
		seg := e.segs.at(0)
		r := e.recvs.at(0)
		if !r.tooLong && seg.n > r.n-r.filled {
			// Longer than the recv: the recv fails once the whole
			// message has arrived and been dropped.
			r.tooLong = true
			e.stats.MessagesTooLong++
		}
		if r.tooLong {
			if seg.n > 0 {
				out = append(out, Action{Kind: Discard, Len: seg.n, RingOff: e.rpos})
			}
			e.consume(seg.n)
		} else {
			out = e.copyOut(out, r, seg.n)
		}
		eom := seg.eom
		e.segs.pop()
		if !eom {
			continue
		}
		if r.state != recvAdvertised && !mut.LiteralCopyOut {
			e.sest++ // never advertised, so never counted
		}
		e.sr++
		e.msgs++
		var err error
		if r.tooLong {
			e.ackTooLong = true
			err = errMsgSize
		}
		out = e.completeRecv(out, err)
	}
	return out
}

// Pump lets the engine act on its current state: send ACKs, judge new recvs
// for ADVERTs (algorithm 2), start transfers for queued sends (algorithm 1),
// send a FIN after the last byte once shut down, and return frame credits.
// Every input method pumps; call Pump directly after QueueSend.
func (e *Engine) Pump(out []Action) []Action {
	if e.dead {
		return out
	}
	out = e.finishAtEOF(out)
	if e.gone {
		return e.finishGone(out)
	}
	out = e.pumpAck(out)
	out = e.pumpAdverts(out)
	out = e.pumpSends(out)
	if e.shutdown && !e.finSent && e.cur == e.sends.len() && e.canFrame() {
		e.finSent = true
		out = e.frame(out, 0, Frame{Type: FrameFin, Seq: e.ss})
	}
	out = e.pumpResume(out)
	if e.owed >= max(1, e.cfg.Frames/2) && e.slot {
		e.slot = false
		e.stats.CreditFrames++
		f := Frame{Type: FrameCredit, Credits: uint16(e.owed)}
		e.owed = 0
		if e.slotOwed {
			f.Flags |= FlagSlot
			e.slotOwed = false
		}
		f.Flags |= e.hint()
		out = append(out, Action{Kind: SendFrame, Frame: f})
	}
	return out
}

// canFrame reports whether a regular frame may be sent now, counting a stall
// when it may not.
func (e *Engine) canFrame() bool {
	if e.fc > 0 {
		e.fstalled = false
		return true
	}
	if !e.fstalled {
		e.fstalled = true
		e.stats.FrameStalls++
	}
	return false
}

// frame emits a regular frame, returning this end's owed credits with it.
func (e *Engine) frame(out []Action, id uint64, f Frame) []Action {
	e.fc--
	f.Credits = uint16(e.owed)
	e.owed = 0
	if e.slotOwed {
		f.Flags |= FlagSlot
		e.slotOwed = false
	}
	f.Flags |= e.hint()
	return append(out, Action{Kind: SendFrame, ID: id, Frame: f})
}

// hint returns the FlagHeld bit for a frame this end sends now.
func (e *Engine) hint() uint8 {
	if e.holding() {
		return FlagHeld
	}
	return 0
}

// holding reports whether the receiver has ADVERTs out or to come without
// more data from the stream buffer (departure 11): in dynamic mode on a
// stream, either the oldest pending recv is advertised and not stale (a
// direct phase: the sender has its ADVERT or will have it), or copying out
// what the stream buffer holds now would complete every pending recv up to
// one that is waiting and empty, which is then advertised (b_r = k_a = 0).
// It is false whenever the receiver needs more data from the stream buffer
// to make progress: a sender that pauses for the hint is then told to go on.
func (e *Engine) holding() bool {
	if !e.hinting() || e.fin {
		return false
	}
	rem := e.br
	for i := 0; i < e.recvs.len(); i++ {
		r := e.recvs.at(i)
		switch {
		case r.state == recvAdvertised && !r.stale:
			return true
		case r.state == recvWaiting && r.filled == 0 && rem == 0 && (r.n >= e.cfg.AdvertMin || mut.HeldSmall):
			return true
		}
		room := r.n - r.filled
		if (rem == 0 || (r.waitAll && rem < room)) && !mut.HeldNeedsData {
			// It needs more data from the stream buffer.
			return false
		}
		rem -= min(rem, room)
	}
	return false
}

// hinting reports whether this connection uses the held-recv hint
// (departure 11): dynamic mode on a stream, unless turned off.
func (e *Engine) hinting() bool {
	return e.cfg.Mode == Dynamic && e.cfg.Type == Stream && !e.cfg.NoHeldHint
}

// pumpResume answers a PAUSE once the receiver no longer holds: an ACK with
// FlagResume at the sequence number the PAUSE named lets the sender go on
// through the stream buffer.
func (e *Engine) pumpResume(out []Action) []Action {
	if !e.pausedAt || e.holding() || mut.NoResume || !e.canFrame() {
		return out
	}
	e.pausedAt = false
	f := Frame{Type: FrameAck, Flags: FlagResume, Len: uint32(e.unacked), Seq: e.arr}
	e.unacked = 0
	e.stats.AcksSent++
	e.stats.ResumeFrames++
	return e.frame(out, 0, f)
}

func (e *Engine) pumpAck(out []Action) []Action {
	for {
		if e.msgs == 0 && (e.unacked == 0 || e.unacked < e.cfg.AckThreshold) {
			return out
		}
		if !e.canFrame() {
			return out
		}
		f := Frame{Type: FrameAck, Len: uint32(e.unacked), Msgs: uint32(e.msgs)}
		if e.ackTooLong {
			f.Flags |= FlagTooLong
		}
		e.unacked, e.msgs, e.ackTooLong = 0, 0, false
		e.stats.AcksSent++
		out = e.frame(out, 0, f)
		if e.cfg.Type != SeqPacket || e.segs.len() == 0 {
			return out
		}
		// Resume copying after a too-long message.
		out = e.copyMessages(out)
		out = e.finishAtEOF(out)
	}
}

// pumpAdverts advertises waiting recvs, oldest first (algorithm 2). A recv
// posted while the receiver holds off (b_r > 0 or k_a > 0) waits, counted in
// k_b; once the hold-off ends it is advertised like a new recv, provided it
// has received nothing from the stream buffer. A later recv is never
// advertised while an earlier one waits: the sender fills ADVERTs in order.
func (e *Engine) pumpAdverts(out []Action) []Action {
	for i := e.adv; i < e.recvs.len(); i++ {
		r := e.recvs.at(i)
		if r.state != recvWaiting {
			continue
		}
		if e.holdOff() {
			break
		}
		if r.n < e.cfg.AdvertMin && e.cfg.Mode == Dynamic {
			// Too small to be worth a direct transfer of its own: it,
			// and the recvs after it, fill from the stream buffer
			// (departure 12).
			if mut.AdvertPastSmall {
				continue
			}
			break
		}
		if r.filled > 0 {
			// Partly filled from the stream buffer: the rest comes from
			// there too.
			if mut.NoHoldOffKb {
				continue
			}
			break
		}
		if e.probing && e.recvs.at(0).state == recvAdvertised {
			// One ADVERT opens a direct phase; the rest follow its
			// DIRECT (departure 11).
			break
		}
		if !e.canFrame() {
			break
		}
		if !e.pr.IsDirect() {
			e.pr = e.pr.Next()
			e.stats.ReceiverPhaseSwitches++
			e.probing = e.hinting() && r.n >= e.hintMin(e.cfg.RecvBuffer)
		}
		r.state = recvAdvertised
		r.advert = e.nextAdvert
		r.phase = e.pr
		e.nextAdvert++
		e.kb--
		f := Frame{Type: FrameAdvert, Phase: e.pr, Seq: e.sest, ID: r.advert, Len: uint32(r.n)}
		if r.waitAll {
			f.Flags |= FlagWaitAll
			e.sest = e.sest.Add(uint64(r.n))
		} else {
			e.sest++
		}
		e.stats.AdvertsSent++
		out = e.frame(out, r.id, f)
	}
	for e.adv < e.recvs.len() && e.recvs.at(e.adv).state == recvAdvertised {
		e.adv++
	}
	return out
}

// holdOff reports whether the receiver must not advertise: data is waiting in
// the stream buffer, or recvs advertised in an earlier direct phase are still
// to be filled from it.
func (e *Engine) holdOff() bool {
	return (e.br > 0 && !mut.NoHoldOffBr) || (e.ka > 0 && !mut.NoHoldOffKa)
}

// pumpSends starts transfers for queued sends (algorithm 1).
func (e *Engine) pumpSends(out []Action) []Action {
	for e.skipIssued(); e.cur < e.sends.len(); e.skipIssued() {
		if !e.canFrame() {
			return out
		}
		if !e.msgInRing {
			if a := e.freshAdvert(); a != nil {
				out = e.direct(out, a)
				continue
			}
		}
		if e.cfg.Mode == DirectOnly {
			return out
		}
		if e.pauseForHeld() {
			if !e.hstalled {
				e.hstalled = true
				e.stats.HeldPauses++
			}
			e.paused = true
			if !e.pauseSent {
				e.pauseSent = true
				e.stats.PauseFrames++
				out = e.frame(out, 0, Frame{Type: FramePause, Seq: e.ss})
			}
			return out
		}
		e.hstalled = false
		if e.bs == 0 && !(e.cfg.Type == SeqPacket && e.sends.at(e.cur).n == 0) {
			if !e.cstalled {
				e.cstalled = true
				e.stats.CreditStalls++
			}
			return out
		}
		e.cstalled = false
		if e.ps.IsDirect() {
			e.ps = e.ps.Next()
			e.stats.SenderPhaseSwitches++
		}
		out = e.indirect(out)
	}
	return out
}

// pauseForHeld reports whether the sender, with no usable ADVERT, holds back
// an indirect transfer (departure 11): it is paused and has not been told to
// resume, or the receiver's last frame said it has ADVERTs out or to come
// without more data (FlagHeld) and the next send has at least HintMin bytes
// left. (canFrame has been checked: a PAUSE frame can go at once.)
func (e *Engine) pauseForHeld() bool {
	if !e.hinting() || !(e.held || e.paused) {
		return false
	}
	s := e.sends.at(e.cur)
	return e.paused || s.n-s.issued >= e.hintMin(e.cfg.PeerRecvBuffer)
}

// hintMin is Config.HintMin for a stream buffer of ring bytes.
func (e *Engine) hintMin(ring int) int {
	if e.cfg.HintMin > 0 {
		return e.cfg.HintMin
	}
	return max(1, ring/32)
}

// freshAdvert drops stale ADVERTs from the head of q_A and returns the head
// if it is usable, switching the sender to a direct phase.
func (e *Engine) freshAdvert() *advert {
	for e.adverts.len() > 0 {
		a := e.adverts.at(0)
		if !e.ps.IsDirect() && e.stale(a) {
			if e.ps.Before(a.phase) && !mut.NoPhaseJump {
				// Jump past the ADVERT's phase, so that later ADVERTs
				// of that same direct phase are recognised as stale too.
				e.ps = a.phase.Next()
			}
			e.adverts.pop()
			e.stats.AdvertsDiscarded++
			continue
		}
		if !e.ps.IsDirect() {
			e.ps = a.phase
			e.stats.SenderPhaseSwitches++
		}
		return a
	}
	return nil
}

// stale is the sender's test for an ADVERT met in an indirect phase.
func (e *Engine) stale(a *advert) bool {
	if a.phase.Before(e.ps) && !mut.NoPhaseCheck {
		return true
	}
	return a.seq.Before(e.ss) && !mut.AcceptOldSeq
}

// direct emits one direct transfer into ADVERT a.
func (e *Engine) direct(out []Action, a *advert) []Action {
	e.paused, e.pauseSent = false, false
	f := Frame{Type: FrameDirect, Phase: e.ps, Seq: e.ss, ID: a.id}
	if e.cfg.Type == SeqPacket {
		s := e.sends.at(e.cur)
		f.Flags = FlagEOM
		if s.n > a.n {
			// The message does not fit: refuse it at both ends.
			f.Flags |= FlagTooLong
			s.err = errMsgSize
			e.stats.MessagesTooLong++
		} else {
			// An empty message too: its write of 0 bytes moves nothing,
			// but its WriteDone, after the frame, completes the send
			// once the message has arrived (not before, or a close that
			// follows could lose a message whose send completed).
			f.Len = uint32(s.n)
			out = e.write(out, WriteDirect, s, 0, s.n, a.rkey, a.addr, 0)
			e.stats.BytesDirect += uint64(s.n)
		}
		s.issued, s.all = s.n, true
		e.cur++
		e.ss++
		e.adverts.pop()
		e.stats.AdvertsUsed++
		e.stats.TransfersDirect++
		out = e.frame(out, 0, f)
		return e.completeSends(out)
	}
	room := a.n - a.filled
	var n int
	out, n = e.gather(out, WriteDirect, room, a.rkey, a.addr+uint64(a.filled), 0)
	f.Len = uint32(n)
	if a.waitAll {
		f.Flags |= FlagWaitAll
	}
	a.filled += n
	e.ss = e.ss.Add(uint64(n))
	e.stats.BytesDirect += uint64(n)
	e.stats.TransfersDirect++
	if !a.waitAll || a.filled == a.n {
		e.adverts.pop()
		e.stats.AdvertsUsed++
	}
	return e.frame(out, 0, f)
}

// indirect emits one indirect transfer into the peer's stream buffer.
func (e *Engine) indirect(out []Action) []Action {
	room := e.bs
	if !mut.RingOverrun {
		room = min(room, e.cfg.PeerRecvBuffer-e.wpos)
	} else {
		room = e.cfg.PeerRecvBuffer - e.wpos
	}
	if e.cfg.MaxIndirect > 0 {
		room = min(room, e.cfg.MaxIndirect)
	}
	f := Frame{Type: FrameIndirect, Phase: e.ps, Seq: e.ss, RingOff: uint32(e.wpos)}
	var n int
	if e.cfg.Type == SeqPacket {
		s := e.sends.at(e.cur)
		n = min(room, s.n-s.issued)
		if n > 0 {
			out = e.write(out, WriteIndirect, s, s.issued, n, 0, 0, e.wpos)
		}
		s.issued += n
		if s.issued == s.n {
			f.Flags |= FlagEOM
			s.all, s.awaitAck = true, true
			e.cur++
			e.ss++
			e.msgInRing = false
		} else {
			e.msgInRing = true
		}
	} else {
		out, n = e.gather(out, WriteIndirect, room, 0, 0, e.wpos)
		e.ss = e.ss.Add(uint64(n))
	}
	f.Len = uint32(n)
	e.bs -= n
	e.wpos += n
	if e.wpos == e.cfg.PeerRecvBuffer {
		e.wpos = 0
	}
	e.stats.BytesIndirect += uint64(n)
	e.stats.TransfersIndirect++
	return e.frame(out, 0, f)
}

// gather emits writes of up to room bytes taken from the queued sends
// starting at e.cur, from at most MaxGather sends (stream mode).
func (e *Engine) gather(out []Action, k Kind, room int, rkey uint32, addr uint64, ringOff int) ([]Action, int) {
	total := 0
	for pieces := 0; room > 0 && e.cur < e.sends.len() && pieces < e.cfg.MaxGather; pieces++ {
		s := e.sends.at(e.cur)
		if s.all {
			e.cur++
			continue
		}
		n := min(room, s.n-s.issued)
		out = e.write(out, k, s, s.issued, n, rkey, addr+uint64(total), ringOff+total)
		s.issued += n
		total += n
		room -= n
		if s.issued == s.n {
			s.all = true
			e.cur++
		}
	}
	return out, total
}

func (e *Engine) write(out []Action, k Kind, s *sendReq, off, n int, rkey uint32, addr uint64, ringOff int) []Action {
	s.writes++
	e.writes.push(s.no)
	a := Action{Kind: k, ID: s.id, Off: off, Len: n}
	if k == WriteDirect {
		a.RKey, a.Addr = rkey, addr
	} else {
		a.RingOff = ringOff
	}
	return append(out, a)
}
