package verbs

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
)

// State is the state of a queue pair. The zero State is not a state.
//
//	  CreateQP
//	     |
//	     v          Modify(Reset)
//	   Init ------------------------> Reset
//	   | ^  <------------------------   ^
//	   | |          Modify(Init)         |
//	   | | Connect or Accept fails       |
//	   v |                               |
//	ReadyToReceive                       |
//	   |                                 |
//	   | connection established          |
//	   v                                 |
//	ReadyToSend                          |
//	   |                                 |
//	   | Disconnect, Close, Modify(Error),
//	   | an error of either end,         |
//	   | the peer's disconnect           |
//	   v                                 |
//	 Error ------------------------------+
//	          Modify(Reset)
//
// Every state may move to Error (Modify(Error), Close). Init and Error
// move to Reset with Modify once the connection is gone; Reset moves to
// Init. ReadyToReceive and ReadyToSend are entered only by Connect and
// ConnRequest.Accept.
type State uint32

const (
	// StateReset: the queue pair holds no work requests and accepts no
	// posts.
	StateReset State = iota + 1
	// StateInit: RECVs may be posted, sends not yet. A new queue pair is
	// in Init (rdma_cm's rdma_create_qp does the same).
	StateInit
	// StateReadyToReceive: the queue pair is being connected and accepts
	// incoming messages; sends may not be posted yet.
	StateReadyToReceive
	// StateReadyToSend: connected; every post is allowed.
	StateReadyToSend
	// StateError: the connection is gone. Outstanding work requests have
	// been (or are being) flushed, and work requests posted in this state
	// complete at once with StatusFlushed.
	StateError
)

// String returns the state's name.
func (s State) String() string {
	switch s {
	case StateReset:
		return "Reset"
	case StateInit:
		return "Init"
	case StateReadyToReceive:
		return "ReadyToReceive"
	case StateReadyToSend:
		return "ReadyToSend"
	case StateError:
		return "Error"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// RNRPolicy says what a queue pair does when a SEND (or RDMA WRITE with
// immediate data) it sent finds no RECV posted at the peer (receiver not
// ready).
type RNRPolicy uint8

const (
	// RNRWait holds the SEND, and every work request posted after it,
	// until the peer posts a RECV: the software form of an infinite RNR
	// retry count (rnr_retry = 7). It is the default.
	RNRWait RNRPolicy = iota + 1
	// RNRFail completes the SEND at once with StatusRNRRetryExceeded and
	// moves the queue pair, and so its peer, to the Error state (an RNR
	// retry count of 0).
	RNRFail
)

// String returns the policy's name.
func (p RNRPolicy) String() string {
	switch p {
	case RNRWait:
		return "RNRWait"
	case RNRFail:
		return "RNRFail"
	}
	return "RNRPolicy(" + strconv.Itoa(int(p)) + ")"
}

// Defaults and limits of QPConfig.
const (
	DefaultDepth  = 128     // SendDepth and RecvDepth when zero
	DefaultMaxSGE = 4       // MaxSendSGE and MaxRecvSGE when zero
	MaxDepth      = 1 << 16 // largest SendDepth or RecvDepth
	MaxSGE        = 64      // largest MaxSendSGE or MaxRecvSGE
)

// QPConfig configures a queue pair. Zero fields take their defaults;
// SendCQ and RecvCQ are required (they may be the same CQ).
type QPConfig struct {
	// SendCQ receives the completions of send work requests.
	SendCQ *CQ
	// RecvCQ receives the completions of receive work requests.
	RecvCQ *CQ
	// SendDepth is the most send work requests that may be outstanding
	// (posted and not completed); a post beyond it fails with
	// ErrQueueFull. Zero means DefaultDepth.
	SendDepth int
	// RecvDepth is the most RECVs that may be outstanding. Zero means
	// DefaultDepth.
	RecvDepth int
	// MaxSendSGE and MaxRecvSGE bound the scatter/gather lists of send
	// and receive work requests. Zero means DefaultMaxSGE.
	MaxSendSGE int
	MaxRecvSGE int
	// SignalAll makes every send work request signaled.
	SignalAll bool
	// RNR is the receiver-not-ready policy. Zero means RNRWait.
	RNR RNRPolicy
	// RelaxedWritePlacement relaxes one ordering rule for this queue
	// pair's RDMA WRITEs (OpWrite): a WRITE may be placed at the peer
	// before the messages posted ahead of it that consume a RECV there
	// (OpSend, OpSendWithImm, OpWriteWithImm) are delivered, even if one
	// of them is then held for want of a RECV (RNRWait) or fails. Its
	// completion stays in post order, after theirs; if one of them fails,
	// the WRITE, already placed, may complete with StatusSuccess instead
	// of StatusFlushed (or StatusFlushed, placed or not). Its bytes may
	// land before those of an earlier OpWriteWithImm still in flight, so
	// the two must not target the same memory.
	//
	// Everything else holds as without it: completions come in post
	// order; a WRITE is placed after every earlier WRITE of the queue
	// pair has been placed and every earlier READ has read its data; a
	// SEND or WRITE_WITH_IMM is delivered only after every earlier WRITE
	// has been placed (a notification after data needs no fence); the
	// protection checks, the Error state and its flushes are unchanged. A
	// provider may honour it (the same-host provider then copies such a
	// WRITE into the peer's memory at once instead of queueing it behind
	// the SENDs) or ignore it, placing in post order, which the relaxed
	// rules allow too. It suits a protocol that WRITEs only into memory the
	// peer granted and announces each WRITE with a later SEND (exs sets
	// it). The conformance suite (package verbstest) runs the tests that
	// depend on it both ways.
	RelaxedWritePlacement bool
	// BusyPoll asks a provider that does a connection's receive work on a
	// goroutine of its own never to put that goroutine to sleep: it keeps
	// checking for work, yielding the processor between checks, for as
	// long as the connection lasts, as an application that busy-polls its
	// CQ keeps checking. A provider that sleeps after a spin time wakes
	// through the kernel (a futex), tens of microseconds and more on a
	// loaded machine; with one P per process the sleeping goroutine also
	// holds its process's only P until the runtime takes it back, so a
	// busy-polled connection whose round trip came to exceed the spin time
	// once went on paying a wake-up on each side for every message. The
	// goroutine stays runnable for the connection's life: with one P it
	// shares the P with the application's own spinning goroutines, with
	// more it can keep a CPU of its own busy. The same-host provider
	// honours it; a provider without such a goroutine ignores it.
	BusyPoll bool
}

// QP is a reliable-connected queue pair: a send queue and a receive queue
// whose work requests move data to and from one peer queue pair, and
// complete, each exactly once and in the order they were posted, on the
// configured completion queues.
//
// A QP is safe for concurrent use: any number of goroutines may post and
// poll at once. Posting never blocks: work runs in the posting goroutine,
// or in whichever goroutine (of this side or of the peer, for the
// in-process provider) next finds it runnable; no goroutine is started.
// The zero QP is not usable: call PD.CreateQP.
type QP struct {
	pd  *PD
	dev *Device
	num uint32
	cfg QPConfig

	st     atomic.Uint32            // State
	closed atomic.Bool              // set under sq.mu and rq.mu
	ep     atomic.Pointer[Endpoint] // the current connection's end, or nil
	// epMu makes a change of ep atomic with the state change that goes
	// with it, against an endpoint's Terminated: a connection that ended
	// must not fail the queue pair's next one. It is held for no call out
	// of this package.
	epMu  sync.Mutex
	peer  atomic.Pointer[Peer] // the current connection's ends, once connected
	mu    sync.Mutex           // serializes Connect, Accept, Modify, Disconnect, Close
	errMu sync.Mutex           // guards cause and done
	cause error                // why the QP entered Error
	done  chan struct{}        // closed when the QP enters Error
	sq    sendQueue
	rq    recvQueue
}

// CreateQP creates a reliable-connected queue pair in the protection
// domain, in state Init: RECVs may be posted at once; sends once it is
// connected with Connect or ConnRequest.Accept.
func (pd *PD) CreateQP(cfg QPConfig) (*QP, error) {
	if err := cfg.normalize(pd.dev); err != nil {
		return nil, err
	}
	pd.mu.Lock()
	if pd.closed {
		pd.mu.Unlock()
		return nil, fmt.Errorf("verbs: protection domain: %w", ErrClosed)
	}
	pd.nqp++
	pd.mu.Unlock()

	qp := &QP{pd: pd, dev: pd.dev, cfg: cfg, done: make(chan struct{})}
	if err := cfg.SendCQ.attach(); err != nil {
		pd.release()
		return nil, err
	}
	if err := cfg.RecvCQ.attach(); err != nil {
		cfg.SendCQ.detach()
		pd.release()
		return nil, err
	}
	qp.sq.init(qp, cfg.SendDepth, cfg.MaxSendSGE)
	qp.rq.init(cfg.RecvDepth, cfg.MaxRecvSGE)
	d := pd.dev
	if err := d.add(func() {
		d.nextQPN++
		qp.num = d.nextQPN
		d.qps[qp] = struct{}{}
	}); err != nil {
		cfg.SendCQ.detach()
		cfg.RecvCQ.detach()
		pd.release()
		return nil, err
	}
	qp.st.Store(uint32(StateInit))
	return qp, nil
}

// release undoes the count of a queue pair in pd.
func (pd *PD) release() {
	pd.mu.Lock()
	pd.nqp--
	pd.mu.Unlock()
}

// normalize fills in defaults and checks the configuration.
func (c *QPConfig) normalize(d *Device) error {
	switch {
	case c.SendCQ == nil || c.RecvCQ == nil:
		return fmt.Errorf("%w: queue pair needs a send and a receive completion queue", ErrInvalid)
	case c.SendCQ.dev != d || c.RecvCQ.dev != d:
		return fmt.Errorf("%w: completion queue of another device", ErrInvalid)
	case c.SendDepth < 0 || c.RecvDepth < 0 || c.SendDepth > MaxDepth || c.RecvDepth > MaxDepth:
		return fmt.Errorf("%w: queue depth out of [0, %d]", ErrInvalid, MaxDepth)
	case c.MaxSendSGE < 0 || c.MaxRecvSGE < 0 || c.MaxSendSGE > MaxSGE || c.MaxRecvSGE > MaxSGE:
		return fmt.Errorf("%w: scatter/gather limit out of [0, %d]", ErrInvalid, MaxSGE)
	case c.RNR > RNRFail:
		return fmt.Errorf("%w: %v", ErrInvalid, c.RNR)
	}
	if c.SendDepth == 0 {
		c.SendDepth = DefaultDepth
	}
	if c.RecvDepth == 0 {
		c.RecvDepth = DefaultDepth
	}
	if c.MaxSendSGE == 0 {
		c.MaxSendSGE = DefaultMaxSGE
	}
	if c.MaxRecvSGE == 0 {
		c.MaxRecvSGE = DefaultMaxSGE
	}
	if c.RNR == 0 {
		c.RNR = RNRWait
	}
	return nil
}

// Num returns the queue pair's number, unique within its device; WC.QPNum
// carries it.
func (qp *QP) Num() uint32 { return qp.num }

// Config returns the queue pair's configuration, with defaults filled in.
func (qp *QP) Config() QPConfig { return qp.cfg }

// PD returns the protection domain the queue pair was created in.
func (qp *QP) PD() *PD { return qp.pd }

// State returns the queue pair's current state.
func (qp *QP) State() State { return State(qp.st.Load()) }

// Done returns a channel that is closed when the queue pair enters the
// Error state: its connection is gone, by Disconnect, Close, the peer, or
// an error. Err then says why. After Modify(Reset) a new channel is
// returned.
func (qp *QP) Done() <-chan struct{} {
	qp.errMu.Lock()
	defer qp.errMu.Unlock()
	return qp.done
}

// Err returns why the queue pair entered the Error state (nil before):
// ErrDisconnected (wrapped) after a disconnect by either end, an error
// satisfying errors.Is(err, ErrTerminated) after an error of either end.
// It is not nil once State has returned Error, and a send work request
// that fails completes only after that: a user that polls a completion
// flushed when a connection ended, and asks Err why, gets the cause.
func (qp *QP) Err() error {
	qp.errMu.Lock()
	defer qp.errMu.Unlock()
	return qp.cause
}

// enterError moves the queue pair to the Error state, recording cause. It
// reports whether it made the move (false if the queue pair was already in
// Error). It takes no lock but errMu, so it may be called anywhere; the
// caller then calls afterError, outside of any lock.
//
// The move and the cause are made under errMu, so that Err never returns
// nil once State has returned Error: a goroutine that sees the state (or a
// work request flushed because of it) and then asks Err waits for the
// cause instead of finding none.
func (qp *QP) enterError(cause error) bool {
	qp.errMu.Lock()
	defer qp.errMu.Unlock()
	for {
		s := qp.st.Load()
		if State(s) == StateError {
			return false
		}
		if qp.st.CompareAndSwap(s, uint32(StateError)) {
			break
		}
	}
	qp.cause = cause
	close(qp.done)
	return true
}

// afterError finishes a move to the Error state made while ep (nil: none)
// was the queue pair's connection: it terminates ep, flushes the receive
// queue and runs the send queue, which flushes. If the queue pair was
// reset meanwhile (a user that saw the Error may reset and connect again
// at once), the reset has flushed the receive queue and what it holds now
// belongs to the next connection: it is left alone. The caller must hold
// no lock of this queue pair.
func (qp *QP) afterError(ep *Endpoint, cause error) {
	if ep != nil {
		ep.terminate(cause)
	}
	qp.rq.mu.Lock()
	if qp.ep.Load() == ep {
		qp.flushRecvLocked()
	}
	qp.rq.mu.Unlock()
	qp.kickSend()
}

// fail moves the queue pair to Error with cause, unless it is already
// there. The caller must hold no lock of this queue pair.
func (qp *QP) fail(cause error) {
	qp.epMu.Lock()
	ep := qp.ep.Load()
	entered := qp.enterError(cause)
	qp.epMu.Unlock()
	if entered {
		qp.afterError(ep, cause)
	}
}

// failFrom is fail for an error of connection ep: it does nothing once ep
// is no longer the queue pair's connection, so that an outcome of an
// ended connection, coming late, cannot fail the next one.
func (qp *QP) failFrom(ep *Endpoint, cause error) {
	qp.epMu.Lock()
	entered := qp.ep.Load() == ep && qp.enterError(cause)
	qp.epMu.Unlock()
	if entered {
		qp.afterError(ep, cause)
	}
}

// Disconnect ends the connection: the queue pair moves to the Error state,
// every outstanding work request (send and receive) completes with
// StatusFlushed, and the peer's queue pair does the same (it records
// ErrDisconnected). Work in flight is abandoned, not waited for: to finish
// sending, wait for the completions first. Disconnect does not block on the
// peer. It returns ErrQPState if the queue pair is not connected (or being
// connected), and ErrClosed after Close.
func (qp *QP) Disconnect() error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.closed.Load() {
		return ErrClosed
	}
	switch qp.State() {
	case StateReadyToReceive, StateReadyToSend:
	default:
		return fmt.Errorf("%w: disconnect in state %v", ErrQPState, qp.State())
	}
	qp.fail(ErrDisconnected)
	qp.drainSend()
	return nil
}

// Close destroys the queue pair. If it is connected it is disconnected
// first (see Disconnect); every outstanding work request completes with
// StatusFlushed before Close returns, each exactly once, so that their
// memory is no longer used. Afterwards posts return ErrClosed; a second
// Close returns ErrClosed. Close does not block on the peer; if a
// goroutine of the provider is ending the connection meanwhile (the peer
// ended it), Close returns once the link's Terminate has returned there. A
// Connect or Accept in progress in another goroutine fails (with ErrClosed)
// when its provider returns.
func (qp *QP) Close() error {
	qp.mu.Lock()
	if qp.closed.Load() {
		qp.mu.Unlock()
		return ErrClosed
	}
	qp.sq.mu.Lock()
	qp.rq.mu.Lock()
	qp.closed.Store(true)
	qp.rq.mu.Unlock()
	qp.sq.mu.Unlock()

	cause := fmt.Errorf("%w: queue pair destroyed", ErrDisconnected)
	qp.enterError(cause)
	qp.afterError(qp.ep.Load(), cause) // also when already in Error: the flushes are idempotent
	qp.drainSend()

	qp.cfg.SendCQ.detach()
	qp.cfg.RecvCQ.detach()
	qp.pd.release()
	qp.dev.mu.Lock()
	delete(qp.dev.qps, qp)
	qp.dev.mu.Unlock()
	ep := qp.ep.Load()
	qp.mu.Unlock()
	// The termination may be under way in another goroutine (the
	// provider's, on the peer's end): Close returns once the link's
	// Terminate has.
	if ep != nil {
		<-ep.termed
	}
	return nil
}

// drainSend runs the send queue until every work request in it has
// completed; the queue pair is in Error, so the run flushes. Another
// goroutine may be running the queue: drainSend then yields until it is
// done.
func (qp *QP) drainSend() {
	for {
		qp.kickSend()
		qp.sq.mu.Lock()
		empty := qp.sq.head == qp.sq.tail
		qp.sq.mu.Unlock()
		if empty {
			return
		}
		runtime.Gosched()
	}
}

// Modify moves the queue pair to state to. Allowed moves:
//
//	any state      -> Error: as Disconnect if connected; flushes all work
//	Init, Error    -> Reset: flushes RECVs posted in Init; requires the
//	                  connection to be gone; Err and Done start afresh
//	Reset          -> Init
//
// ReadyToReceive and ReadyToSend are entered only by Connect and Accept.
// Other moves return ErrQPState; after Close, ErrClosed. Moving to the
// current state is allowed and does nothing (Error to Error included).
func (qp *QP) Modify(to State) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.closed.Load() {
		return ErrClosed
	}
	from := qp.State()
	if from == to {
		return nil
	}
	switch {
	case to == StateError:
		qp.fail(fmt.Errorf("%w: moved to Error", ErrTerminated))
		qp.drainSend()
		return nil
	case to == StateReset && (from == StateInit || from == StateError):
		qp.rq.mu.Lock()
		qp.flushRecvLocked()
		qp.rq.mu.Unlock()
		qp.drainSend()
		if ep := qp.ep.Load(); ep != nil {
			ep.terminate(ErrDisconnected)
			qp.epMu.Lock()
			qp.ep.Store(nil)
			qp.epMu.Unlock()
		}
		// The move is made under sq.mu with the send queue empty: a send
		// posted in Error meanwhile (posts check the state under sq.mu)
		// is flushed first, not left queued where no run flushes it. The
		// cause goes with the move, under errMu, as it came with the move
		// in (enterError): Err is not nil, nor Done open, while State
		// reads Error.
		qp.sq.mu.Lock()
		for qp.sq.head != qp.sq.tail {
			qp.sq.mu.Unlock()
			qp.drainSend()
			qp.sq.mu.Lock()
		}
		defer qp.sq.mu.Unlock()
		qp.errMu.Lock()
		defer qp.errMu.Unlock()
		if !qp.st.CompareAndSwap(uint32(from), uint32(StateReset)) {
			return fmt.Errorf("%w: state changed during Modify", ErrQPState)
		}
		if from == StateError {
			qp.cause = nil
			qp.peer.Store(nil)
			qp.done = make(chan struct{})
		}
		return nil
	case to == StateInit && from == StateReset:
		qp.st.Store(uint32(StateInit))
		return nil
	}
	return fmt.Errorf("%w: Modify from %v to %v", ErrQPState, from, to)
}

// checkSGL validates a scatter/gather list against limit and returns its
// total length.
func checkSGL(sgl []SGE, limit int) (int, error) {
	if len(sgl) > limit {
		return 0, fmt.Errorf("%w: %d scatter/gather elements, limit %d", ErrInvalid, len(sgl), limit)
	}
	total := 0
	for _, s := range sgl {
		total += int(s.Len)
	}
	if total > MaxMessage {
		return 0, fmt.Errorf("%w: message of %d bytes exceeds %d", ErrInvalid, total, MaxMessage)
	}
	return total, nil
}
