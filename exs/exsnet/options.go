package exsnet

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/exsgo/exs/exs"
)

// Defaults and limits of the options.
const (
	// DefaultReadBuffer is the default size of a connection's registered
	// receive memory (WithReadBuffer).
	DefaultReadBuffer = 1 << 20
	// DefaultWriteBuffer is the default size of a connection's registered
	// send memory (WithWriteBuffer).
	DefaultWriteBuffer = 1 << 20
	// DefaultLinger is how long Close waits by default for written data
	// to make progress towards the peer (WithLinger).
	DefaultLinger = time.Second
	// MinBuffer and MaxBuffer bound WithReadBuffer and WithWriteBuffer.
	MinBuffer = 16 << 10
	MaxBuffer = 256 << 20
)

// readChunks is how many recvs a connection keeps posted: its read
// buffer is cut into that many chunks, each one recv.
const readChunks = 4

// sendPieces is how many pieces a Write is cut into at most per write
// buffer's worth, so that the first is on its way while the next is
// copied.
const sendPieces = 4

// maxSends bounds the sends a connection has outstanding.
const maxSends = 32

// acceptsAhead is how many accepts a listener keeps posted, so that
// connects complete without waiting for a call to Accept.
const acceptsAhead = 4

// closeWait bounds the wait for a socket's close event, which the socket's
// own goroutine posts without waiting for the peer.
const closeWait = 10 * time.Second

// An Option configures Dial or Listen.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	stack       *exs.Stack
	sockOpts    []exs.SocketOption
	log         *zap.Logger
	readBuffer  int
	writeBuffer int
	linger      time.Duration
}

func defaultConfig() config {
	return config{
		log:         zap.NewNop(),
		readBuffer:  DefaultReadBuffer,
		writeBuffer: DefaultWriteBuffer,
		linger:      DefaultLinger,
	}
}

func (c *config) applyOptions(opts []Option) error {
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(c); err != nil {
			return err
		}
	}
	return nil
}

// WithStack makes Dial or Listen use st, which stays the caller's: it is
// not closed with the connections. Without it, Dial makes a stack for the
// connection, closed with it, and Listen one for the listener and the
// connections it accepts, closed with the last of them.
func WithStack(st *exs.Stack) Option {
	return optionFunc(func(c *config) error {
		if st == nil {
			return fmt.Errorf("%w: nil stack", exs.ErrInvalid)
		}
		c.stack = st
		return nil
	})
}

// WithSocketOptions passes opts to the exs socket of the connection (or
// the listening socket, whose options its accepted sockets inherit):
// protocol mode, stream buffer, frame buffers, wait mode, connect time
// limit, logger. Options of a stack (providers) go to a stack of your own
// (WithStack).
func WithSocketOptions(opts ...exs.SocketOption) Option {
	return optionFunc(func(c *config) error {
		c.sockOpts = append(c.sockOpts, opts...)
		return nil
	})
}

// WithLogger logs what happens to connections and listeners (dials,
// accepts, ends that reset the connection; never one line per Read or
// Write) to l. The default is zap.NewNop(); a nil l is an error, as it is
// for exs.WithLogger.
func WithLogger(l *zap.Logger) Option {
	return optionFunc(func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", exs.ErrInvalid)
		}
		c.log = l
		return nil
	})
}

// WithReadBuffer sets the size of the registered memory a connection
// receives into (DefaultReadBuffer by default), between MinBuffer and
// MaxBuffer. It is cut into four recvs that stay posted, so that the peer
// can write up to n bytes before a Read.
func WithReadBuffer(n int) Option {
	return optionFunc(func(c *config) error {
		if n < MinBuffer || n > MaxBuffer {
			return fmt.Errorf("%w: read buffer of %d bytes, want %d to %d", exs.ErrInvalid, n, MinBuffer, MaxBuffer)
		}
		c.readBuffer = n
		return nil
	})
}

// WithWriteBuffer sets the size of the registered memory a connection
// sends from (DefaultWriteBuffer by default), between MinBuffer and
// MaxBuffer: Write copies into it and returns while the bytes are on
// their way, and blocks when it is full.
func WithWriteBuffer(n int) Option {
	return optionFunc(func(c *config) error {
		if n < MinBuffer || n > MaxBuffer {
			return fmt.Errorf("%w: write buffer of %d bytes, want %d to %d", exs.ErrInvalid, n, MinBuffer, MaxBuffer)
		}
		c.writeBuffer = n
		return nil
	})
}

// WithLinger sets how long Close waits, with no byte reaching the peer,
// for the bytes already written and the end of the stream to reach it
// (DefaultLinger by default). While bytes keep reaching the peer Close
// keeps waiting; when none has for d, Close resets the connection, and
// the peer gets the bytes that had arrived, then an error matching
// syscall.ECONNRESET instead of io.EOF. d must be positive.
func WithLinger(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: linger %v, want a positive duration", exs.ErrInvalid, d)
		}
		c.linger = d
		return nil
	})
}
