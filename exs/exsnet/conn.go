package exsnet

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/exsgo/exs/exs"
)

// Conn is a connection over exs: a net.Conn whose Read and Write move the
// bytes through registered memory. Dial returns one, and so does a
// Listener's Accept.
//
// Read receives into the connection's own registered memory, where the
// peer writes directly while recvs are posted, and copies out; WriteTo
// hands that memory to the writer instead, saving the copy. Write copies
// into registered send memory and returns while the bytes are on their
// way; ReadFrom reads into that memory instead, saving a copy. Neither
// registers nor allocates memory per call.
//
// A Conn is safe for concurrent use: Reads are served one at a time, and
// so are Writes, a Read and a Write running at once. Deadlines apply to
// pending calls too; a Read whose deadline passes leaves its recvs posted,
// and the bytes they receive go to the next Read. The zero Conn is not
// usable.
type Conn struct {
	sock   *exs.Socket
	ref    *stackRef
	st     *exs.Stack
	log    *zap.Logger
	local  Addr
	remote Addr
	linger time.Duration
	mem    []byte // read buffer, then write buffer: one allocation

	connectErr error // a failed connect's error, seen by waitEvent

	// mu guards the connection's lifetime: calls under way hold the
	// memory, which the last of them or Close releases.
	mu        sync.Mutex
	closed    bool
	closeDone bool // the socket's close completed: no operation holds the memory
	users     int
	shutdown  bool        // a shutdown is posted (CloseWrite or Close)
	wshut     atomic.Bool // CloseWrite was called: Writes fail

	rd, wd     deadline
	rsem, wsem chan struct{} // capacity 1: one Read, one Write at a time

	// cq takes the connect, shutdown and close events; only Dial and
	// Close dequeue from it.
	cq *exs.Queue

	r reader
	w writer
}

// reader is the receiving half, owned by whoever holds rsem.
type reader struct {
	q      *exs.Queue
	mh     *exs.MHandle
	chunks []chunk
	ready  []*chunk // received, not yet read out, in stream order
	evs    []exs.Event
	eof    bool
	err    error         // the error every later Read returns
	unread atomic.Uint64 // bytes received and not yet read out (Close looks)
}

// chunk is one recv's buffer: after its recv completes, buf[off:n] is
// still to be read.
type chunk struct {
	buf    []byte
	n, off int
}

// writer is the sending half, owned by whoever holds wsem. The write
// buffer is a ring: bytes [head, tail) (positions counted from the start
// of the stream) are in sends not yet complete, whose lengths inflight
// holds in order.
type writer struct {
	q          *exs.Queue
	mh         *exs.MHandle
	buf        []byte
	piece      int
	head, tail uint64
	inflight   []int // a ring of maxSends lengths
	first, n   int
	evs        []exs.Event
	err        error
}

// newConn makes a Conn over a socket that is connected or connecting
// (with its connect's event going to cq), and posts its recvs.
func newConn(sock *exs.Socket, ref *stackRef, cfg *config, cq *exs.Queue) (*Conn, error) {
	st := ref.st
	c := &Conn{
		sock:   sock,
		ref:    ref,
		st:     st,
		log:    cfg.log,
		linger: cfg.linger,
		cq:     cq,
		rsem:   make(chan struct{}, 1),
		wsem:   make(chan struct{}, 1),
	}
	c.rd.init()
	c.wd.init()
	if err := c.setup(cfg); err != nil {
		c.abandon()
		if c.connectErr != nil {
			// The connect failed while the recvs were being posted,
			// which the failed socket refused: its cause is the news.
			err = c.connectErr
		}
		return nil, err
	}
	return c, nil
}

// abandon closes the socket of a Conn that is not handed out and frees
// what it holds: its memory, its queues and its reference to the stack.
func (c *Conn) abandon() {
	if err := c.sock.Close(c.cq, "close"); err == nil && !c.waitEvent(exs.EventClose, closeWait) {
		c.log.Error("exsnet: socket did not close", zap.Duration("after", closeWait))
	}
	c.free()
}

func (c *Conn) setup(cfg *config) error {
	mem, err := c.st.Alloc(cfg.readBuffer + cfg.writeBuffer)
	if err != nil {
		return err
	}
	c.mem = mem
	rmem, wmem := mem[:cfg.readBuffer:cfg.readBuffer], mem[cfg.readBuffer:]
	if c.r.mh, err = c.st.Mregister(rmem, exs.AccessWrite); err != nil {
		return err
	}
	if c.w.mh, err = c.st.Mregister(wmem, exs.AccessRead); err != nil {
		return err
	}
	if c.r.q, err = c.st.Qcreate(readChunks); err != nil {
		return err
	}
	if c.w.q, err = c.st.Qcreate(maxSends); err != nil {
		return err
	}
	size := cfg.readBuffer / readChunks
	c.r.chunks = make([]chunk, readChunks)
	c.r.ready = make([]*chunk, 0, readChunks)
	c.r.evs = make([]exs.Event, readChunks)
	for i := range c.r.chunks {
		ch := &c.r.chunks[i]
		ch.buf = rmem[i*size : (i+1)*size : (i+1)*size]
		if err := c.sock.Recv(c.r.q, ch.buf, c.r.mh, 0, ch); err != nil {
			return err
		}
	}
	c.w.buf = wmem
	c.w.piece = max(len(wmem)/sendPieces, 1)
	c.w.inflight = make([]int, maxSends)
	c.w.evs = make([]exs.Event, maxSends)
	return nil
}

// connected records the addresses of a connection that is up.
func (c *Conn) connected() {
	c.local, c.remote = Addr(c.sock.LocalAddr()), Addr(c.sock.RemoteAddr())
}

// Read reads up to len(p) bytes: what has arrived, or, if nothing has, the
// next bytes to arrive. It returns io.EOF once the peer has ended its
// sending direction (CloseWrite, or Close after its writes reached this
// end) and every byte before has been read.
func (c *Conn) Read(p []byte) (int, error) {
	if err := c.begin(c.rsem, &c.rd); err != nil {
		return 0, c.opErr("read", err)
	}
	defer c.end(c.rsem)
	if len(p) == 0 {
		return 0, nil
	}
	if err := c.check(&c.rd); err != nil {
		return 0, c.opErr("read", err)
	}
	for {
		if n := c.fill(p); n > 0 {
			return n, nil
		}
		if c.r.eof {
			return 0, io.EOF
		}
		if c.r.err != nil {
			return 0, c.opErr("read", c.r.err)
		}
		if err := c.waitRecv(); err != nil {
			return 0, c.opErr("read", err)
		}
	}
}

// WriteTo writes what arrives to w until the end of the stream, handing w
// the connection's receive memory itself, with no copy. It implements
// io.WriterTo, which io.Copy uses. Read deadlines apply.
func (c *Conn) WriteTo(w io.Writer) (int64, error) {
	if err := c.begin(c.rsem, &c.rd); err != nil {
		return 0, c.opErr("read", err)
	}
	defer c.end(c.rsem)
	var total int64
	for {
		if err := c.check(&c.rd); err != nil {
			return total, c.opErr("read", err)
		}
		if len(c.r.ready) > 0 {
			ch := c.r.ready[0]
			b := ch.buf[ch.off:ch.n]
			n, err := w.Write(b)
			if n < 0 || n > len(b) {
				n = 0
				if err == nil {
					err = errors.New("exsnet: writer returned an invalid count")
				}
			}
			total += int64(n)
			c.consume(n)
			if err == nil && n < len(b) {
				err = io.ErrShortWrite
			}
			if err != nil {
				return total, err
			}
			continue
		}
		if c.r.eof {
			return total, nil
		}
		if c.r.err != nil {
			return total, c.opErr("read", c.r.err)
		}
		if err := c.waitRecv(); err != nil {
			return total, c.opErr("read", err)
		}
	}
}

// fill copies what has arrived into p, taking the events of recvs that
// completed meanwhile without waiting.
func (c *Conn) fill(p []byte) int {
	n := 0
	for n < len(p) {
		if len(c.r.ready) == 0 {
			if c.r.eof || c.r.err != nil {
				break
			}
			k := c.r.q.TryDequeue(c.r.evs)
			if k == 0 {
				break
			}
			c.takeRecvs(k)
			continue
		}
		ch := c.r.ready[0]
		m := copy(p[n:], ch.buf[ch.off:ch.n])
		n += m
		c.consume(m)
	}
	return n
}

// consume marks n bytes of the oldest ready chunk read, and posts its recv
// again once it is empty.
func (c *Conn) consume(n int) {
	ch := c.r.ready[0]
	ch.off += n
	c.r.unread.Add(^uint64(n - 1))
	if ch.off < ch.n {
		return
	}
	copy(c.r.ready, c.r.ready[1:])
	c.r.ready = c.r.ready[:len(c.r.ready)-1]
	ch.n, ch.off = 0, 0
	if c.r.eof || c.r.err != nil {
		return
	}
	if err := c.sock.Recv(c.r.q, ch.buf, c.r.mh, 0, ch); err != nil {
		c.r.err = cause(err)
	}
}

// waitRecv waits for recvs to complete, until the read deadline or Close.
// A recv still posted when the deadline passes stays posted: its bytes go
// to the next Read.
func (c *Conn) waitRecv() error {
	for {
		ctx := c.rd.wait()
		k, err := c.r.q.DequeueContext(ctx, c.r.evs, 1)
		if k > 0 {
			c.takeRecvs(k)
			return nil
		}
		if err == nil {
			continue
		}
		if cerr := c.check(&c.rd); cerr != nil {
			return cerr
		}
		if !ctx.done() {
			return cause(err) // the queue was deleted: the connection is gone
		}
		// The deadline was moved after it passed: wait on.
	}
}

// takeRecvs takes the first k recv events of c.r.evs.
func (c *Conn) takeRecvs(k int) {
	for i := range k {
		ev := &c.r.evs[i]
		ch := ev.User.(*chunk)
		switch {
		case ev.Err != nil:
			if c.r.err == nil {
				c.r.err = cause(ev.Err)
			}
		case ev.EOF:
			c.r.eof = true
		default:
			ch.n, ch.off = ev.N, 0
			c.r.ready = append(c.r.ready, ch)
			c.r.unread.Add(uint64(ev.N))
		}
		*ev = exs.Event{}
	}
}

// Write writes p and returns once every byte is in the connection's send
// memory, on its way to the peer; it blocks while that memory is full. A
// Write whose deadline passes returns the count of the bytes it took,
// which still reach the peer.
func (c *Conn) Write(p []byte) (int, error) {
	if err := c.begin(c.wsem, &c.wd); err != nil {
		return 0, c.opErr("write", err)
	}
	defer c.end(c.wsem)
	if err := c.check(&c.wd); err != nil {
		return 0, c.opErr("write", err)
	}
	n := 0
	for n < len(p) {
		span, err := c.space()
		if err != nil {
			return n, c.opErr("write", err)
		}
		m := copy(span, p[n:])
		if err := c.send(m); err != nil {
			return n, c.opErr("write", err)
		}
		n += m
	}
	return n, nil
}

// ReadFrom reads r until io.EOF straight into the connection's send
// memory, saving the copy of a Write, and sends what it reads. It
// implements io.ReaderFrom, which io.Copy uses. Write deadlines apply to
// the waits for send memory, not to r.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	if err := c.begin(c.wsem, &c.wd); err != nil {
		return 0, c.opErr("readfrom", err)
	}
	defer c.end(c.wsem)
	var total int64
	for {
		if err := c.check(&c.wd); err != nil {
			return total, c.opErr("readfrom", err)
		}
		span, err := c.space()
		if err != nil {
			return total, c.opErr("readfrom", err)
		}
		m, rerr := r.Read(span)
		if m < 0 || m > len(span) {
			return total, errors.New("exsnet: reader returned an invalid count")
		}
		if m > 0 {
			if err := c.send(m); err != nil {
				return total, c.opErr("readfrom", err)
			}
			total += int64(m)
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			return total, rerr
		}
	}
}

// space returns the free span at the tail of the write buffer (at most a
// piece), waiting until there is one.
func (c *Conn) space() ([]byte, error) {
	w := &c.w
	for {
		if w.err != nil {
			return nil, w.err
		}
		if c.wshut.Load() {
			return nil, syscall.EPIPE
		}
		size := uint64(len(w.buf))
		if w.n < len(w.inflight) && w.tail-w.head < size {
			off := w.tail % size
			end := min(size, off+(size-(w.tail-w.head)), off+uint64(w.piece))
			return w.buf[off:end], nil
		}
		if err := c.waitSends(true); err != nil {
			return nil, err
		}
	}
}

// send posts a send of the first m bytes of the span space returned.
func (c *Conn) send(m int) error {
	w := &c.w
	off := w.tail % uint64(len(w.buf))
	if err := c.sock.Send(w.q, w.buf[off:off+uint64(m)], w.mh, 0, nil); err != nil {
		w.err = cause(err)
		return w.err
	}
	w.inflight[(w.first+w.n)%len(w.inflight)] = m
	w.n++
	w.tail += uint64(m)
	return nil
}

// waitSends takes the events of completed sends, waiting for at least one
// if block is set, until the write deadline or Close.
func (c *Conn) waitSends(block bool) error {
	w := &c.w
	for {
		k := w.q.TryDequeue(w.evs)
		if k == 0 && block {
			ctx := c.wd.wait()
			var err error
			k, err = w.q.DequeueContext(ctx, w.evs, 1)
			if k == 0 {
				if err == nil {
					continue
				}
				if cerr := c.check(&c.wd); cerr != nil {
					return cerr
				}
				if !ctx.done() {
					return cause(err)
				}
				continue
			}
		}
		for i := range k {
			ev := &w.evs[i]
			w.head += uint64(w.inflight[w.first])
			w.first = (w.first + 1) % len(w.inflight)
			w.n--
			if ev.Err != nil && w.err == nil {
				w.err = cause(ev.Err)
			}
			*ev = exs.Event{}
		}
		return nil
	}
}

// CloseWrite ends the sending direction: the bytes written so far still
// reach the peer, then its Reads return io.EOF. Later Writes fail with an
// error matching syscall.EPIPE (a Write under way may be cut short);
// Reads go on. CloseWrite does not wait.
func (c *Conn) CloseWrite() error {
	c.mu.Lock()
	closed, posted := c.closed, c.shutdown
	c.shutdown = true
	c.mu.Unlock()
	switch {
	case closed:
		return c.opErr("close", net.ErrClosed)
	case posted:
		return nil
	}
	c.wshut.Store(true)
	if err := c.sock.Shutdown(c.cq, "shutdown"); err != nil {
		c.mu.Lock()
		c.shutdown = false // Close must not wait for it
		c.mu.Unlock()
		return c.opErr("close", cause(err))
	}
	return nil
}

// Close closes the connection. Pending Reads and Writes return at once
// with an error matching net.ErrClosed. The bytes already written still
// reach the peer, followed by the end of the stream: Close waits for that
// while bytes keep reaching the peer, and resets the connection when none
// has for the linger time (WithLinger), or at once if bytes that arrived
// here were left unread (as TCP does). Close then releases the
// connection's memory once no call uses it any more, and its stack if the
// connection owns one. A second Close returns an error matching
// net.ErrClosed.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return c.opErr("close", net.ErrClosed)
	}
	c.closed = true
	posted := c.shutdown
	c.shutdown = true
	c.mu.Unlock()
	c.rd.close()
	c.wd.close()

	if c.r.unread.Load() > 0 {
		c.log.Debug("exsnet: close with unread bytes resets the connection", zap.Stringer("local", c.local), zap.Stringer("remote", c.remote))
	} else {
		c.lingerEnd(posted)
	}
	var err error
	if cerr := c.sock.Close(c.cq, "close"); cerr != nil {
		err = cause(cerr)
	} else if !c.waitEvent(exs.EventClose, closeWait) {
		c.log.Error("exsnet: socket did not close", zap.Stringer("local", c.local), zap.Duration("after", closeWait))
	}
	c.mu.Lock()
	c.closeDone = true
	last := c.users == 0
	c.mu.Unlock()
	if last {
		c.free()
	}
	if err != nil {
		return c.opErr("close", err)
	}
	return nil
}

// lingerEnd posts a shutdown (unless one is posted) and waits for it to
// complete while the bytes sent make progress.
func (c *Conn) lingerEnd(posted bool) {
	if !posted {
		if err := c.sock.Shutdown(c.cq, "shutdown"); err != nil {
			return
		}
	}
	sent := c.sock.Stats().BytesSent
	for {
		if c.waitEvent(exs.EventShutdown, c.linger) {
			return
		}
		now := c.sock.Stats().BytesSent
		if now == sent {
			c.log.Debug("exsnet: linger expired, resetting the connection", zap.Stringer("local", c.local), zap.Stringer("remote", c.remote), zap.Duration("linger", c.linger))
			return
		}
		sent = now
	}
}

// waitEvent waits up to d on cq for an event of type typ and reports
// whether it came (with or without error).
func (c *Conn) waitEvent(typ exs.EventType, d time.Duration) bool {
	deadline := time.Now().Add(d)
	var evs [1]exs.Event
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		if n, _ := c.cq.Dequeue(evs[:], 1, left); n == 0 {
			return false
		}
		if evs[0].Type == exs.EventConnect && evs[0].Err != nil {
			c.connectErr = evs[0].Err
		}
		if evs[0].Type == typ {
			return true
		}
	}
}

// cause returns the cause an exs error carries: the net.OpError made at
// this package's boundary says which operation on which connection.
func cause(err error) error {
	var oe *exs.OpError
	if errors.As(err, &oe) {
		err = oe.Err
	}
	switch {
	case errors.Is(err, exs.ErrClosed):
		return net.ErrClosed
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, exs.ErrPeerTimedOut):
		// A connect past its time limit, or a peer that stopped
		// answering (a timeout, as a TCP connection's ETIMEDOUT after its
		// user timeout, but no deadline of the caller's):
		// net.OpError.Timeout asks the cause itself.
		return timeoutError{err}
	}
	return err
}

// timeoutError is a cause that is a timeout.
type timeoutError struct{ err error }

func (e timeoutError) Error() string   { return e.err.Error() }
func (e timeoutError) Unwrap() error   { return e.err }
func (e timeoutError) Timeout() bool   { return true }
func (e timeoutError) Temporary() bool { return true }

func (c *Conn) opErr(op string, err error) error {
	return &net.OpError{Op: op, Net: Network, Source: c.local, Addr: c.remote, Err: err}
}

// LocalAddr returns this end's address: the listening address for an
// accepted connection, and for a dialed one the name the provider gave it
// (see exs.Socket.LocalAddr).
func (c *Conn) LocalAddr() net.Addr { return c.local }

// RemoteAddr returns the peer's address: the address dialed, or for an
// accepted connection the name of the dialing end.
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// SetDeadline sets the read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// SetReadDeadline sets the deadline of Reads (and WriteTo), pending ones
// included: past it they fail with an error matching
// os.ErrDeadlineExceeded whose Timeout reports true. The recvs they were
// waiting for stay posted. A zero t means no deadline.
func (c *Conn) SetReadDeadline(t time.Time) error {
	if c.isClosed() {
		return c.opErr("set", net.ErrClosed)
	}
	c.rd.set(t)
	return nil
}

// SetWriteDeadline sets the deadline of Writes (and ReadFrom's waits),
// pending ones included: past it they return the count of the bytes they
// took, which still reach the peer, and an error matching
// os.ErrDeadlineExceeded. A zero t means no deadline.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	if c.isClosed() {
		return c.opErr("set", net.ErrClosed)
	}
	c.wd.set(t)
	return nil
}

func (c *Conn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Stats returns the counters of the connection's exs socket: among them
// the bytes sent directly into the peer's recvs and through its stream
// buffer.
func (c *Conn) Stats() exs.Stats { return c.sock.Stats() }

var (
	_ net.Conn      = (*Conn)(nil)
	_ io.ReaderFrom = (*Conn)(nil)
	_ io.WriterTo   = (*Conn)(nil)
)
