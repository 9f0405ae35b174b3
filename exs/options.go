package exs

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/exsgo/exs/dynproto"
	"github.com/exsgo/exs/eventq"
	"github.com/exsgo/exs/verbs"
)

// Mode is the protocol mode of a connection: how its bytes travel. Both
// ends of a connection must use the same mode; Connect fails with
// ErrMismatch otherwise. The zero Mode is not a mode.
type Mode uint8

const (
	// ModeDynamic chooses per transfer: directly into the receiver's
	// posted buffer when the receiver has advertised one, otherwise
	// indirectly through its stream buffer. It is the default.
	ModeDynamic Mode = iota + 1
	// ModeDirectOnly always writes directly into an advertised recv
	// buffer: a send waits until the peer posts a recv. No stream buffer
	// is allocated.
	ModeDirectOnly
	// ModeIndirectOnly always goes through the receiver's stream buffer:
	// the receiver copies every byte once more.
	ModeIndirectOnly
)

// String returns "dynamic", "direct-only" or "indirect-only".
func (m Mode) String() string {
	switch m {
	case ModeDynamic:
		return "dynamic"
	case ModeDirectOnly:
		return "direct-only"
	case ModeIndirectOnly:
		return "indirect-only"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

func (m Mode) proto() dynproto.Mode {
	switch m {
	case ModeDirectOnly:
		return dynproto.DirectOnly
	case ModeIndirectOnly:
		return dynproto.IndirectOnly
	}
	return dynproto.Dynamic
}

// SockType is the type of a socket. The zero SockType is not a type.
type SockType uint8

const (
	// SockStream is SOCK_STREAM: a reliable byte stream. A recv completes
	// with 1 to len(buf) bytes (exactly len(buf) with MsgWaitAll, fewer
	// only at the end of the stream), and with 0 bytes at the end of the
	// stream.
	SockStream SockType = iota + 1
	// SockSeqPacket is SOCK_SEQPACKET: reliable messages. Each send is one
	// message that fills exactly one recv; a message longer than its recv
	// fails both the send and the recv with EMSGSIZE. Empty messages are
	// allowed.
	SockSeqPacket
)

// String returns "stream" or "seqpacket".
func (t SockType) String() string {
	switch t {
	case SockStream:
		return "stream"
	case SockSeqPacket:
		return "seqpacket"
	}
	return "SockType(" + strconv.Itoa(int(t)) + ")"
}

func (t SockType) proto() dynproto.SockType {
	if t == SockSeqPacket {
		return dynproto.SeqPacket
	}
	return dynproto.Stream
}

// WaitMode says how a goroutine that has nothing to do waits: a Dequeue on
// a Queue, and a socket's progress goroutine. The zero WaitMode is not a
// mode.
//
// The spinning modes yield the processor between checks (runtime.Gosched).
// A goroutine that holds its thread (runtime.LockOSThread) pays two thread
// hand-offs through the kernel for each yield, which can cut throughput
// tenfold: dequeue from ordinary goroutines, or use WaitNotify on a queue
// read from a held thread.
type WaitMode uint8

const (
	// WaitAdaptive spins for the spin time (WithSpinTime), yielding the
	// processor between checks, and then blocks. It is the default: waking
	// a blocked goroutine on another CPU costs tens of microseconds. While
	// more threads are runnable than the CPUs can run (CPUs shared with
	// other work: the kernel's count of runnable threads, averaged, is one
	// and a half above the CPUs'), the spin is cut to 5 us, so that a
	// waiter leaves the CPU to the work it waits for (the process's own
	// threads beyond one do not count).
	WaitAdaptive WaitMode = iota + 1
	// WaitBusyPoll keeps checking, yielding between checks. It keeps a
	// CPU busy per waiting goroutine. It blocks only while a TCP
	// provider's socket has input that the Go runtime's network poller
	// has not handed over yet: the runtime polls the network only when
	// a processor has nothing to run (with one P and a spinning waiter,
	// round trips over TCP took 10 ms, the runtime's monitor's period). A socket's
	// connection asks its provider not to sleep either
	// (verbs.QPConfig.BusyPoll): the same-host provider's receiver
	// goroutine of the connection then spins too.
	WaitBusyPoll
	// WaitNotify blocks at once.
	WaitNotify
)

// String returns "adaptive", "busy-poll" or "notify".
func (m WaitMode) String() string {
	switch m {
	case WaitAdaptive:
		return "adaptive"
	case WaitBusyPoll:
		return "busy-poll"
	case WaitNotify:
		return "notify"
	}
	return "WaitMode(" + strconv.Itoa(int(m)) + ")"
}

func (m WaitMode) eventq() eventq.WaitMode {
	switch m {
	case WaitBusyPoll:
		return eventq.BusyPoll
	case WaitNotify:
		return eventq.Notify
	}
	return eventq.Adaptive
}

// Defaults and limits of the options.
const (
	// DefaultStreamBuffer is the default size of a connection's stream
	// buffer (WithStreamBuffer).
	DefaultStreamBuffer = 1 << 20
	// DefaultFrames is the default number of protocol frame buffers a
	// connection keeps posted (WithFrames).
	DefaultFrames = 32
	// DefaultMaxSends and DefaultMaxRecvs are the default limits of
	// outstanding sends and recvs per socket (WithOutstanding).
	DefaultMaxSends = 64
	DefaultMaxRecvs = 64
	// DefaultSpinTime is how long WaitAdaptive spins by default.
	DefaultSpinTime = eventq.DefaultSpinTime
	// DefaultConnectTimeout is how long a connect waits for the listening
	// socket's accept by default (WithConnectTimeout).
	DefaultConnectTimeout = 5 * time.Second
	// DefaultBacklog is the backlog of Listen(0): how many connection
	// requests wait for an accept.
	DefaultBacklog = 128

	// MaxStreamBuffer is the largest stream buffer.
	MaxStreamBuffer = 1 << 30
	// MaxFrames is the largest number of frame buffers.
	MaxFrames = 4096
	// MaxOutstanding is the largest limit of outstanding sends or recvs.
	MaxOutstanding = 1 << 16
	// MaxTransfer is the largest buffer one send or recv may take.
	MaxTransfer = 1 << 30
	// MaxBacklog is the largest backlog of Listen.
	MaxBacklog = 1 << 16
)

// Options come in three types, one per call that takes them, so that an
// option given where it does not apply is a compile-time error:
//
//   - StackOption, for NewStack: every option. The socket and queue options
//     given to NewStack become the defaults of the stack's sockets and
//     queues; WithProvider applies to the stack alone.
//   - SocketOption, for Stack.Socket: a socket accepted on a listening
//     socket takes the listening socket's settings.
//   - QueueOption, for Stack.Qcreate.
//
// A bad value (a negative size, an unknown mode, a nil logger) makes the
// call fail with an error matching ErrInvalid that names it; nothing is
// ignored.
type StackOption interface {
	applyStack(*config) error
}

// SocketOption configures a Socket (Stack.Socket), or, given to NewStack,
// every socket of the stack by default. See StackOption.
type SocketOption interface {
	StackOption
	applySocket(*config) error
}

// QueueOption configures a Queue (Stack.Qcreate), or, given to NewStack,
// every queue of the stack by default. See StackOption.
type QueueOption interface {
	StackOption
	applyQueue(*config) error
}

// WaitOption configures how idle goroutines wait: a socket's and a
// queue's. It is a SocketOption and a QueueOption.
type WaitOption interface {
	SocketOption
	QueueOption
}

// socketOpt is a socket option: set checks the value and sets it.
type socketOpt struct{ set func(*config) error }

func (o socketOpt) applyStack(c *config) error  { return o.set(c) }
func (o socketOpt) applySocket(c *config) error { return o.set(c) }

// waitOpt is an option of sockets and queues.
type waitOpt struct{ set func(*config) error }

func (o waitOpt) applyStack(c *config) error  { return o.set(c) }
func (o waitOpt) applySocket(c *config) error { return o.set(c) }
func (o waitOpt) applyQueue(c *config) error  { return o.set(c) }

// stackOnly is an option that applies to the stack alone.
type stackOnly struct{ set func(*config) error }

func (o stackOnly) applyStack(c *config) error { return o.set(c) }

// applyStackOptions applies opts to c.
func (c *config) applyStackOptions(opts []StackOption) error {
	for _, o := range opts {
		if o == nil {
			return fmt.Errorf("%w: nil option", ErrInvalid)
		}
		if err := o.applyStack(c); err != nil {
			return err
		}
	}
	return nil
}

// applySocketOptions applies opts to c.
func (c *config) applySocketOptions(opts []SocketOption) error {
	for _, o := range opts {
		if o == nil {
			return fmt.Errorf("%w: nil option", ErrInvalid)
		}
		if err := o.applySocket(c); err != nil {
			return err
		}
	}
	return nil
}

// applyQueueOptions applies opts to c.
func (c *config) applyQueueOptions(opts []QueueOption) error {
	for _, o := range opts {
		if o == nil {
			return fmt.Errorf("%w: nil option", ErrInvalid)
		}
		if err := o.applyQueue(c); err != nil {
			return err
		}
	}
	return nil
}

// providerEntry is a provider named by its address scheme.
type providerEntry struct {
	scheme string
	p      verbs.Provider
}

// config holds the settings options make.
type config struct {
	providers []providerEntry
	logger    *zap.Logger
	mode      Mode
	streamBuf int
	frames    int
	maxSends  int
	maxRecvs  int
	wait      WaitMode
	spin      time.Duration
	connTime  time.Duration
	sendTO    time.Duration // WithOpTimeout: 0 for none
	recvTO    time.Duration
	toMode    TimeoutMode // WithTimeoutMode
}

func defaultConfig() config {
	return config{
		logger:    zap.NewNop(),
		mode:      ModeDynamic,
		streamBuf: DefaultStreamBuffer,
		frames:    DefaultFrames,
		maxSends:  DefaultMaxSends,
		maxRecvs:  DefaultMaxRecvs,
		wait:      WaitAdaptive,
		spin:      DefaultSpinTime,
		connTime:  DefaultConnectTimeout,
	}
}

// WithProvider makes the stack reach addresses "scheme:..." through p. The
// whole address, scheme included, goes to p, so scheme is the one p's
// addresses use ("inproc" for package inproc, "shm" for package shm). The
// stack opens one verbs device over p and does not close p. By default the
// stack knows three schemes, each served by a provider shared by every
// stack of the process: "inproc", the in-process provider (so that two
// stacks of one process can connect to each other), "shm", the same-host
// provider of package shm ("shm:PATH", PATH the Unix socket the listener
// binds; Linux only), and "tcp", the provider across hosts of package tcp
// ("tcp:HOST:PORT", iWARP over TCP; Linux only). WithProvider with one of
// these schemes replaces the default one, for instance to give the
// same-host provider options or to read its statistics.
func WithProvider(scheme string, p verbs.Provider) StackOption {
	return stackOnly{func(c *config) error {
		if scheme == "" || strings.ContainsRune(scheme, ':') || p == nil {
			return fmt.Errorf("%w: provider %q", ErrInvalid, scheme)
		}
		for i, e := range c.providers {
			if e.scheme == scheme {
				c.providers[i].p = p
				return nil
			}
		}
		c.providers = append(c.providers, providerEntry{scheme, p})
		return nil
	}}
}

// WithLogger logs connection events (connects, accepts, rejections,
// resets, protocol errors; never one line per operation) to l, which must
// not be nil. The default is zap.NewNop().
func WithLogger(l *zap.Logger) SocketOption {
	return socketOpt{func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger (zap.NewNop() logs nothing)", ErrInvalid)
		}
		c.logger = l
		return nil
	}}
}

// WithMode sets the protocol mode of connections. The default is
// ModeDynamic.
func WithMode(m Mode) SocketOption {
	return socketOpt{func(c *config) error {
		if m < ModeDynamic || m > ModeIndirectOnly {
			return fmt.Errorf("%w: mode %v", ErrInvalid, m)
		}
		c.mode = m
		return nil
	}}
}

// WithStreamBuffer sets the size in bytes of the stream buffer each
// connection end allocates for the peer's indirect transfers, between 1
// and MaxStreamBuffer (DefaultStreamBuffer by default). ModeDirectOnly
// allocates none. The buffer comes from the allocator of the connection's
// provider when it offers one (Allocator: the same-host provider's shared
// memory, which the peer writes into with a plain copy), else from
// mreg.Alloc.
func WithStreamBuffer(n int) SocketOption {
	return socketOpt{func(c *config) error {
		if n < 1 || n > MaxStreamBuffer {
			return fmt.Errorf("%w: stream buffer of %d bytes", ErrInvalid, n)
		}
		c.streamBuf = n
		return nil
	}}
}

// WithFrames sets how many protocol frame buffers (48 bytes each) a
// connection end keeps posted for the peer's control messages, between 1
// and MaxFrames (DefaultFrames by default). It bounds how many ADVERTs,
// ACKs and transfer notices may be in flight.
func WithFrames(n int) SocketOption {
	return socketOpt{func(c *config) error {
		if n < 1 || n > MaxFrames {
			return fmt.Errorf("%w: %d frame buffers", ErrInvalid, n)
		}
		c.frames = n
		return nil
	}}
}

// WithOutstanding sets the most sends and the most recvs that may be
// outstanding on a socket (posted, event not yet posted), each between 1
// and MaxOutstanding (DefaultMaxSends and DefaultMaxRecvs by default); a
// listening socket applies the recv limit to accepts. A post beyond the
// limit fails with an error matching ErrWouldBlock.
func WithOutstanding(sends, recvs int) SocketOption {
	return socketOpt{func(c *config) error {
		if sends < 1 || recvs < 1 || sends > MaxOutstanding || recvs > MaxOutstanding {
			return fmt.Errorf("%w: outstanding limits %d and %d", ErrInvalid, sends, recvs)
		}
		c.maxSends, c.maxRecvs = sends, recvs
		return nil
	}}
}

// WithWaitMode sets how an idle goroutine waits: a Dequeue on the queue
// (Qcreate), a socket's progress goroutine (Socket, NewStack). The default
// is WaitAdaptive.
func WithWaitMode(m WaitMode) WaitOption {
	return waitOpt{func(c *config) error {
		if m < WaitAdaptive || m > WaitNotify {
			return fmt.Errorf("%w: wait mode %v", ErrInvalid, m)
		}
		c.wait = m
		return nil
	}}
}

// WithSpinTime sets how long WaitAdaptive spins before blocking
// (DefaultSpinTime by default; zero means the default).
func WithSpinTime(d time.Duration) WaitOption {
	return waitOpt{func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: spin time %v", ErrInvalid, d)
		}
		if d == 0 {
			d = DefaultSpinTime
		}
		c.spin = d
		return nil
	}}
}

// WithConnectTimeout sets how long a connect may take, from its post to the
// listening socket's accept: a connect not complete by then completes with
// an error matching ErrTimedOut (ETIMEDOUT). d must be positive
// (DefaultConnectTimeout by default): nothing waits forever on a peer.
// ConnectContext's context can shorten it for one connect.
func WithConnectTimeout(d time.Duration) SocketOption {
	return socketOpt{func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: connect timeout %v, want a positive duration", ErrInvalid, d)
		}
		c.connTime = d
		return nil
	}}
}
