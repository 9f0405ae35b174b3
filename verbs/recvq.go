package verbs

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/exsgo/exs/mreg"
)

// recvWQE is one slot of the receive queue.
type recvWQE struct {
	wrID uint64
	sgl  []SGE // cap MaxRecvSGE
	segs [][]byte
	refs []*mreg.Region
}

// recvQueue is a queue pair's receive queue. mu guards everything,
// including the inbound side: a Deliver holds it while it consumes a RECV
// (see deliverLocked), so that RECVs complete one at a time, in order, and
// a flush never overtakes a placement into a RECV.
type recvQueue struct {
	mu         sync.Mutex
	ring       []recvWQE
	head, tail uint64
	rnrWaiting bool // a Deliver reported ErrNoRecv since the last RECV
}

func (rq *recvQueue) init(depth, maxSGE int) {
	rq.ring = make([]recvWQE, depth)
	sgl := make([]SGE, depth*maxSGE)
	segs := make([][]byte, depth*maxSGE)
	refs := make([]*mreg.Region, depth*maxSGE)
	for i := range rq.ring {
		lo, hi := i*maxSGE, (i+1)*maxSGE
		rq.ring[i] = recvWQE{sgl: sgl[lo:lo:hi], segs: segs[lo:hi:hi], refs: refs[lo:hi:hi]}
	}
}

func (rq *recvQueue) at(i uint64) *recvWQE { return &rq.ring[i%uint64(len(rq.ring))] }

// PostRecv posts one receive work request; see PostRecvBatch.
func (qp *QP) PostRecv(wr RecvWR) error {
	if _, err := checkSGL(wr.SGL, qp.cfg.MaxRecvSGE); err != nil {
		return err
	}
	if err := qp.filterPost(true, 1); err != nil {
		return err
	}
	rq := &qp.rq
	rq.mu.Lock()
	if err := qp.recvRoomLocked(1); err != nil {
		rq.mu.Unlock()
		return err
	}
	l := qp.appendRecvLocked(&wr)
	rq.mu.Unlock()
	qp.recvPosted(l)
	return nil
}

// PostRecvBatch posts receive work requests in order and returns how many
// it posted; the error says why wrs[n] was refused: ErrInvalid (too many
// SGEs), ErrQueueFull (the receive queue or the receive CQ is full),
// ErrQPState (state Reset), ErrClosed, or the error of the provider's
// PostFilter (the whole batch then). RECVs may be posted from state Init
// on, before the queue pair is connected; posted in the Error state they
// complete at once with StatusFlushed. The scatter list is checked when a
// message consumes the RECV (StatusLocalProtectionError then).
//
// A RECV posted while the peer's SEND waits for one (RNRWait) lets that
// SEND, and the work queued behind it, proceed; with the in-process
// provider it runs in the calling goroutine. PostRecvBatch never blocks,
// does not allocate, and is safe to call concurrently with every other
// method.
func (qp *QP) PostRecvBatch(wrs []RecvWR) (int, error) {
	if err := qp.filterPost(true, len(wrs)); err != nil {
		return 0, err
	}
	rq := &qp.rq
	n := 0
	var err error
	var wake Link
	rq.mu.Lock()
	for n < len(wrs) {
		if _, err = checkSGL(wrs[n].SGL, qp.cfg.MaxRecvSGE); err != nil {
			break
		}
		if err = qp.recvRoomLocked(1); err != nil {
			break
		}
		if l := qp.appendRecvLocked(&wrs[n]); l != nil {
			wake = l
		}
		n++
	}
	rq.mu.Unlock()
	qp.recvPosted(wake)
	return n, err
}

// recvRoomLocked checks that n RECVs may be posted and reserves their
// completion slots.
func (qp *QP) recvRoomLocked(n int) error {
	rq := &qp.rq
	if qp.closed.Load() {
		return ErrClosed
	}
	if s := qp.State(); s == StateReset {
		return fmt.Errorf("%w: post receive in state %v", ErrQPState, s)
	}
	if int(rq.tail-rq.head)+n > len(rq.ring) {
		return fmt.Errorf("%w: receive queue holds %d work requests", ErrQueueFull, len(rq.ring))
	}
	return qp.cfg.RecvCQ.reserve(n)
}

// appendRecvLocked queues wr, or flushes it at once in the Error state. It
// returns the link to tell if a sender waits for the RECV, else nil. While
// the link is not yet known the sender keeps waiting and rewake tells it
// later.
func (qp *QP) appendRecvLocked(wr *RecvWR) Link {
	rq := &qp.rq
	if qp.State() == StateError {
		qp.cfg.RecvCQ.push(WC{WRID: wr.WRID, Status: StatusFlushed, Opcode: WCRecv, QPNum: qp.num})
		return nil
	}
	w := rq.at(rq.tail)
	w.wrID = wr.WRID
	w.sgl = append(w.sgl[:0], wr.SGL...)
	rq.tail++
	return qp.wakeLocked()
}

// wakeLocked clears rnrWaiting and returns the link to tell, if a sender
// waits and the link is known.
func (qp *QP) wakeLocked() Link {
	rq := &qp.rq
	if !rq.rnrWaiting || rq.head == rq.tail {
		return nil
	}
	ep := qp.ep.Load()
	if ep == nil {
		return nil
	}
	l := ep.getLink()
	if l != nil {
		rq.rnrWaiting = false
	}
	return l
}

// recvPosted tells the provider that a RECV arrived for a waiting sender.
func (qp *QP) recvPosted(l Link) {
	if l != nil {
		l.RecvPosted()
	}
}

// rewake passes on a RECV that was posted for a waiting sender before the
// connection's link was known.
func (qp *QP) rewake() {
	qp.rq.mu.Lock()
	l := qp.wakeLocked()
	qp.rq.mu.Unlock()
	qp.recvPosted(l)
}

// flushRecvLocked completes every queued RECV with StatusFlushed.
func (qp *QP) flushRecvLocked() {
	rq := &qp.rq
	for rq.head != rq.tail {
		w := rq.at(rq.head)
		rq.head++
		qp.cfg.RecvCQ.push(WC{WRID: w.wrID, Status: StatusFlushed, Opcode: WCRecv, QPNum: qp.num})
	}
	rq.rnrWaiting = false
}

// completeRecvLocked pops the head RECV and posts its completion.
func (qp *QP) completeRecvLocked(wc WC) {
	rq := &qp.rq
	w := rq.at(rq.head)
	rq.head++
	wc.WRID = w.wrID
	wc.QPNum = qp.num
	qp.cfg.RecvCQ.push(wc)
}

// deliverLocked places an incoming message that consumes a RECV (SEND,
// SEND_WITH_IMM, RDMA_WRITE_WITH_IMM); see Endpoint.Deliver. It is called
// with rq.mu held and returns with it held, but releases it while it
// copies the data of a WRITE_WITH_IMM, which does not go into the RECV:
// the target application's posts are not held up by a slow payload. A
// SEND keeps the lock while it fills its RECV, so that a flush never
// reports a RECV whose buffer is still being written. It returns the
// outcome for the initiator and, if the message made this queue pair
// fail, the cause (the caller then moves it to Error).
func (qp *QP) deliverLocked(m *Message) (err, cause error) {
	rq := &qp.rq
	switch m.Op {
	case OpWriteWithImm:
		if rq.head == rq.tail {
			rq.rnrWaiting = true
			return ErrNoRecv, nil
		}
		r, dst, err := qp.checkOneSided(m)
		if err != nil {
			return err, fmt.Errorf("%w: incoming %v rejected: %w", ErrTerminated, m.Op, err)
		}
		head := rq.head
		rq.mu.Unlock()
		err = readFull(m, dst)
		r.Release()
		rq.mu.Lock()
		if err != nil {
			return err, incomingCause(m.Op, err)
		}
		// Deliver calls are serial, so only a flush can have moved the
		// head meanwhile: then the RECV has its flush completion.
		if rq.head == head {
			qp.completeRecvLocked(WC{Status: StatusSuccess, Opcode: WCRecvWithImm, Flags: WCWithImm, ByteLen: uint32(m.Len), Imm: m.Imm})
		}
		return nil, nil

	case OpSend, OpSendWithImm:
		if rq.head == rq.tail {
			rq.rnrWaiting = true
			return ErrNoRecv, nil
		}
		w := rq.at(rq.head)
		capacity := 0
		for i, s := range w.sgl {
			r, b, err := qp.pd.table.Lookup(s.LKey, s.Addr, uint64(s.Len), mreg.LocalWrite)
			if err != nil {
				for j := range i {
					w.refs[j].Release()
					w.refs[j], w.segs[j] = nil, nil
				}
				qp.completeRecvLocked(WC{Status: StatusLocalProtectionError, Opcode: WCRecv})
				return ErrRemoteOperation, fmt.Errorf("%w: receive buffer: %w", ErrTerminated, err)
			}
			w.refs[i], w.segs[i] = r, b
			capacity += len(b)
		}
		var cause error
		n := m.Len
		switch {
		case n < 0:
			// The provider learns the length at the message's end.
			if n, err = readToEOF(payload(m), w.segs[:len(w.sgl)]); err == ErrTooLong {
				cause = fmt.Errorf("%w: %v longer than its %d-byte receive", ErrTerminated, m.Op, capacity)
			} else if err != nil {
				cause = incomingCause(m.Op, err)
			}
		case n > capacity:
			err = ErrTooLong
			cause = fmt.Errorf("%w: %d-byte %v into a %d-byte receive", ErrTerminated, m.Len, m.Op, capacity)
		default:
			if err = readInto(payload(m), w.segs[:len(w.sgl)], m.Len); err != nil {
				cause = incomingCause(m.Op, err)
			}
		}
		for i := range w.sgl {
			w.refs[i].Release()
			w.refs[i], w.segs[i] = nil, nil
		}
		wc := WC{Status: StatusSuccess, Opcode: WCRecv, ByteLen: uint32(n)}
		switch {
		case err == ErrTooLong:
			wc = WC{Status: StatusLocalLengthError, Opcode: WCRecv}
		case errors.Is(err, ErrDisconnected):
			// Never whole: flushed, as by the disconnect it is.
			wc = WC{Status: StatusFlushed, Opcode: WCRecv}
		case err != nil:
			wc = WC{Status: StatusLocalQPOperationError, Opcode: WCRecv}
		case m.Op == OpSendWithImm:
			wc.Flags, wc.Imm = WCWithImm, m.Imm
		}
		qp.completeRecvLocked(wc)
		return err, cause
	}
	err = fmt.Errorf("%w: incoming opcode %v", ErrInvalid, m.Op)
	return err, fmt.Errorf("%w: %w", ErrTerminated, err)
}

// incomingCause returns the cause with which the queue pair fails when
// the data of an incoming message of opcode op could not be read (err):
// the peer's disconnect if the connection ended in the middle of the
// message (the provider's error matches ErrDisconnected: the peer
// terminated, or its stream ended, before the rest came), a termination
// otherwise.
func incomingCause(op Opcode, err error) error {
	if errors.Is(err, ErrDisconnected) {
		return fmt.Errorf("by peer: incoming %v cut short: %w", op, err)
	}
	return fmt.Errorf("%w: incoming %v: %w", ErrTerminated, op, err)
}

// readToEOF fills the segments segs, in order, from r until r reports
// io.EOF, and returns the bytes read; ErrTooLong if r has more than they
// hold. Any other error of r is returned as it is: io.ErrUnexpectedEOF
// from a provider is a message cut short, not its end.
func readToEOF(r io.Reader, segs [][]byte) (int, error) {
	n := 0
	for _, s := range segs {
		for len(s) > 0 {
			k, err := r.Read(s)
			n += k
			s = s[k:]
			switch {
			case err == io.EOF:
				return n, nil
			case err != nil:
				return n, err
			}
		}
	}
	var one [1]byte
	for {
		k, err := r.Read(one[:])
		switch {
		case k > 0:
			return n, ErrTooLong
		case err == io.EOF:
			return n, nil
		case err != nil:
			return n, err
		}
	}
}

// readFull reads the message's payload into dst.
func readFull(m *Message, dst []byte) error {
	if len(dst) == 0 {
		return nil
	}
	_, err := io.ReadFull(payload(m), dst)
	return err
}

// payload returns m's payload, or a reader at EOF if it has none.
func payload(m *Message) io.Reader {
	if m.Payload == nil {
		return eofReader{}
	}
	return m.Payload
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }
