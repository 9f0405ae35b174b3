package exs

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/exsgo/exs/dynproto"
	"github.com/exsgo/exs/internal/fifo"
	"github.com/exsgo/exs/internal/spin"
	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// maxGather is the most scatter/gather elements of one RDMA WRITE, and the
// most sends one transfer gathers from once the socket has sent from
// several buffers in one call (SendMsg).
const maxGather = 8

// gatherSends is the most sends one transfer gathers from: small sends
// that queue up go out as one transfer (one frame), their bytes in as many
// WRITEs of up to maxGather entries as they need, adjacent buffers merged.
// A transfer's WRITEs complete with its frame, so they must fit in the send
// queue with it: 32 sends of one buffer each take at most 8 WRITEs (one
// more for each send split at the stream buffer's end). Vectored sends,
// of up to MaxIOV buffers each, lower the limit to maxGather
// (dynproto.Engine.LimitGather), and the send queue holds that many
// (minSendDepth).
const gatherSends = 32

// minSendDepth is the least send queue depth: one transfer of maxGather
// vectored sends of MaxIOV buffers each (maxGather*MaxIOV/maxGather WRITEs)
// and its frame, with one to spare.
const minSendDepth = MaxIOV + 2

// ackFraction is the fraction of its stream buffer a receiver frees before
// it ACKs (dynproto.Config.AckThreshold).
const ackFraction = 8

// indirectFraction is the fraction of the peer's stream buffer that one
// indirect transfer carries at most (dynproto.Config.MaxIndirect).
const indirectFraction = 8

// advertFraction is the fraction of its stream buffer below which a
// receiver does not advertise a recv (dynproto.Config.AdvertMin).
const advertFraction = 32

// Work request identifiers. A frame's SEND is signaled and carries, in its
// WRID, how many write actions (bits 0..23) and write work requests (bits
// 24..47) were posted since the previous frame: the writes are unsignaled,
// and the frame's completion, which comes after theirs, completes them.
const (
	wridFrame uint64 = 1 << 63
	wridWrite uint64 = 1 << 62
	wridMask         = 1<<24 - 1
)

// testSendDepth, when non-zero, replaces the send queue depth (tests of
// the backlog of actions waiting for room).
var testSendDepth int

// sendDepthFor returns the depth of the send queue of a connection with
// the given number of frame buffers: room for a write and a frame per
// frame credit, twice over.
func sendDepthFor(frames int) int {
	if testSendDepth > 0 {
		return testSendDepth
	}
	return max(4*(frames+1), minSendDepth)
}

// wcBatch is how many completions one poll takes.
const wcBatch = 64

// conn is one connection end: a dynproto engine driven over a verbs queue
// pair. It is owned by the goroutine serving its socket; nothing in it is
// shared.
type conn struct {
	s     *Socket
	dev   *device
	eng   *dynproto.Engine
	qp    *verbs.QP
	cq    *verbs.CQ
	local hello // our parameters, sent to the peer

	frames   int    // regular frame buffers posted (plus one for the credit slot)
	frRecv   []byte // frame receive buffers, FrameSize each
	frRecvMR *verbs.MR
	frSend   []byte // frame send buffers, one per send queue slot
	frSendMR *verbs.MR
	frameSeq uint64 // frames posted
	// framesDone counts the frames whose SEND has completed; finSeq is
	// frameSeq once the FIN frame is posted (0 before): the FIN has
	// reached the peer once framesDone reaches it.
	framesDone uint64
	finSeq     uint64

	ring   []byte // the stream buffer (nil in direct-only mode)
	ringMR *verbs.MR
	// ringAlloc is the provider's allocator the stream buffer comes
	// from, so that the peer's indirect writes into it are a plain copy
	// (nil: from mreg.Alloc).
	ringAlloc Allocator

	peerKey  mreg.Key // the peer's stream buffer
	peerAddr uint64

	sendDepth    int
	outstanding  int // send work requests posted whose completion is not yet seen
	pendWrites   int // write actions since the last frame
	pendWriteWRs int // write work requests since the last frame

	// The batch of send work requests being built.
	wrs       []verbs.SendWR
	sges      []verbs.SGE
	sgeUsed   int
	open      int // index in wrs of a WRITE that a contiguous write may extend; -1 if none
	openKey   mreg.Key
	openEnd   uint64
	recvWR    verbs.RecvWR
	recvSGE   [1]verbs.SGE
	wcs       []verbs.WC
	acts      []dynproto.Action
	backlog   fifo.Queue[dynproto.Action] // actions waiting for room in the send queue
	cmds      []int32
	shutOps   []int32
	polls     []int32 // Socket.Poll operations waiting for their conditions
	sendTO    []timed // operations whose timeouts are watched (WithOpTimeout)
	recvTO    []timed
	deadline  time.Time   // the earliest of their deadlines, zero if none
	timer     *time.Timer // wakes idle at deadline
	pending   error       // a failure to handle at the next safe point
	failed    bool        // the queue pair is gone
	graceful  bool        // it went after both ends had shut down (and this end's sends completed)
	lostSends bool        // it went with sends not complete: they failed, and so do the shutdowns after them
	deadErr   error       // why the engine was aborted, or why the connection went
	canceled  int         // operations completed by the last abort

	sg []verbs.SGE // the scatter/gather entries of one write action (addWrite)

	drainState // the bytes each send moved, the drain of a cancel (drain.go)
	sfState    // the sendfile being fed (sendfile.go)
}

// newConn sets up the verbs resources of a connection end of socket s on
// device d: completion queue, queue pair in state Init with every frame
// buffer posted, and the stream buffer.
func newConn(s *Socket, d *device) (c *conn, err error) {
	cfg := &s.cfg
	c = &conn{s: s, dev: d, frames: cfg.frames, open: -1}
	defer func() {
		if err != nil {
			c.destroy()
			c = nil
		}
	}()
	c.sendDepth = sendDepthFor(cfg.frames)
	if c.cq, err = d.dev.CreateCQ(c.sendDepth+cfg.frames+1, verbs.CQOptions{Wait: verbs.WaitNotify}); err != nil {
		return
	}
	c.qp, err = d.pd.CreateQP(verbs.QPConfig{
		SendCQ:     c.cq,
		RecvCQ:     c.cq,
		SendDepth:  c.sendDepth,
		RecvDepth:  cfg.frames + 1,
		MaxSendSGE: maxGather,
		MaxRecvSGE: 1,
		// The protocol writes only into memory the peer granted and
		// announces each write with a later frame, so a transfer's
		// bytes may be placed while the previous transfer's frame is
		// still in flight: over the same-host provider the sender then
		// copies each transfer itself.
		RelaxedWritePlacement: true,
		// A busy-polling socket's connection goroutine never sleeps; the
		// provider's receiver (the same-host one's) must not either, or
		// each message can wait for its wake-up through the kernel (64 B
		// round trips between processes, median p50 of 22 points: 113 us
		// with the receivers sleeping, 6.8 us spinning; docs/performance.md).
		BusyPoll: cfg.wait == WaitBusyPoll,
	})
	if err != nil {
		return
	}
	c.frRecv = make([]byte, (cfg.frames+1)*dynproto.FrameSize)
	if c.frRecvMR, err = d.pd.RegisterMR(c.frRecv, mreg.LocalWrite); err != nil {
		return
	}
	c.frSend = make([]byte, c.sendDepth*dynproto.FrameSize)
	if c.frSendMR, err = d.pd.RegisterMR(c.frSend, 0); err != nil {
		return
	}
	c.local = hello{version: helloVersion, mode: cfg.mode, typ: s.typ, frames: uint16(cfg.frames)}
	if cfg.mode != ModeDirectOnly {
		if c.ring, c.ringAlloc, err = allocRing(d, cfg.streamBuf); err != nil {
			return
		}
		if c.ringMR, err = d.pd.RegisterMR(c.ring, mreg.LocalWrite|mreg.RemoteWrite); err != nil {
			return
		}
		c.local.ringSize = uint32(len(c.ring))
		c.local.ringKey = uint32(c.ringMR.RKey())
		c.local.ringAddr = c.ringMR.Addr()
	}
	c.recvWR.SGL = c.recvSGE[:]
	for slot := 0; slot <= cfg.frames; slot++ {
		if err = c.postFrameRecv(slot); err != nil {
			return
		}
	}
	c.wcs = make([]verbs.WC, wcBatch)
	c.acts = make([]dynproto.Action, 0, 64)
	c.wrs = make([]verbs.SendWR, 0, 32)
	c.sges = make([]verbs.SGE, 32*maxGather)
	c.sg = make([]verbs.SGE, 0, MaxIOV)
	return c, nil
}

// start creates the engine once the peer's parameters are known.
func (c *conn) start(peer *hello) error {
	cfg := &c.s.cfg
	eng, err := dynproto.New(dynproto.Config{
		Mode:           cfg.mode.proto(),
		Type:           c.s.typ.proto(),
		RecvBuffer:     len(c.ring),
		PeerRecvBuffer: int(peer.ringSize),
		Frames:         cfg.frames,
		PeerFrames:     int(peer.frames),
		MaxGather:      gatherSends,
		// ACK every eighth of the stream buffer rather than every half,
		// so that the sender refills the buffer while the receiver still
		// copies out of it (the ends work in turns with half: 9-10 against
		// 13-14 GB/s for 1 MiB messages indirect-only between processes).
		AckThreshold: len(c.ring) / ackFraction,
		// At most an eighth of the peer's stream buffer per indirect
		// transfer: the peer copies one out while this end writes the
		// next (1 MiB indirect-only between processes: 10-11 GB/s
		// uncapped, 19 GB/s capped at 512 KiB of 4 MiB).
		MaxIndirect: int(peer.ringSize) / indirectFraction,
		// Recvs shorter than a 32nd of the stream buffer are not
		// advertised (departure 12): below that, gathered indirect
		// transfers beat one direct transfer per recv between processes
		// (4 KiB: 4.1-4.6 GB/s direct-only, 6.6-7.4 indirect-only).
		AdvertMin: len(c.ring) / advertFraction,
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConnAborted, err)
	}
	c.eng = eng
	c.peerKey, c.peerAddr = mreg.Key(peer.ringKey), peer.ringAddr
	return nil
}

// destroy releases the verbs resources. The queue pair's Close flushes its
// work requests, so no memory is in use by the provider afterwards.
func (c *conn) destroy() {
	if c.qp != nil {
		c.qp.Close()
	}
	if c.cq != nil {
		c.cq.Close()
	}
	for _, mr := range []*verbs.MR{c.frRecvMR, c.frSendMR} {
		if mr != nil {
			mr.Deregister()
		}
	}
	if c.ring != nil {
		// The queue pair is closed, but a peer's write into the stream
		// buffer may still be being placed: wait for it, or the buffer
		// would stay registered (and allocated) for good.
		if c.ringMR == nil || deregisterWait(c.ringMR) == nil {
			if c.ringAlloc != nil {
				c.ringAlloc.Free(c.ring)
			} else {
				mreg.Free(c.ring)
			}
		}
		c.ring = nil
	}
}

// allocRing allocates a stream buffer of n bytes from the allocator of
// d's provider if it offers one (the peer then writes into it with a plain
// copy), else, or if that fails, from mreg.Alloc.
func allocRing(d *device, n int) ([]byte, Allocator, error) {
	if a, ok := d.dev.Provider().(Allocator); ok {
		if b, err := a.Alloc(n); err == nil {
			return b, a, nil
		}
	}
	b, err := mreg.Alloc(n)
	return b, nil, err
}

func (c *conn) postFrameRecv(slot int) error {
	c.recvWR.WRID = uint64(slot)
	c.recvSGE[0] = c.frRecvMR.SGE(slot*dynproto.FrameSize, dynproto.FrameSize)
	return c.qp.PostRecv(c.recvWR)
}

// loop is the progress engine of a connected socket: it hands posted
// operations to the engine, carries out the engine's actions over the
// queue pair, feeds it the queue pair's completions, copies out of the
// stream buffer, posts events, and sleeps when there is nothing to do. It
// returns once the socket is closed.
func (c *conn) loop() {
	s := c.s
	for {
		// Completions first: ADVERTs that arrived can then take the
		// sends posted meanwhile.
		busy := c.poll()
		if c.draining && c.drainOver() {
			busy = true
			c.cmds = c.endDrain(c.cmds[:0])
			c.apply()
		}
		if c.cmdsDue() {
			var closing bool
			c.cmds, closing = s.takeCommands(c.cmds)
			if c.draining {
				c.cmds = c.endDrain(c.cmds)
			}
			if closing {
				c.apply()
				c.close()
				return
			}
			if len(c.cmds) > 0 {
				busy = true
				c.apply()
			}
		}
		// After the connection went, the stream buffer still delivers
		// what arrived (the close rule).
		if c.eng.CanCopy() {
			busy = true
			c.acts = c.eng.Copy(c.acts)
			c.exec()
		}
		c.checkShutdowns()
		if len(c.polls) > 0 {
			c.polls = s.checkPolls(c.polls, c.pollHolds())
		}
		// Before checkTimeouts, which must see every operation completed
		// before flushDone frees its slot.
		c.releaseHeld()
		c.deadline = c.drainDeadline(c.checkTimeouts())
		if busy || len(s.done) > 0 {
			// Before the events: a Stats call after an event counts its
			// operation.
			s.publish(c.eng.Stats())
			s.flushDone()
			continue
		}
		c.idle()
	}
}

// apply hands the operations taken from the socket to the engine.
func (c *conn) apply() { c.applyOps(c.cmds) }

// applyOps hands operations to the engine.
func (c *conn) applyOps(cmds []int32) {
	s := c.s
	queued := false
cmds:
	for i, idx := range cmds {
		o := &s.ops[idx]
		if c.hold(idx) {
			continue
		}
		switch o.kind {
		case opSend:
			c.watch(idx)
			if o.sf != nil {
				c.startSendfile(idx)
			} else {
				if len(o.vec) > 1 {
					c.eng.LimitGather(maxGather)
				}
				c.acts = c.eng.QueueSend(c.acts, uint64(idx), o.size())
			}
			queued = true
		case opRecv:
			c.watch(idx)
			if o.vec != nil {
				c.postVecRecv(idx, o)
			} else {
				c.acts = c.eng.PostRecv(c.acts, uint64(idx), len(o.buf), o.waitAll)
			}
		case opShutdown:
			c.acts = c.eng.Shutdown(c.acts)
			c.shutOps = append(c.shutOps, idx)
		case opPoll:
			c.polls = append(c.polls, idx)
		case opCancel, opCancelOne:
			if c.cancel(idx, cmds[i+1:]) {
				break cmds
			}
		}
	}
	if queued {
		c.acts = c.eng.Pump(c.acts)
	}
	c.exec()
}

// exec carries out the engine's actions in order. An action that needs
// room in the send queue when there is none waits in the backlog, and so
// does every action after it.
func (c *conn) exec() {
	for i := range c.acts {
		a := &c.acts[i]
		if c.backlog.Len() > 0 || !c.do(a) {
			c.backlog.Push(*a)
		}
	}
	c.acts = c.acts[:0]
	c.flush()
	if c.pending != nil {
		err := c.pending
		c.pending = nil
		c.fail(err, false)
		c.exec()
	}
}

// drainBacklog carries out waiting actions while there is room.
func (c *conn) drainBacklog() {
	for c.backlog.Len() > 0 && c.do(c.backlog.At(0)) {
		c.backlog.Pop()
	}
	c.flush()
}

// poll takes completions from the completion queue and feeds them to the
// engine. It reports whether there were any.
func (c *conn) poll() bool {
	n := c.cq.Poll(c.wcs)
	if n == 0 {
		return false
	}
	for i := range c.wcs[:n] {
		if c.failed {
			break // the rest are flushes
		}
		c.onWC(&c.wcs[i])
	}
	c.exec()
	if c.backlog.Len() > 0 {
		c.drainBacklog()
		c.exec()
	}
	return true
}

// onWC handles one work completion.
func (c *conn) onWC(wc *verbs.WC) {
	if wc.Status != verbs.StatusSuccess {
		cause := c.qp.Err()
		switch {
		case c.s.closingA.Load():
			// This socket is being closed too (Stack.Close closes every
			// socket, and the first to go disconnects the others): its
			// operations are canceled, not reset.
			c.fail(errClosedCanceled, false)
		case errors.Is(cause, syscall.ETIMEDOUT):
			// The provider found the peer silent for too long (a host
			// that vanished): the peer is gone, as after a reset, but
			// the error says so (ETIMEDOUT, as TCP's).
			c.fail(fmt.Errorf("%w: %w", ErrPeerTimedOut, cause), true)
		case wc.Status == verbs.StatusFlushed && errors.Is(cause, syscall.ECONNRESET):
			c.fail(ErrConnReset, true)
		case cause != nil:
			c.fail(fmt.Errorf("%w: %w", ErrConnAborted, cause), false)
		default:
			c.fail(fmt.Errorf("%w: %v %v", ErrConnAborted, wc.Opcode, wc.Status), false)
		}
		return
	}
	var err error
	switch wc.Opcode {
	case verbs.WCSend:
		c.framesDone++
		writes := int(wc.WRID & wridMask)
		c.outstanding -= 1 + int(wc.WRID>>24&wridMask)
		c.notePlaced(writes)
		// The writes complete with their frame: all at once, with one
		// Pump (64 B messages gather 32 to a frame).
		c.acts, err = c.eng.WritesDone(c.acts, writes)
	case verbs.WCRecv:
		slot := int(wc.WRID)
		var f dynproto.Frame
		if wc.ByteLen != dynproto.FrameSize {
			err = fmt.Errorf("%w: frame of %d bytes", dynproto.ErrProtocol, wc.ByteLen)
			break
		}
		if err = f.Decode(c.frRecv[slot*dynproto.FrameSize : (slot+1)*dynproto.FrameSize]); err != nil {
			err = fmt.Errorf("%w: %w", dynproto.ErrProtocol, err)
			break
		}
		if err = c.postFrameRecv(slot); err != nil {
			c.fail(fmt.Errorf("%w: %w", ErrConnAborted, err), false)
			return
		}
		c.acts, err = c.eng.OnFrame(c.acts, &f)
	}
	if err != nil {
		c.s.log.Warn("protocol error", zap.String("addr", c.s.addr), zap.Error(err))
		c.fail(fmt.Errorf("%w: %w", ErrConnAborted, err), false)
	}
}

// fail ends the connection: the queue pair is destroyed (its work requests
// flushed, so the provider no longer uses any buffer, and the peer sees
// the connection go), and actions still waiting are carried out as far as
// they are local. When the peer ended the connection (disconnect: it
// closed, reset it or died), the engine keeps what arrived and the recvs
// still take it, then the end of the stream or err (dynproto's PeerGone:
// a byte whose send completed at the peer is never lost); otherwise (this
// end's Close or Cancel, a protocol or transport error) the engine is
// aborted with err, completing every operation. The engine's actions are
// appended to c.acts for exec.
func (c *conn) fail(err error, disconnect bool) {
	if c.failed {
		return
	}
	c.failed = true
	c.qp.Close()
	c.wrs = c.wrs[:0]
	c.sgeUsed = 0
	c.drainBacklog()
	c.canceled = 0
	c.deadErr = err
	c.writes = fifo.Queue[postedWrite]{}
	if disconnect {
		c.s.peerGone.Store(true)
		st := c.eng.State()
		c.graceful = st.FinSent && st.Sends == 0 && st.FinReceived
		c.lostSends = st.Sends > 0
		c.acts = c.eng.PeerGone(c.acts, err)
		return
	}
	c.acts = c.eng.Abort(c.acts, err)
	c.s.log.Debug("connection ended", zap.String("addr", c.s.addr), zap.Error(err))
}

// abort ends the connection for this end's Close or Cancel: what is still
// outstanding completes with err, and what the stream buffer holds is
// discarded, also after the peer ended the connection.
func (c *conn) abort(err error) {
	if !c.failed {
		c.fail(err, false)
		return
	}
	if c.eng.Dead() {
		return
	}
	c.canceled = 0
	c.deadErr = err
	c.acts = c.eng.Abort(c.acts, err)
}

// checkShutdowns completes the shutdowns whose end of stream has reached
// the peer: the FIN frame's SEND has completed, so a close that follows
// cannot overtake it, whatever the provider.
func (c *conn) checkShutdowns() {
	if len(c.shutOps) == 0 {
		return
	}
	if c.eng.Dead() {
		c.failShutdowns()
		return
	}
	// A connection that went after both ends had shut down (graceful) may
	// have lost the FIN's completion with it.
	reached := c.finSeq != 0 && c.framesDone >= c.finSeq || c.graceful
	if st := c.eng.State(); st.FinSent && st.Sends == 0 && reached && !c.lostSends {
		for _, idx := range c.shutOps {
			c.s.complete(idx, 0, nil, nil)
		}
		c.shutOps = c.shutOps[:0]
	} else if c.eng.Gone() {
		c.failShutdowns()
	}
}

// failShutdowns completes the pending shutdowns with the engine's abort
// error and returns how many.
func (c *conn) failShutdowns() int {
	n := len(c.shutOps)
	for _, idx := range c.shutOps {
		c.s.complete(idx, 0, c.deadErr, nil)
	}
	c.shutOps = c.shutOps[:0]
	return n
}

// close closes the connection for Close or Stack.Close and ends the
// goroutine.
func (c *conn) close() {
	if c.draining {
		// A cancel taken with the close: it ends the connection first.
		c.cmds = c.endDrain(c.cmds[:0])
		c.apply()
	}
	c.abort(errClosedCanceled)
	c.exec()
	c.releaseHeld()
	if c.deadErr == nil {
		c.deadErr = errClosedCanceled
	}
	c.failShutdowns()
	c.s.failPolls(c.polls, errClosedCanceled)
	c.polls = nil
	if c.timer != nil {
		c.timer.Stop()
	}
	c.s.publish(c.eng.Stats())
	c.s.flushDone()
	c.destroy()
	c.s.finish(errClosedCanceled, 0)
}

// idle waits for work: a posted operation, a close, a completion. In
// WaitAdaptive mode it spins first, in WaitBusyPoll it only spins.
func (c *conn) idle() {
	s := c.s
	if s.cfg.wait != WaitNotify && c.spin() {
		return
	}
	s.sleeping.Store(true)
	c.cq.RequestNotify()
	if c.cmdsDue() || c.cq.Len() != 0 || c.due() {
		s.sleeping.Store(false)
		return
	}
	timeout := c.timeoutC()
	select {
	case <-s.wake:
	case <-c.cq.Notify():
	case <-timeout:
	}
	s.sleeping.Store(false)
	s.gstats.Wakeups++
}

// spin waits for work by spinning, for the spin time in WaitAdaptive mode,
// and reports whether work came.
func (c *conn) spin() bool {
	s := c.s
	sp := spin.Spin{}
	if s.cfg.wait == WaitAdaptive {
		sp = spin.For(s.cfg.spin)
	}
	for !c.cmdsDue() && c.cq.Len() == 0 && !c.due() {
		if sp.Next() != spin.Again {
			return false
		}
	}
	return true
}
