package verbstest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"syscall"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// The wire format of the Peer protocol (ServePeer, NewRemotePeer).
//
// The stream is a sequence of frames: a 4-byte big-endian payload length,
// then the payload, one msg. Every msg carries every field, in a fixed
// order, big-endian, fixed width; byte strings and lists are a 4-byte count
// then their elements. It is wasteful but has one encoder and one decoder,
// and the decoder checks every length and count against the bytes that are
// left before it allocates, so that arbitrary input yields an error, never
// a panic or a large allocation.

// maxFrame bounds a frame's payload; maxRegion bounds the size of a region
// a remote Register may ask for, so that its Read fits in a frame.
const (
	maxFrame  = 64 << 20
	maxRegion = 32 << 20
)

// protocolVersion is what a ping answers; both ends are normally the same
// binary.
const protocolVersion = 1

// msgKind says what a msg is.
type msgKind uint8

const (
	kindRequest msgKind = iota + 1 // a call: client to server
	kindReply                      // its answer: server to client
	kindCancel                     // cancel call ID: client to server
	kindMax     = kindCancel
)

// op names the method a request calls.
type op uint8

const (
	opPing op = iota + 1
	opListen
	opServe
	opServed
	opConnect
	opClose // the Peer's Close; the last request of a stream
	opRegister
	opPostRecv
	opPostSend
	opPoll
	opState
	opWaitError
	opDisconnect
	opQPClose
	opRead
	opWrite
	opDeregister
	opMax = opDeregister
)

var opNames = [...]string{"", "Ping", "Listen", "Serve", "Served", "Connect", "Close", "Register", "PostRecv",
	"PostSend", "Poll", "State", "WaitError", "Disconnect", "QP.Close", "Read", "Write", "Deregister"}

func (o op) String() string {
	if int(o) < len(opNames) && o != 0 {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// wireSGE is a PeerSGE on the wire: the region by its handle.
type wireSGE struct {
	MR       uint64
	Off, Len int64
	Key      mreg.Key
}

// wireError is an error on the wire: its text and the sentinels and errnos
// it satisfies with errors.Is, and the private data of a
// *verbs.RejectError.
type wireError struct {
	Msg        string
	Sentinels  []uint16 // indices into sentinels
	Errnos     []uint32
	Reject     bool
	RejectData []byte
}

// msg is one message of the protocol. Which fields mean something depends
// on Kind and Op; the others are zero.
type msg struct {
	Kind msgKind
	ID   uint64
	Op   op
	// Timeout is what is left of the caller's deadline, in nanoseconds;
	// zero if there is none.
	Timeout int64
	// Handle is the queue pair or region a request acts on, or the new
	// one a reply returns (zero: none).
	Handle uint64
	// N is Register's size, Poll's n, Write's offset, a Register reply's
	// length, a ping reply's version.
	N      int64
	Access mreg.Access
	Addr   string // Listen's answer, Connect's address
	Spec   QPSpec // Serve, Connect
	Reject bool   // Serve
	Data   []byte // private data, region bytes

	// PostSend and PostRecv.
	WRID       uint64
	Opcode     verbs.Opcode
	Signaled   bool
	Imm        uint32
	RemoteAddr uint64
	RKey       mreg.Key
	SGL        []wireSGE

	// Register's answer.
	MRAddr uint64
	LKey   mreg.Key

	State verbs.State
	WCs   []verbs.WC
	Err   *wireError
}

// sentinels are the errors whose identity crosses the wire. The order is
// part of the protocol: append only.
var sentinels = []error{
	verbs.ErrClosed, verbs.ErrInvalid, verbs.ErrQueueFull, verbs.ErrQPState, verbs.ErrBusy,
	verbs.ErrRejected, verbs.ErrDisconnected, verbs.ErrTerminated, verbs.ErrNoRecv,
	verbs.ErrTooLong, verbs.ErrRemoteOperation,
	mreg.ErrInvalid, mreg.ErrInvalidKey, mreg.ErrBounds, mreg.ErrAccess, mreg.ErrBusy,
	mreg.ErrDeregistered, mreg.ErrTableFull,
	context.Canceled, context.DeadlineExceeded,
	io.EOF, io.ErrUnexpectedEOF, io.ErrClosedPipe,
}

// errnos are the errnos checked with errors.Is (an error may match one
// through an Is method); an errno found with errors.As is sent as well.
var errnos = []syscall.Errno{
	syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EAGAIN,
	syscall.EADDRINUSE, syscall.ETIMEDOUT, syscall.EPIPE, syscall.EINVAL,
}

// encodeError returns err's wire form (nil for nil).
func encodeError(err error) *wireError {
	if err == nil {
		return nil
	}
	we := &wireError{Msg: err.Error()}
	for i, s := range sentinels {
		if errors.Is(err, s) {
			we.Sentinels = append(we.Sentinels, uint16(i))
		}
	}
	for _, e := range errnos {
		if errors.Is(err, e) {
			we.Errnos = append(we.Errnos, uint32(e))
		}
	}
	var e syscall.Errno
	if errors.As(err, &e) && !slices.Contains(we.Errnos, uint32(e)) {
		we.Errnos = append(we.Errnos, uint32(e))
	}
	var re *verbs.RejectError
	if errors.As(err, &re) {
		we.Reject = true
		we.RejectData = re.PrivateData
	}
	return we
}

// remoteError is an error that happened in the peer. Its text is the
// peer's, and it satisfies errors.Is for every sentinel and errno the
// peer's error did, and errors.As for *verbs.RejectError if it was one.
type remoteError struct {
	msg  string
	errs []error
}

func (e *remoteError) Error() string   { return e.msg }
func (e *remoteError) Unwrap() []error { return e.errs }

// decodeError returns the error of a wire form (nil for nil).
func decodeError(we *wireError) error {
	if we == nil {
		return nil
	}
	e := &remoteError{msg: we.Msg}
	if we.Reject {
		e.errs = append(e.errs, &verbs.RejectError{PrivateData: we.RejectData})
	}
	for _, i := range we.Sentinels {
		if int(i) < len(sentinels) {
			e.errs = append(e.errs, sentinels[i])
		}
	}
	for _, n := range we.Errnos {
		e.errs = append(e.errs, syscall.Errno(n))
	}
	return e
}

// encoder appends fixed-width big-endian values.
type encoder struct{ b []byte }

func (e *encoder) u8(v uint8)   { e.b = append(e.b, v) }
func (e *encoder) u16(v uint16) { e.b = binary.BigEndian.AppendUint16(e.b, v) }
func (e *encoder) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *encoder) u64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }
func (e *encoder) i64(v int64)  { e.u64(uint64(v)) }
func (e *encoder) int(v int)    { e.i64(int64(v)) }

func (e *encoder) bool(v bool) {
	if v {
		e.u8(1)
	} else {
		e.u8(0)
	}
}

func (e *encoder) bytes(p []byte) {
	e.u32(uint32(len(p)))
	e.b = append(e.b, p...)
}

func (e *encoder) string(s string) {
	e.u32(uint32(len(s)))
	e.b = append(e.b, s...)
}

// decoder reads what encoder wrote. After the first error every read
// returns zero and err keeps that error.
type decoder struct {
	b   []byte
	err error
}

var errShort = errors.New("verbstest: message truncated")

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.err = errShort
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) u8() uint8 {
	if p := d.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (d *decoder) u16() uint16 {
	if p := d.take(2); p != nil {
		return binary.BigEndian.Uint16(p)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if p := d.take(4); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if p := d.take(8); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

func (d *decoder) i64() int64 { return int64(d.u64()) }
func (d *decoder) int() int   { return int(d.i64()) }

func (d *decoder) bool() bool {
	switch v := d.u8(); v {
	case 0:
		return false
	case 1:
		return true
	default:
		d.fail("bad boolean %d", v)
		return false
	}
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("verbstest: malformed message: "+format, args...)
	}
}

// count reads a list's length, each element taking at least size bytes,
// and checks that they can be there.
func (d *decoder) count(size int) int {
	n := d.u32()
	if d.err == nil && uint64(n)*uint64(size) > uint64(len(d.b)) {
		d.fail("%d elements of at least %d bytes in %d bytes", n, size, len(d.b))
		return 0
	}
	return int(n)
}

// bytes reads a byte string, copied; empty reads as nil.
func (d *decoder) bytes() []byte {
	n := d.count(1)
	if n == 0 {
		return nil
	}
	return bytes.Clone(d.take(n))
}

func (d *decoder) string() string {
	n := d.count(1)
	return string(d.take(n))
}

// Sizes of list elements on the wire.
const (
	sgeSize = 8 + 8 + 8 + 4
	wcSize  = 8 + 1 + 1 + 1 + 4 + 4 + 4
)

// marshal appends m's payload to b.
func (m *msg) marshal(b []byte) []byte {
	e := encoder{b: b}
	e.u8(uint8(m.Kind))
	e.u64(m.ID)
	e.u8(uint8(m.Op))
	e.i64(m.Timeout)
	e.u64(m.Handle)
	e.i64(m.N)
	e.u32(uint32(m.Access))
	e.string(m.Addr)
	e.int(m.Spec.SendDepth)
	e.int(m.Spec.RecvDepth)
	e.u8(uint8(m.Spec.RNR))
	e.int(m.Spec.CQDepth)
	e.bool(m.Spec.RelaxedWritePlacement)
	e.bool(m.Reject)
	e.bytes(m.Data)
	e.u64(m.WRID)
	e.u8(uint8(m.Opcode))
	e.bool(m.Signaled)
	e.u32(m.Imm)
	e.u64(m.RemoteAddr)
	e.u32(uint32(m.RKey))
	e.u32(uint32(len(m.SGL)))
	for _, s := range m.SGL {
		e.u64(s.MR)
		e.i64(s.Off)
		e.i64(s.Len)
		e.u32(uint32(s.Key))
	}
	e.u64(m.MRAddr)
	e.u32(uint32(m.LKey))
	e.u32(uint32(m.State))
	e.u32(uint32(len(m.WCs)))
	for _, wc := range m.WCs {
		e.u64(wc.WRID)
		e.u8(uint8(wc.Status))
		e.u8(uint8(wc.Opcode))
		e.u8(uint8(wc.Flags))
		e.u32(wc.QPNum)
		e.u32(wc.ByteLen)
		e.u32(wc.Imm)
	}
	e.bool(m.Err != nil)
	if we := m.Err; we != nil {
		e.string(we.Msg)
		e.u32(uint32(len(we.Sentinels)))
		for _, s := range we.Sentinels {
			e.u16(s)
		}
		e.u32(uint32(len(we.Errnos)))
		for _, n := range we.Errnos {
			e.u32(n)
		}
		e.bool(we.Reject)
		e.bytes(we.RejectData)
	}
	return e.b
}

// unmarshal decodes a payload. It never panics and allocates no more than
// a small multiple of len(b).
func unmarshal(b []byte) (msg, error) {
	d := decoder{b: b}
	var m msg
	m.Kind = msgKind(d.u8())
	m.ID = d.u64()
	m.Op = op(d.u8())
	m.Timeout = d.i64()
	m.Handle = d.u64()
	m.N = d.i64()
	m.Access = mreg.Access(d.u32())
	m.Addr = d.string()
	m.Spec.SendDepth = d.int()
	m.Spec.RecvDepth = d.int()
	m.Spec.RNR = verbs.RNRPolicy(d.u8())
	m.Spec.CQDepth = d.int()
	m.Spec.RelaxedWritePlacement = d.bool()
	m.Reject = d.bool()
	m.Data = d.bytes()
	m.WRID = d.u64()
	m.Opcode = verbs.Opcode(d.u8())
	m.Signaled = d.bool()
	m.Imm = d.u32()
	m.RemoteAddr = d.u64()
	m.RKey = mreg.Key(d.u32())
	if n := d.count(sgeSize); n > 0 {
		m.SGL = make([]wireSGE, n)
		for i := range m.SGL {
			m.SGL[i] = wireSGE{MR: d.u64(), Off: d.i64(), Len: d.i64(), Key: mreg.Key(d.u32())}
		}
	}
	m.MRAddr = d.u64()
	m.LKey = mreg.Key(d.u32())
	m.State = verbs.State(d.u32())
	if n := d.count(wcSize); n > 0 {
		m.WCs = make([]verbs.WC, n)
		for i := range m.WCs {
			m.WCs[i] = verbs.WC{
				WRID: d.u64(), Status: verbs.Status(d.u8()), Opcode: verbs.WCOpcode(d.u8()),
				Flags: verbs.WCFlags(d.u8()), QPNum: d.u32(), ByteLen: d.u32(), Imm: d.u32(),
			}
		}
	}
	if d.bool() {
		we := &wireError{Msg: d.string()}
		if n := d.count(2); n > 0 {
			we.Sentinels = make([]uint16, n)
			for i := range we.Sentinels {
				we.Sentinels[i] = d.u16()
				if d.err == nil && int(we.Sentinels[i]) >= len(sentinels) {
					d.fail("unknown error sentinel %d", we.Sentinels[i])
				}
			}
		}
		if n := d.count(4); n > 0 {
			we.Errnos = make([]uint32, n)
			for i := range we.Errnos {
				we.Errnos[i] = d.u32()
			}
		}
		we.Reject = d.bool()
		we.RejectData = d.bytes()
		m.Err = we
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d bytes after the message", len(d.b))
	}
	if d.err == nil && (m.Kind == 0 || m.Kind > kindMax) {
		d.fail("unknown kind %d", m.Kind)
	}
	if d.err != nil {
		return msg{}, d.err
	}
	return m, nil
}

// appendFrame appends m as a frame: length, then payload.
func appendFrame(b []byte, m *msg) ([]byte, error) {
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	b = m.marshal(b)
	n := len(b) - start - 4
	if n > maxFrame {
		return b[:start], fmt.Errorf("verbstest: %v message of %d bytes exceeds %d", m.Op, n, maxFrame)
	}
	binary.BigEndian.PutUint32(b[start:], uint32(n))
	return b, nil
}

// readFrame reads one frame and decodes it. The payload buffer grows as
// bytes arrive, so that a forged length costs no more than the bytes sent.
// A stream that ends between frames returns io.EOF; one that ends inside a
// frame, io.ErrUnexpectedEOF.
func readFrame(r io.Reader) (msg, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return msg{}, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxFrame {
		return msg{}, fmt.Errorf("verbstest: malformed message: frame of %d bytes exceeds %d", n, maxFrame)
	}
	var payload []byte
	if n <= 64<<10 {
		payload = make([]byte, n)
		if _, err := io.ReadFull(r, payload); err != nil {
			return msg{}, noEOF(err)
		}
	} else {
		var buf bytes.Buffer
		k, err := buf.ReadFrom(io.LimitReader(r, int64(n)))
		if err != nil {
			return msg{}, err
		}
		if k != int64(n) {
			return msg{}, io.ErrUnexpectedEOF
		}
		payload = buf.Bytes()
	}
	return unmarshal(payload)
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
