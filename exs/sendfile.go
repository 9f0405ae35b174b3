package exs

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/exsgo/exs/dynproto"
	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// A sendfile reads its range into registered memory of its own, a few
// chunks at a time, and hands each chunk to the engine as a send as soon
// as it is read, while the chunks before it are being written: the bytes
// go from the file to the peer through the library's memory only, never
// through the caller's, and the reads overlap the transfers. A chunk's
// buffer is read again once its send has completed.
//
// Not a mapping of the file: a file truncated under a pending sendfile
// would make the provider's copy out of the mapping fault (SIGBUS), which
// kills the process, and the copy runs in the provider's code, beyond
// debug.SetPanicOnFault. pread returns what the file holds, and a short
// count at its end.

const (
	sfChunk  = 256 << 10 // bytes per chunk on a stream socket
	sfChunks = 4         // chunks per sendfile
)

// Engine send ids of sendfile chunks: idChunk, the run's serial in bits
// 8..39, the chunk's index in bits 0..7. Operation slots are below 2^31.
const (
	idChunk   uint64 = 1 << 40
	chunkMask uint64 = 1<<8 - 1
)

// sendfileArgs is what a Sendfile call gives its operation.
type sendfileArgs struct {
	file   *os.File // a duplicate of the caller's descriptor, closed with the operation
	offset int64
	count  int
	buf    []byte // the chunks, from mreg.Alloc
	mr     *verbs.MR
}

// release closes the file and frees the chunks. Called once the
// operation's transfers are over.
func (a *sendfileArgs) release() {
	a.file.Close()
	if a.mr != nil && deregisterWait(a.mr) == nil {
		mreg.Free(a.buf)
	}
}

// sendfileRun is the state of the sendfile being fed.
type sendfileRun struct {
	idx       int32 // the operation's slot
	serial    uint64
	args      *sendfileArgs
	chunk     int   // bytes per chunk
	free      []int // chunks not in use
	lens      []int // bytes in each chunk in use
	fed       int   // bytes read and handed to the engine
	placed    int   // bytes the peer got (drain.go)
	sent      int   // bytes of the chunks whose sends completed
	inflight  int   // chunks handed to the engine, not complete
	queued    bool  // a chunk was handed to the engine
	eof       bool  // nothing more to read: the range is done, the file ended or a read failed
	readErr   error
	needFeed  bool // a chunk is free: feed after the actions
	waitSends bool // nothing was handed over: complete after the earlier sends
}

// sfState is a conn's part for sendfiles.
type sfState struct {
	sfr    *sendfileRun
	sfRuns uint64
	// held are the sends and shutdowns posted after the sendfile being
	// fed: they go to the engine once it is complete, so that its chunks
	// are not interleaved with them.
	held []int32
}

// Sendfile posts a send of count bytes of the file f from offset, as
// exs_sendfile: the bytes go from the file to the peer through the
// library's registered memory (reads of a few 256 KiB chunks, in pipeline
// with their transfers), never through the caller's memory. f must be a
// regular file open for reading (a pipe, a socket, a device or a
// write-only file fails with ErrInvalid); the call duplicates its
// descriptor, so the caller may close f at once. flags must be 0. The
// reads run in the socket's progress goroutine with pread, at offset
// onwards, and do not move f's file offset.
//
// The sendfile is a send: it takes a send's place in the socket's order
// and limits, and completes with one EventSend whose N is the bytes sent.
// N is less than count when the file ends first (an offset beyond the end
// sends nothing: N 0, no error), including when the file is truncated
// while the sendfile is pending: the bytes sent are those the file held
// when each chunk was read. count 0 completes with N 0. A read that fails
// ends the sendfile with its error (matching the errno, such as EIO), N
// telling the bytes sent before; the stream then goes on with the next
// send. A sendfile canceled or failed with the connection reports in N the
// bytes the peer got, as a send does.
//
// On a seqpacket socket the range is one message: it is read whole, into
// memory of count bytes (at most MaxTransfer), before it is sent; a short
// read makes a shorter message, and an empty range (count 0, or an offset
// at or beyond the end) an empty message, as Send of an empty buffer does.
// A read that fails sends no message.
func (s *Socket) Sendfile(q *Queue, f *os.File, offset int64, count int, flags Flags, user any) error {
	const name = "sendfile"
	if err := s.checkQueue(q); err != nil {
		return opErr(name, "", err)
	}
	var err error
	switch {
	case flags != 0:
		err = fmt.Errorf("%w: sendfile flags %#x", ErrInvalid, uint8(flags))
	case f == nil:
		err = fmt.Errorf("%w: nil file", ErrInvalid)
	case offset < 0 || count < 0:
		err = fmt.Errorf("%w: offset %d, count %d", ErrInvalid, offset, count)
	case s.typ == SockSeqPacket && count > MaxTransfer:
		err = fmt.Errorf("%w: message of %d bytes, at most %d", ErrInvalid, count, MaxTransfer)
	}
	if err != nil {
		return opErr(name, "", err)
	}
	fi, err := f.Stat()
	if err != nil {
		return opErr(name, "", fmt.Errorf("%w: %w", ErrInvalid, err))
	}
	if !fi.Mode().IsRegular() {
		return opErr(name, "", fmt.Errorf("%w: %s is not a regular file (%v)", ErrInvalid, f.Name(), fi.Mode().Type()))
	}
	args := &sendfileArgs{offset: offset, count: count}
	if args.file, err = dupFile(f); err != nil {
		return opErr(name, "", err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case sockConnecting, sockConnected:
	case sockClosed:
		err = ErrClosed
	default:
		err = ErrNotConnected
	}
	if err == nil && s.nsend >= s.cfg.maxSends {
		err = errTooMany
	}
	if err == nil {
		size := max(count, 1)
		if s.typ == SockStream {
			size = min(size, sfChunk*sfChunks)
		}
		if args.buf, err = mreg.Alloc(size); err == nil {
			if args.mr, err = s.dev.pd.RegisterMR(args.buf, AccessRead.verbs()); err != nil {
				mreg.Free(args.buf)
			}
		}
	}
	o := op{kind: opSend, q: q, user: user, sf: args}
	if err == nil {
		err = s.reserveOp(&o)
	}
	if err != nil {
		args.release()
		return opErr(name, s.addr, err)
	}
	s.nsend++
	s.pushLocked(o)
	return nil
}

// hold keeps a send or a shutdown behind the sendfile being fed, and
// behind the operations already held, and reports whether it did.
func (c *conn) hold(idx int32) bool {
	if c.sfr == nil && len(c.held) == 0 {
		return false
	}
	switch c.s.ops[idx].kind {
	case opSend:
		c.watch(idx)
	case opShutdown:
	default:
		return false
	}
	c.held = append(c.held, idx)
	return true
}

// releaseHeld hands the held operations to the engine once no sendfile is
// being fed.
func (c *conn) releaseHeld() {
	c.endWaiting()
	for c.sfr == nil && len(c.held) > 0 {
		h := c.held
		c.held = nil
		c.applyOps(h)
	}
	c.endWaiting()
	if r := c.sfr; r != nil && r.needFeed && !c.draining {
		r.needFeed = false
		c.feed()
		c.acts = c.eng.Pump(c.acts)
		c.exec()
	}
}

// startSendfile starts feeding sendfile idx to the engine.
func (c *conn) startSendfile(idx int32) {
	o := &c.s.ops[idx]
	c.sfRuns++
	r := &sendfileRun{idx: idx, serial: c.sfRuns, args: o.sf, chunk: len(o.sf.buf)}
	if c.s.typ == SockStream {
		r.chunk = min(sfChunk, len(o.sf.buf))
	}
	n := len(o.sf.buf) / r.chunk
	r.lens = make([]int, n)
	for k := n - 1; k >= 0; k-- {
		r.free = append(r.free, k)
	}
	c.sfr = r
	c.feed()
}

// feed reads into the free chunks and hands them to the engine (the
// caller pumps). A chunk of 0 bytes is handed over only if no chunk was:
// the sendfile then completes in its turn with N 0.
func (c *conn) feed() {
	r := c.sfr
	for !r.eof && len(r.free) > 0 {
		k := r.free[len(r.free)-1]
		want := min(r.chunk, r.args.count-r.fed)
		b := r.args.buf[k*r.chunk : k*r.chunk+want]
		n, err := r.args.file.ReadAt(b, r.args.offset+int64(r.fed))
		switch {
		case err != nil && !errors.Is(err, io.EOF):
			r.eof, r.readErr = true, err
		case n < want:
			r.eof = true // the end of the file
		}
		r.fed += n
		if r.fed == r.args.count {
			r.eof = true
		}
		if n == 0 && (r.queued || r.readErr != nil && c.s.typ == SockSeqPacket) {
			break // nothing to send (no empty message for a failed read)
		}
		r.free = r.free[:len(r.free)-1]
		r.lens[k] = n
		r.inflight++
		r.queued = true
		c.acts = c.eng.QueueSend(c.acts, idChunk|(r.serial&(1<<32-1))<<8|uint64(k), n)
	}
	if r.eof && r.inflight == 0 {
		// Nothing handed over (a seqpacket read that failed): the
		// sendfile completes after the sends before it.
		r.waitSends = !r.queued
		c.endWaiting()
	}
}

// endWaiting completes the sendfile that handed nothing to the engine
// once the sends before it have completed.
func (c *conn) endWaiting() {
	if r := c.sfr; r != nil && r.waitSends && c.eng.State().Sends == 0 {
		c.endSendfile(r.sent, r.readErr)
	}
}

// chunkDone handles the completion of a chunk's send.
func (c *conn) chunkDone(a *dynproto.Action) {
	r := c.sfr
	if r == nil || a.ID>>8&(1<<32-1) != r.serial&(1<<32-1) {
		return // a chunk of a sendfile that already failed
	}
	if a.Err != nil {
		// The connection failed or the stream was shut down: nothing of
		// this sendfile is in flight any more.
		if a.Err == c.deadErr {
			c.canceled++
		}
		n := r.placed
		if c.s.typ == SockSeqPacket && n != r.fed {
			n = 0
		}
		c.endSendfile(n, a.Err)
		return
	}
	k := int(a.ID & chunkMask)
	r.inflight--
	r.sent += r.lens[k]
	r.free = append(r.free, k)
	if r.eof {
		if r.inflight == 0 {
			c.endSendfile(r.sent, r.readErr)
		}
		return
	}
	r.needFeed = true // not here: the caller is iterating over c.acts
}

// endSendfile completes the sendfile being fed.
func (c *conn) endSendfile(n int, err error) {
	idx := c.sfr.idx
	c.sfr = nil
	c.s.complete(idx, n, err, nil)
}

// sfPlaced credits n bytes the peer got to the sendfile being fed.
func (c *conn) sfPlaced(n int) {
	if c.sfr != nil {
		c.sfr.placed += n
	}
}

// sendSrc returns the local address and key of the bytes of engine send
// id: an operation's buffer, or a sendfile's chunk.
func (c *conn) sendSrc(id uint64) (uint64, mreg.Key) {
	if id&idChunk != 0 {
		r := c.sfr
		k := int(id & chunkMask)
		return r.args.mr.Addr() + uint64(k*r.chunk), r.args.mr.LKey()
	}
	o := &c.s.ops[id]
	return o.addr, o.mr.LKey()
}
