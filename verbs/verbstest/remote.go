package verbstest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// ServePeer serves the Peer protocol for p over a byte stream: it reads
// requests from r, made by a Peer that NewRemotePeer returned, calls p and
// writes the replies to w. It serves requests concurrently, each with a
// context that ends when the caller's deadline passes or its caller cancels
// it.
//
// ServePeer returns when the client closes the remote peer (nil), when r
// ends or a message is malformed (an error), or when ctx is done (ctx's
// error). In every case it first cancels the calls in progress, waits for
// them and closes p. When ctx ends ServePeer closes r if it is an
// io.Closer, to stop reading; otherwise it leaves one goroutine blocked in
// r.Read until r yields.
func ServePeer(ctx context.Context, p Peer, r io.Reader, w io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := &server{
		p:     p,
		w:     w,
		base:  ctx,
		qps:   make(map[uint64]PeerQP),
		mrs:   make(map[uint64]PeerMR),
		calls: make(map[uint64]context.CancelFunc),
		wfail: make(chan struct{}),
	}
	readDone := make(chan error, 1)
	go func() { readDone <- s.readLoop(bufio.NewReaderSize(r, 64<<10)) }()

	var err error
	closed := false
	select {
	case err = <-readDone:
		switch {
		case err == nil:
			closed = true
		case errors.Is(err, io.EOF):
			err = fmt.Errorf("verbstest: peer stream ended without Close: %w", io.ErrUnexpectedEOF)
		}
	case <-ctx.Done():
		err = context.Cause(ctx)
		if c, ok := r.(io.Closer); ok {
			c.Close()
			<-readDone
		}
	case <-s.wfail:
		s.mu.Lock()
		err = s.werr
		s.mu.Unlock()
		if c, ok := r.(io.Closer); ok {
			c.Close()
			<-readDone
		}
	}
	// No call starts any more; end those in progress.
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	cancel()
	s.wg.Wait()
	cerr := p.Close()
	if closed {
		s.reply(&msg{ID: s.closeID, Op: opClose, Err: encodeError(cerr)})
		return nil
	}
	if cerr != nil {
		err = errors.Join(err, fmt.Errorf("verbstest: closing the peer: %w", cerr))
	}
	return err
}

// server is the state of one ServePeer.
type server struct {
	p    Peer
	base context.Context

	wmu  sync.Mutex // serializes writes
	w    io.Writer
	wbuf []byte

	mu      sync.Mutex
	stopped bool
	werr    error
	wfail   chan struct{} // closed on the first write error
	next    uint64        // last handle given out
	qps     map[uint64]PeerQP
	mrs     map[uint64]PeerMR
	calls   map[uint64]context.CancelFunc
	closeID uint64
	wg      sync.WaitGroup
}

// readLoop reads and dispatches messages until the client's Close (nil),
// the end of the stream or an error.
func (s *server) readLoop(r io.Reader) error {
	for {
		m, err := readFrame(r)
		if err != nil {
			return err
		}
		switch m.Kind {
		case kindCancel:
			s.mu.Lock()
			if c := s.calls[m.ID]; c != nil {
				c()
			}
			s.mu.Unlock()
		case kindRequest:
			if m.Op == opClose {
				s.closeID = m.ID
				return nil
			}
			s.start(m)
		default:
			return fmt.Errorf("verbstest: malformed message: kind %d from the client", m.Kind)
		}
	}
}

// start runs one request in its own goroutine.
func (s *server) start(m msg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	var ctx context.Context
	var cancel context.CancelFunc
	if m.Timeout > 0 {
		ctx, cancel = context.WithTimeout(s.base, time.Duration(m.Timeout))
	} else {
		ctx, cancel = context.WithCancel(s.base)
	}
	if old := s.calls[m.ID]; old != nil {
		old() // a reused id: the client gave up on that call
	}
	s.calls[m.ID] = cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		rep := s.handle(ctx, &m)
		cancel()
		s.mu.Lock()
		delete(s.calls, m.ID)
		s.mu.Unlock()
		rep.ID, rep.Op = m.ID, m.Op
		s.reply(rep)
	}()
}

// reply writes a reply; the first write error stops the server.
func (s *server) reply(m *msg) {
	m.Kind = kindReply
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	failed := s.werr != nil
	s.mu.Unlock()
	if failed {
		return
	}
	b, err := appendFrame(s.wbuf[:0], m)
	if err != nil {
		// Too large a reply: answer with the error instead.
		b, _ = appendFrame(s.wbuf[:0], &msg{Kind: kindReply, ID: m.ID, Op: m.Op, Err: encodeError(err)})
	}
	if _, err := s.w.Write(b); err != nil {
		s.mu.Lock()
		s.werr = fmt.Errorf("verbstest: writing to the client: %w", err)
		close(s.wfail)
		s.mu.Unlock()
	}
	if cap(b) <= 64<<10 {
		s.wbuf = b[:0]
	}
}

func (s *server) add(qp PeerQP, mr PeerMR) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	if qp != nil {
		s.qps[s.next] = qp
	} else {
		s.mrs[s.next] = mr
	}
	return s.next
}

func (s *server) qp(h uint64) (PeerQP, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.qps[h]; q != nil {
		return q, nil
	}
	return nil, fmt.Errorf("verbstest: no queue pair %d at the peer: %w", h, verbs.ErrInvalid)
}

func (s *server) mr(h uint64) (PeerMR, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.mrs[h]; m != nil {
		return m, nil
	}
	return nil, fmt.Errorf("verbstest: no region %d at the peer: %w", h, verbs.ErrInvalid)
}

func (s *server) sgl(in []wireSGE) ([]PeerSGE, error) {
	out := make([]PeerSGE, len(in))
	for i, w := range in {
		m, err := s.mr(w.MR)
		if err != nil {
			return nil, err
		}
		out[i] = PeerSGE{MR: m, Off: int(w.Off), Len: int(w.Len), Key: w.Key}
	}
	return out, nil
}

// handle calls the Peer for one request and returns the reply.
func (s *server) handle(ctx context.Context, m *msg) (rep *msg) {
	defer func() {
		if v := recover(); v != nil {
			rep = &msg{Err: encodeError(fmt.Errorf("verbstest: peer panicked in %v: %v", m.Op, v))}
		}
	}()
	rep = &msg{}
	var err error
	switch m.Op {
	case opPing:
		rep.N = protocolVersion
	case opListen:
		rep.Addr, err = s.p.Listen(ctx)
	case opServe:
		err = s.p.Serve(Answer{Reject: m.Reject, PrivateData: m.Data, QP: m.Spec})
	case opServed:
		var q PeerQP
		q, rep.Data, err = s.p.Served(ctx)
		if q != nil {
			rep.Handle = s.add(q, nil)
		}
	case opConnect:
		var q PeerQP
		q, rep.Data, err = s.p.Connect(ctx, m.Addr, m.Spec, m.Data)
		if q != nil {
			rep.Handle = s.add(q, nil)
		}
	case opRegister, opPostRecv, opPostSend, opPoll, opState, opWaitError, opDisconnect, opQPClose:
		var q PeerQP
		if q, err = s.qp(m.Handle); err == nil {
			err = s.handleQP(ctx, q, m, rep)
		}
	case opRead, opWrite, opDeregister:
		var r PeerMR
		if r, err = s.mr(m.Handle); err == nil {
			switch m.Op {
			case opRead:
				rep.Data, err = r.Read()
			case opWrite:
				err = r.Write(int(m.N), m.Data)
			case opDeregister:
				err = r.Deregister()
			}
		}
	default:
		err = fmt.Errorf("verbstest: unknown request %v: %w", m.Op, verbs.ErrInvalid)
	}
	rep.Err = encodeError(err)
	return rep
}

func (s *server) handleQP(ctx context.Context, q PeerQP, m, rep *msg) error {
	switch m.Op {
	case opRegister:
		if m.N < 0 || m.N > maxRegion {
			return fmt.Errorf("verbstest: region of %d bytes: %w", m.N, verbs.ErrInvalid)
		}
		r, err := q.Register(int(m.N), m.Access)
		if err != nil {
			return err
		}
		rep.Handle = s.add(nil, r)
		rep.MRAddr, rep.N, rep.RKey, rep.LKey = r.Addr(), int64(r.Len()), r.RKey(), r.LKey()
		return nil
	case opPostRecv:
		sgl, err := s.sgl(m.SGL)
		if err != nil {
			return err
		}
		return q.PostRecv(m.WRID, sgl)
	case opPostSend:
		sgl, err := s.sgl(m.SGL)
		if err != nil {
			return err
		}
		return q.PostSend(PeerSendWR{
			WRID: m.WRID, Opcode: m.Opcode, Signaled: m.Signaled, Imm: m.Imm,
			SGL: sgl, RemoteAddr: m.RemoteAddr, RKey: m.RKey,
		})
	case opPoll:
		var err error
		rep.WCs, err = q.Poll(ctx, int(m.N))
		return err
	case opState:
		rep.State = q.State()
		return nil
	case opWaitError:
		return q.WaitError(ctx)
	case opDisconnect:
		return q.Disconnect()
	default: // opQPClose
		return q.Close()
	}
}

// Timeouts of the client.
const (
	// cancelGrace is how long a call whose context ended waits for the
	// peer's answer (with what it has) before it returns ctx's error
	// alone.
	cancelGrace = 5 * time.Second
	// closeTimeout bounds how long Close waits for the peer to close.
	closeTimeout = 10 * time.Second
)

// NewRemotePeer returns a Peer whose methods are calls over a byte stream
// to a ServePeer: it writes requests to w and reads replies from r. Its
// methods are safe for concurrent use. A blocking method sends its ctx's
// deadline and, if ctx ends first, a cancel, and returns what the far side
// has then (Poll: the completions so far and ctx's error). Errors keep
// their identity for errors.Is: the verbs and mreg sentinels, context's
// errors, errnos, and *verbs.RejectError for errors.As.
//
// If the stream breaks or the far side dies, every call in progress and
// every later call fails with an error satisfying errors.Is(err,
// verbs.ErrClosed) and, if the stream just ended, io.ErrUnexpectedEOF.
//
// Close closes the far side's Peer, then w, and r if it is an io.Closer,
// and waits for its reading goroutine. If the far side does not answer
// Close within 10 seconds, Close closes the streams anyway; a reader that is
// not an io.Closer may then keep Close waiting until it yields.
func NewRemotePeer(r io.Reader, w io.WriteCloser) Peer {
	return newRemotePeer(r, w)
}

func newRemotePeer(r io.Reader, w io.WriteCloser) *remotePeer {
	c := &remotePeer{
		r:     r,
		w:     w,
		calls: make(map[uint64]chan msg),
		done:  make(chan struct{}),
	}
	go c.readLoop(bufio.NewReaderSize(r, 64<<10))
	return c
}

// remotePeer is the client side of the protocol.
type remotePeer struct {
	r io.Reader
	w io.WriteCloser

	wmu      sync.Mutex // serializes writes
	sentLast bool       // the Close request went out: nothing more may
	wbuf     []byte

	mu     sync.Mutex
	nextID uint64
	calls  map[uint64]chan msg
	closed bool  // Close was called
	dead   error // why the reader stopped; set before done is closed
	done   chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// readLoop delivers replies to their calls until the stream ends or the
// reply to Close arrives.
func (c *remotePeer) readLoop(r io.Reader) {
	var dead error
	for {
		m, err := readFrame(r)
		if err == nil && m.Kind != kindReply {
			err = fmt.Errorf("verbstest: malformed message: kind %d from the peer", m.Kind)
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			dead = fmt.Errorf("verbstest: connection to the peer lost: %w: %w", verbs.ErrClosed, err)
			break
		}
		c.mu.Lock()
		ch := c.calls[m.ID]
		delete(c.calls, m.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- m // buffered
		}
		if m.Op == opClose {
			dead = fmt.Errorf("verbstest: remote peer closed: %w", verbs.ErrClosed)
			break
		}
	}
	c.mu.Lock()
	c.dead = dead
	c.mu.Unlock()
	close(c.done)
}

// call sends a request and waits for its reply. The reply's error, if
// any, is returned as an error along with the reply.
func (c *remotePeer) call(ctx context.Context, m msg) (msg, error) {
	c.mu.Lock()
	if c.closed && m.Op != opClose {
		c.mu.Unlock()
		return msg{}, fmt.Errorf("verbstest: remote peer %v after Close: %w", m.Op, verbs.ErrClosed)
	}
	if c.dead != nil {
		c.mu.Unlock()
		return msg{}, c.dead
	}
	c.nextID++
	id := c.nextID
	ch := make(chan msg, 1)
	c.calls[id] = ch
	c.mu.Unlock()

	m.Kind, m.ID = kindRequest, id
	if d, ok := ctx.Deadline(); ok {
		m.Timeout = max(int64(time.Until(d)), 1)
	}
	if err := c.send(&m); err != nil {
		c.forget(id)
		select {
		case <-c.done: // the reader knows better why
			return c.lost(ch)
		default:
		}
		return msg{}, err
	}
	select {
	case rep := <-ch:
		return rep, decodeError(rep.Err)
	case <-c.done:
		return c.lost(ch)
	case <-ctx.Done():
	}
	// Cancel the call at the far side and take what it has.
	c.send(&msg{Kind: kindCancel, ID: id, Op: m.Op})
	grace := time.NewTimer(cancelGrace)
	defer grace.Stop()
	select {
	case rep := <-ch:
		return rep, ctxError(ctx, decodeError(rep.Err))
	case <-c.done:
		return c.lost(ch)
	case <-grace.C:
		c.forget(id)
		return msg{}, fmt.Errorf("verbstest: peer did not answer %v after cancellation: %w", m.Op, ctx.Err())
	}
}

// lost returns the reply in ch if it came before the reader stopped, and
// otherwise why the reader stopped.
func (c *remotePeer) lost(ch chan msg) (msg, error) {
	select {
	case rep := <-ch:
		return rep, decodeError(rep.Err)
	default:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return msg{}, c.dead
}

func (c *remotePeer) forget(id uint64) {
	c.mu.Lock()
	delete(c.calls, id)
	c.mu.Unlock()
}

// ctxError makes a remote error that reports a context's end report ctx's
// own error: the far side may have seen a cancellation where the caller's
// deadline passed.
func ctxError(ctx context.Context, err error) error {
	re, ok := err.(*remoteError)
	if !ok || ctx.Err() == nil {
		return err
	}
	var errs []error
	found := false
	for _, e := range re.errs {
		if e == context.Canceled || e == context.DeadlineExceeded {
			found = true
			continue
		}
		errs = append(errs, e)
	}
	if !found {
		return err
	}
	return &remoteError{msg: re.msg, errs: append(errs, ctx.Err())}
}

// send writes a message. A Close request is the last one.
func (c *remotePeer) send(m *msg) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.sentLast {
		return fmt.Errorf("verbstest: remote peer %v after Close: %w", m.Op, verbs.ErrClosed)
	}
	b, err := appendFrame(c.wbuf[:0], m)
	if err != nil {
		return err
	}
	if m.Op == opClose && m.Kind == kindRequest {
		c.sentLast = true
	}
	_, err = c.w.Write(b)
	if cap(b) <= 64<<10 {
		c.wbuf = b[:0]
	}
	if err != nil {
		return fmt.Errorf("verbstest: sending %v to the peer: %w: %w", m.Op, verbs.ErrClosed, err)
	}
	return nil
}

func (c *remotePeer) Listen(ctx context.Context) (string, error) {
	rep, err := c.call(ctx, msg{Op: opListen})
	return rep.Addr, err
}

func (c *remotePeer) Serve(a Answer) error {
	_, err := c.call(context.Background(), msg{Op: opServe, Reject: a.Reject, Data: a.PrivateData, Spec: a.QP})
	return err
}

func (c *remotePeer) qpReply(rep msg, err error) (PeerQP, []byte, error) {
	var q PeerQP
	if rep.Handle != 0 {
		q = &remoteQP{c: c, h: rep.Handle}
	}
	return q, rep.Data, err
}

func (c *remotePeer) Served(ctx context.Context) (PeerQP, []byte, error) {
	return c.qpReply(c.call(ctx, msg{Op: opServed}))
}

func (c *remotePeer) Connect(ctx context.Context, addr string, spec QPSpec, private []byte) (PeerQP, []byte, error) {
	return c.qpReply(c.call(ctx, msg{Op: opConnect, Addr: addr, Spec: spec, Data: private}))
}

// ping checks that the far side serves the protocol.
func (c *remotePeer) ping(ctx context.Context) error {
	rep, err := c.call(ctx, msg{Op: opPing})
	if err == nil && rep.N != protocolVersion {
		err = fmt.Errorf("verbstest: peer speaks protocol version %d, want %d", rep.N, protocolVersion)
	}
	return err
}

func (c *remotePeer) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		_, err := c.call(ctx, msg{Op: opClose})
		cancel()
		c.closeErr = err
		if werr := c.w.Close(); c.closeErr == nil && werr != nil {
			c.closeErr = fmt.Errorf("verbstest: closing the stream to the peer: %w", werr)
		}
		if rc, ok := c.r.(io.Closer); ok {
			rc.Close()
		}
		<-c.done
	})
	return c.closeErr
}

// remoteQP is a PeerQP at the far side of a remotePeer.
type remoteQP struct {
	c *remotePeer
	h uint64
}

func (q *remoteQP) Register(size int, access mreg.Access) (PeerMR, error) {
	rep, err := q.c.call(context.Background(), msg{Op: opRegister, Handle: q.h, N: int64(size), Access: access})
	if err != nil {
		return nil, err
	}
	return &remoteMR{c: q.c, h: rep.Handle, addr: rep.MRAddr, n: int(rep.N), rkey: rep.RKey, lkey: rep.LKey}, nil
}

func (q *remoteQP) wireSGL(in []PeerSGE) ([]wireSGE, error) {
	out := make([]wireSGE, len(in))
	for i, s := range in {
		m, ok := s.MR.(*remoteMR)
		if !ok || m.c != q.c {
			return nil, fmt.Errorf("verbstest: scatter/gather element %d names a region (%T) not of this peer: %w", i, s.MR, verbs.ErrInvalid)
		}
		out[i] = wireSGE{MR: m.h, Off: int64(s.Off), Len: int64(s.Len), Key: s.Key}
	}
	return out, nil
}

func (q *remoteQP) PostRecv(wrID uint64, sgl []PeerSGE) error {
	w, err := q.wireSGL(sgl)
	if err != nil {
		return err
	}
	_, err = q.c.call(context.Background(), msg{Op: opPostRecv, Handle: q.h, WRID: wrID, SGL: w})
	return err
}

func (q *remoteQP) PostSend(wr PeerSendWR) error {
	w, err := q.wireSGL(wr.SGL)
	if err != nil {
		return err
	}
	_, err = q.c.call(context.Background(), msg{
		Op: opPostSend, Handle: q.h, WRID: wr.WRID, Opcode: wr.Opcode, Signaled: wr.Signaled,
		Imm: wr.Imm, SGL: w, RemoteAddr: wr.RemoteAddr, RKey: wr.RKey,
	})
	return err
}

func (q *remoteQP) Poll(ctx context.Context, n int) ([]verbs.WC, error) {
	rep, err := q.c.call(ctx, msg{Op: opPoll, Handle: q.h, N: int64(n)})
	return rep.WCs, err
}

// State returns the queue pair's state; StateError if the peer cannot be
// asked.
func (q *remoteQP) State() verbs.State {
	rep, err := q.c.call(context.Background(), msg{Op: opState, Handle: q.h})
	if err != nil {
		return verbs.StateError
	}
	return rep.State
}

func (q *remoteQP) WaitError(ctx context.Context) error {
	_, err := q.c.call(ctx, msg{Op: opWaitError, Handle: q.h})
	return err
}

func (q *remoteQP) Disconnect() error {
	_, err := q.c.call(context.Background(), msg{Op: opDisconnect, Handle: q.h})
	return err
}

func (q *remoteQP) Close() error {
	_, err := q.c.call(context.Background(), msg{Op: opQPClose, Handle: q.h})
	return err
}

// remoteMR is a PeerMR at the far side of a remotePeer. Its address,
// length and keys are fixed at registration and known locally.
type remoteMR struct {
	c          *remotePeer
	h          uint64
	addr       uint64
	n          int
	rkey, lkey mreg.Key
}

func (m *remoteMR) Addr() uint64   { return m.addr }
func (m *remoteMR) Len() int       { return m.n }
func (m *remoteMR) RKey() mreg.Key { return m.rkey }
func (m *remoteMR) LKey() mreg.Key { return m.lkey }

func (m *remoteMR) Read() ([]byte, error) {
	rep, err := m.c.call(context.Background(), msg{Op: opRead, Handle: m.h})
	return rep.Data, err
}

func (m *remoteMR) Write(off int, p []byte) error {
	_, err := m.c.call(context.Background(), msg{Op: opWrite, Handle: m.h, N: int64(off), Data: p})
	return err
}

func (m *remoteMR) Deregister() error {
	_, err := m.c.call(context.Background(), msg{Op: opDeregister, Handle: m.h})
	return err
}
