package verbs

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/exsgo/exs/mreg"
)

// Phases of a send work request.
const (
	phaseQueued   uint8 = iota // posted, not handed to the provider
	phaseInflight              // handed to the provider, outcome unknown
	phaseDone                  // outcome known, completion not yet posted
)

// sendWQE is one slot of the send queue.
type sendWQE struct {
	m        Message
	wrID     uint64
	op       Opcode
	signaled bool
	lazy     bool // Message.Unconfirmed, set as it is handed over
	phase    uint8
	status   Status
	looked   bool           // refs and segs hold the local lookups
	sgl      []SGE          // the work request's list; cap MaxSendSGE
	segs     [][]byte       // local memory of each SGE, while looked
	refs     []*mreg.Region // references held, while looked
	ep       *Endpoint      // connection it was handed to, while inflight
	seq      uint64         // queue index, while inflight
	rd       segReader
	wr       segWriter
}

// sendQueue is a queue pair's send queue.
//
// Posters append at tail under mu. One goroutine at a time runs the queue
// (runSend), chosen by the counter req: whoever raises it from 0 runs,
// and whoever raises it further leaves the work to the runner, which runs
// again before it stops. The runner hands work requests to the provider in
// order ([head, next) are handed over, [next, tail) queued) and completes
// them in order from head. No lock is held while the provider runs, so two
// queue pairs may send to each other at once without a lock-order cycle.
type sendQueue struct {
	qp   *QP
	mu   sync.Mutex
	ring []sendWQE
	head uint64 // oldest not completed
	next uint64 // next to hand to the provider
	tail uint64 // next free

	stalled  bool        // the work request at next waits for a peer RECV (RNRWait)
	flushing bool        // a work request completed in error or was flushed: the later ones complete flushed
	unstall  atomic.Bool // set by Endpoint.Retry
	req      atomic.Int32
}

func (sq *sendQueue) init(qp *QP, depth, maxSGE int) {
	sq.qp = qp
	sq.ring = make([]sendWQE, depth)
	sgl := make([]SGE, depth*maxSGE)
	segs := make([][]byte, depth*maxSGE)
	refs := make([]*mreg.Region, depth*maxSGE)
	for i := range sq.ring {
		w := &sq.ring[i]
		lo, hi := i*maxSGE, (i+1)*maxSGE
		w.sgl = sgl[lo:lo:hi]
		w.segs = segs[lo:hi:hi]
		w.refs = refs[lo:hi:hi]
		w.m.w = w
	}
}

func (sq *sendQueue) at(i uint64) *sendWQE { return &sq.ring[i%uint64(len(sq.ring))] }

// PostSend posts one send work request; see PostSendBatch.
func (qp *QP) PostSend(wr SendWR) error {
	if err := qp.checkSend(&wr); err != nil {
		return err
	}
	if err := qp.filterPost(false, 1); err != nil {
		return err
	}
	sq := &qp.sq
	sq.mu.Lock()
	if err := qp.sendRoomLocked(1); err != nil {
		sq.mu.Unlock()
		return err
	}
	qp.appendSendLocked(&wr)
	qp.kickSendLocked()
	return nil
}

// PostSendBatch posts send work requests in order and returns how many it
// posted. If it posts fewer than len(wrs), the error says why wrs[n] was
// refused: ErrInvalid (a malformed request: unknown opcode, too many
// SGEs), ErrQueueFull (the send queue or the send CQ is full), ErrQPState
// (the queue pair is not connected), ErrClosed (destroyed), or the error of
// the provider's PostFilter (the whole batch then). Nothing is
// checked against memory at post time: a bad lkey or range completes with
// StatusLocalProtectionError.
//
// A work request posted while the queue pair is connected runs at once, in
// the calling goroutine, unless earlier ones are still waiting (for a peer
// RECV under RNRWait); posted in the Error state it completes at once with
// StatusFlushed. PostSendBatch never blocks and, in steady state, does not
// allocate. It is safe to call concurrently with every other method; the
// order between concurrent posters is the order they take the queue.
func (qp *QP) PostSendBatch(wrs []SendWR) (int, error) {
	if err := qp.filterPost(false, len(wrs)); err != nil {
		return 0, err
	}
	for i := range wrs {
		if err := qp.checkSend(&wrs[i]); err != nil {
			if i > 0 {
				n, err2 := qp.postSends(wrs[:i])
				if err2 != nil {
					return n, err2
				}
			}
			return i, err
		}
	}
	return qp.postSends(wrs)
}

// filterPost asks the provider's PostFilter, if it has one, about a post of
// n work requests on a queue pair with a connection.
func (qp *QP) filterPost(recv bool, n int) error {
	f := qp.dev.postFilter
	if f == nil {
		return nil
	}
	ep := qp.ep.Load()
	if ep == nil {
		return nil
	}
	return f.FilterPost(ep, recv, n)
}

// postSends posts checked work requests.
func (qp *QP) postSends(wrs []SendWR) (int, error) {
	sq := &qp.sq
	sq.mu.Lock()
	n := 0
	var err error
	for n < len(wrs) {
		// Reserve completion slots for the whole remaining room at once.
		k := min(len(wrs)-n, len(sq.ring)-int(sq.tail-sq.head))
		if k == 0 {
			err = qp.sendRoomLocked(1)
			break
		}
		if err = qp.sendRoomLocked(k); err != nil {
			if k > 1 && errors.Is(err, ErrQueueFull) {
				k = 1
				if err = qp.sendRoomLocked(1); err != nil {
					break
				}
			} else {
				break
			}
		}
		for range k {
			qp.appendSendLocked(&wrs[n])
			n++
		}
	}
	if n == 0 {
		sq.mu.Unlock()
		return 0, err
	}
	qp.kickSendLocked()
	return n, err
}

// checkSend validates a work request's form.
func (qp *QP) checkSend(wr *SendWR) error {
	if !wr.Opcode.valid() {
		return fmt.Errorf("%w: opcode %v", ErrInvalid, wr.Opcode)
	}
	if wr.Flags&^Signaled != 0 {
		return fmt.Errorf("%w: send flags %#x", ErrInvalid, wr.Flags)
	}
	_, err := checkSGL(wr.SGL, qp.cfg.MaxSendSGE)
	return err
}

// sendRoomLocked checks that n work requests may be posted and reserves
// their completion slots.
func (qp *QP) sendRoomLocked(n int) error {
	sq := &qp.sq
	if qp.closed.Load() {
		return ErrClosed
	}
	switch s := qp.State(); s {
	case StateReadyToSend, StateError:
	default:
		return fmt.Errorf("%w: post send in state %v", ErrQPState, s)
	}
	if int(sq.tail-sq.head)+n > len(sq.ring) {
		return fmt.Errorf("%w: send queue holds %d work requests", ErrQueueFull, len(sq.ring))
	}
	return qp.cfg.SendCQ.reserve(n)
}

// appendSendLocked copies wr into the next slot. Room was checked.
func (qp *QP) appendSendLocked(wr *SendWR) {
	sq := &qp.sq
	w := sq.at(sq.tail)
	w.wrID = wr.WRID
	w.op = wr.Opcode
	w.signaled = wr.Flags&Signaled != 0 || qp.cfg.SignalAll
	w.phase = phaseQueued
	w.status = 0
	w.looked = false
	w.sgl = append(w.sgl[:0], wr.SGL...)
	w.m.Op = wr.Opcode
	w.m.Imm = wr.Imm
	w.m.RKey = wr.RKey
	w.m.RAddr = wr.RemoteAddr
	sq.tail++
}

// kickSend runs the send queue, or leaves it to the goroutine running it.
func (qp *QP) kickSend() {
	if qp.sq.req.Add(1) != 1 {
		return
	}
	qp.sq.mu.Lock()
	qp.runSendLoop()
}

// kickSendLocked is kickSend called with sq.mu held, which it releases: a
// poster that becomes the runner keeps the lock for its first round.
func (qp *QP) kickSendLocked() {
	if qp.sq.req.Add(1) != 1 {
		qp.sq.mu.Unlock()
		return
	}
	qp.runSendLoop()
}

// runSendLoop runs the send queue, starting with sq.mu held, until no
// request to run it is left.
func (qp *QP) runSendLoop() {
	sq := &qp.sq
	for {
		qp.runSend()
		if sq.req.Add(-1) == 0 {
			return
		}
		// More requests came while running: they are covered by one more
		// run.
		sq.req.Store(1)
		sq.mu.Lock()
	}
}

// runSend completes finished work requests in order, hands queued ones to
// the provider while the queue pair is connected, and flushes everything
// once it is in Error. Only one goroutine runs it at a time (kickSend). It
// is called with sq.mu held and releases it.
func (qp *QP) runSend() {
	sq := &qp.sq
	unres := 0
	for {
		qp.completeDoneLocked()
		st := qp.State()
		if st == StateError {
			qp.flushSendLocked(&unres)
			break
		}
		if sq.stalled {
			if !sq.unstall.Swap(false) {
				break
			}
			sq.stalled = false
		}
		if sq.next == sq.tail || st != StateReadyToSend {
			break
		}
		ep := qp.ep.Load()
		w := sq.at(sq.next)
		sq.next++
		w.phase = phaseInflight
		w.ep = ep
		w.seq = sq.next - 1
		w.lazy = !w.signaled && w.op != OpRead && qp.mayConfirmLateLocked()
		sq.mu.Unlock()

		done, err := qp.execute(w, ep)

		var cause error
		sq.mu.Lock()
		if done && w.phase == phaseInflight {
			cause = qp.settleLocked(w, err)
		}
		if cause != nil {
			sq.mu.Unlock()
			qp.failFrom(ep, cause)
			sq.mu.Lock()
		}
	}
	qp.cfg.SendCQ.unreserve(unres)
	sq.mu.Unlock()
}

// completeDoneLocked completes, in order, the work requests at the head of
// the queue whose outcome is known, and gives back the CQ slots of the
// unsignaled ones among them before sq.mu (held) is released: whoever
// pushes a later completion (runSend, or Endpoint.Complete while runSend
// hands a work request to the provider) then finds the earlier slots free
// by the time it is seen.
func (qp *QP) completeDoneLocked() {
	sq := &qp.sq
	unres := 0
	for sq.head != sq.next {
		w := sq.at(sq.head)
		if w.phase != phaseDone {
			break
		}
		if w.status != StatusSuccess && !sq.flushing && qp.State() != StateError {
			// Failed, and the failFrom that follows its settling has
			// not moved the queue pair to Error yet: it completes
			// then (afterError runs the queue), so that whoever
			// polls its completion finds the cause in Err.
			break
		}
		if sq.flushing {
			// An earlier work request failed: the queue pair is
			// going to Error, and after a failed completion only
			// flushed ones follow, even for a work request the
			// provider reported done (a WRITE placed early under
			// RelaxedWritePlacement behind a SEND that the peer's
			// disconnect flushed).
			w.status = StatusFlushed
		}
		qp.completeSend(w, &unres)
		if w.status != StatusSuccess {
			sq.flushing = true
		}
		sq.head++
	}
	qp.cfg.SendCQ.unreserve(unres)
}

// mayConfirmLateLocked reports whether the unsignaled SEND or WRITE being
// handed over may be confirmed late (Message.Unconfirmed): until it is, it
// holds its send-queue slot and its CQ reservation, so the send queue must
// hold at most half its depth, and no more work requests than its send CQ
// has free slots. A stream of unsignaled work requests then finds room to
// post without waiting for the provider's deadline, whichever of the two
// is the smaller.
func (qp *QP) mayConfirmLateLocked() bool {
	held := int(qp.sq.tail - qp.sq.head)
	return held <= len(qp.sq.ring)/2 && held <= qp.cfg.SendCQ.free()
}

// flushSendLocked completes every work request still in the queue with
// StatusFlushed, in order; a work request whose outcome is known keeps it,
// unless an earlier one was flushed (after a flushed completion only
// flushed ones follow). A work request a provider still holds is flushed
// only once its connection has been terminated, so that the provider no
// longer touches its memory; the run that terminates it comes after.
func (qp *QP) flushSendLocked(unres *int) {
	sq := &qp.sq
	for sq.head != sq.tail {
		w := sq.at(sq.head)
		if w.phase == phaseInflight {
			if w.ep != nil && !w.ep.termDone.Load() {
				return
			}
		}
		if w.phase != phaseDone || sq.flushing {
			w.status = StatusFlushed
		}
		if w.status != StatusSuccess {
			sq.flushing = true // a failed one (held until the Error state) included
		}
		qp.completeSend(w, unres)
		sq.head++
	}
	sq.flushing = false
	sq.next = sq.tail
	sq.stalled = false
}

// execute looks up a work request's local memory and hands it to the
// provider.
func (qp *QP) execute(w *sendWQE, ep *Endpoint) (done bool, err error) {
	if !w.looked {
		access := mreg.Access(0)
		if w.op == OpRead {
			access = mreg.LocalWrite
		}
		for i, s := range w.sgl {
			r, b, err := qp.pd.table.Lookup(s.LKey, s.Addr, uint64(s.Len), access)
			if err != nil {
				for j := range i {
					w.refs[j].Release()
					w.refs[j], w.segs[j] = nil, nil
				}
				return true, &localError{err}
			}
			w.refs[i], w.segs[i] = r, b
		}
		w.looked = true
	}
	segs := w.segs[:len(w.sgl)]
	total := 0
	for _, s := range segs {
		total += len(s)
	}
	m := &w.m
	m.Len = total
	if w.op == OpRead {
		w.wr.reset(segs)
		m.Payload, m.Sink = nil, &w.wr
	} else {
		w.rd.reset(segs)
		m.Payload, m.Sink = &w.rd, nil
	}
	return ep.link.Transmit(m)
}

// localError marks an error of the local lookups of a work request.
type localError struct{ err error }

func (e *localError) Error() string { return "local memory check: " + e.err.Error() }
func (e *localError) Unwrap() error { return e.err }

// settleLocked records the outcome err of an in-flight work request. It
// returns the cause with which the queue pair must fail, or nil.
func (qp *QP) settleLocked(w *sendWQE, err error) error {
	sq := &qp.sq
	if err == nil {
		w.status = StatusSuccess
		w.phase = phaseDone
		return nil
	}
	if errors.Is(err, ErrNoRecv) && qp.cfg.RNR == RNRWait && w.ep != nil && sq.next == w.seq+1 {
		// Hold it: run it again when the peer posts a RECV.
		w.phase = phaseQueued
		w.ep = nil
		sq.next--
		sq.stalled = true
		return nil
	}
	w.status = statusOf(err)
	w.phase = phaseDone
	if w.status == StatusFlushed {
		return fmt.Errorf("%w: %w", ErrDisconnected, err)
	}
	return fmt.Errorf("%w: %v %v: %w", ErrTerminated, w.op, w.status, err)
}

// statusOf maps the outcome of a work request to its status.
func statusOf(err error) Status {
	var le *localError
	switch {
	case err == nil:
		return StatusSuccess
	case errors.As(err, &le):
		return StatusLocalProtectionError
	case errors.Is(err, mreg.ErrInvalidKey), errors.Is(err, mreg.ErrBounds), errors.Is(err, mreg.ErrAccess):
		return StatusRemoteAccessError
	case errors.Is(err, ErrNoRecv):
		return StatusRNRRetryExceeded
	case errors.Is(err, ErrTooLong), errors.Is(err, ErrInvalid):
		return StatusRemoteInvalidRequest
	case errors.Is(err, ErrRemoteOperation):
		return StatusRemoteOperationError
	case errors.Is(err, ErrClosed), errors.Is(err, ErrDisconnected), errors.Is(err, ErrTerminated):
		return StatusFlushed
	}
	return StatusLocalQPOperationError
}

// completeSend releases a finished work request's memory and posts its
// completion if it has one. A successful unsignaled work request adds its
// completion slot to *unres, which is given back to the CQ before any
// later completion is posted: whoever polls a completion finds the slots
// of the unsignaled work requests before it free.
func (qp *QP) completeSend(w *sendWQE, unres *int) {
	if w.looked {
		for i := range w.sgl {
			w.refs[i].Release()
			w.refs[i], w.segs[i] = nil, nil
		}
		w.looked = false
	}
	w.ep = nil
	w.m.Payload, w.m.Sink = nil, nil
	if w.status == StatusSuccess && !w.signaled {
		*unres++
		return
	}
	if *unres > 0 {
		qp.cfg.SendCQ.unreserve(*unres)
		*unres = 0
	}
	wc := WC{WRID: w.wrID, Status: w.status, Opcode: w.op.WCOpcode(), QPNum: qp.num}
	if w.status == StatusSuccess && w.op == OpRead {
		wc.ByteLen = uint32(w.m.Len)
	}
	qp.cfg.SendCQ.push(wc)
}
