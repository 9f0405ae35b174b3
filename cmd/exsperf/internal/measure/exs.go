package measure

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exsgo/exs/dynproto"
	"github.com/exsgo/exs/exs"
)

// exsTransport measures the socket API: exs sockets over the in-process
// verbs provider, one stack per pair. Each side posts its operations from
// its own goroutine (on a locked thread) and dequeues its own event queue,
// as an application would; the connections' progress goroutines are the
// library's, so CPU time is known for the whole process only.
type exsTransport struct{}

// exsPairs numbers the pairs, for unique in-process addresses.
var exsPairs atomic.Int64

func (exsTransport) Name() string { return "exs" }
func (exsTransport) Describe() string {
	return "exs sockets over the in-process verbs provider; each side posts and dequeues on its own goroutine (CPU: whole process only)"
}
func (exsTransport) Close() error { return nil }

func exsMode(m dynproto.Mode) exs.Mode {
	switch m {
	case dynproto.DirectOnly:
		return exs.ModeDirectOnly
	case dynproto.IndirectOnly:
		return exs.ModeIndirectOnly
	}
	return exs.ModeDynamic
}

func exsWait(w WaitMode) exs.WaitMode {
	switch w {
	case WaitBusy:
		return exs.WaitBusyPoll
	case WaitBlock:
		return exs.WaitNotify
	}
	return exs.WaitAdaptive
}

// exsSocketOptions are the socket options of a measurement connection.
func exsSocketOptions(p Params, w WaitMode) []exs.StackOption {
	frames := min(exs.MaxFrames, max(exs.DefaultFrames, 4*max(p.Sends, p.Recvs)))
	return []exs.StackOption{exs.WithMode(exsMode(p.Mode)), exs.WithStreamBuffer(max(1, p.Ring)),
		exs.WithOutstanding(max(p.Sends, 1), max(p.Recvs, 1)), exs.WithFrames(frames), exs.WithWaitMode(exsWait(w))}
}

// exsEnd is one end of a measurement connection: its stack, socket and
// queue. The stream and ping-pong loops below are written for one end, so
// that a pair in one process and the two processes of server and client
// run the same code.
type exsEnd struct {
	p  Params
	st *exs.Stack
	s  *exs.Socket
	q  *exs.Queue
}

// exsPair is a connected pair of sockets of one stack: cs (connected)
// sends, rs (accepted) receives. Each has its queue.
type exsPair struct {
	p      Params
	wait   WaitMode
	st     *exs.Stack
	cs, rs exsEnd
	closed bool
}

func (exsTransport) Open(ctx context.Context, p Params) (Pair, error) {
	if p.Link != nil {
		return nil, errors.New("the exs transport has no emulated link yet")
	}
	w := p.Wait
	if w == 0 {
		w = WaitAdaptive
	}
	st, err := exs.NewStack(exsSocketOptions(p, w)...)
	if err != nil {
		return nil, err
	}
	xp := &exsPair{p: p, wait: w, st: st}
	if err := xp.connect(ctx); err != nil {
		st.Close()
		return nil, err
	}
	return xp, nil
}

func (xp *exsPair) connect(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st := xp.st
	addr := fmt.Sprintf("inproc:exsperf-%d-%d", os.Getpid(), exsPairs.Add(1))
	ls, err := exsListen(st, addr)
	if err != nil {
		return err
	}
	rq, err := exsQueue(st, xp.p)
	if err != nil {
		return err
	}
	if err := ls.Accept(rq, nil); err != nil {
		return err
	}
	cs, err := exsDial(ctx, st, addr, xp.p)
	if err != nil {
		return err
	}
	xp.cs = cs
	ev, err := dequeueOne(ctx, rq)
	if err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	if ev.Err != nil {
		return ev.Err
	}
	xp.rs = exsEnd{p: xp.p, st: st, s: ev.Accepted, q: rq}
	// The listening socket is done; its close event goes to rq.
	return exsCloseListener(ctx, ls, rq)
}

// exsQueue creates a queue deep enough for the operations of p.
func exsQueue(st *exs.Stack, p Params) (*exs.Queue, error) {
	return st.Qcreate(p.Sends + p.Recvs + 8)
}

// exsListen makes a listening stream socket on addr, with the stack's
// options.
func exsListen(st *exs.Stack, addr string) (*exs.Socket, error) {
	ls, err := st.Socket(exs.SockStream)
	if err != nil {
		return nil, err
	}
	if err := ls.Bind(addr); err != nil {
		return nil, err
	}
	if err := ls.Listen(0); err != nil {
		return nil, err
	}
	return ls, nil
}

// exsCloseListener closes a listening socket and takes its close event
// from q.
func exsCloseListener(ctx context.Context, ls *exs.Socket, q *exs.Queue) error {
	if err := ls.Close(q, nil); err != nil {
		return err
	}
	for {
		ev, err := dequeueOne(ctx, q)
		if err != nil {
			return fmt.Errorf("closing the listener: %w", err)
		}
		if ev.Type == exs.EventClose {
			return nil
		}
	}
}

// exsDial connects a stream socket of st, with the stack's options, to
// addr.
func exsDial(ctx context.Context, st *exs.Stack, addr string, p Params) (exsEnd, error) {
	q, err := exsQueue(st, p)
	if err != nil {
		return exsEnd{}, err
	}
	s, err := st.Socket(exs.SockStream)
	if err != nil {
		return exsEnd{}, err
	}
	if err := s.Connect(q, addr, nil); err != nil {
		return exsEnd{}, err
	}
	ev, err := dequeueOne(ctx, q)
	if err != nil {
		return exsEnd{}, fmt.Errorf("connect: %w", err)
	}
	if ev.Err != nil {
		return exsEnd{}, ev.Err
	}
	return exsEnd{p: p, st: st, s: s, q: q}, nil
}

func dequeueOne(ctx context.Context, q *exs.Queue) (exs.Event, error) {
	var ev [1]exs.Event
	_, err := q.DequeueContext(ctx, ev[:], 1)
	return ev[0], err
}

// Close closes the stack, canceling whatever is outstanding.
func (xp *exsPair) Close() error {
	if xp.closed {
		return nil
	}
	xp.closed = true
	return closeStack(xp.st)
}

// stackMem is the memory each stack's ends took with Stack.Alloc, freed
// by closeStack once the stack (and so every handle on it) is closed.
var stackMem = struct {
	sync.Mutex
	m map[*exs.Stack][][]byte
}{m: make(map[*exs.Stack][][]byte)}

// closeStack closes st, if it is not closed yet, and frees the memory its
// ends allocated: call it once no goroutine uses that memory any more.
func closeStack(st *exs.Stack) error {
	err := st.Close()
	if errors.Is(err, exs.ErrClosed) {
		err = nil
	}
	stackMem.Lock()
	bufs := stackMem.m[st]
	delete(stackMem.m, st)
	stackMem.Unlock()
	for _, b := range bufs {
		err = errors.Join(err, st.Free(b))
	}
	return err
}

// region registers n buffers of size bytes in one handle, of which
// distinct (1 or n) are distinct memory, the others repeating them. The memory comes
// from Stack.Alloc: over the same-host provider it is the provider's
// shared memory, which the peer maps, so that its RDMA WRITEs into these
// buffers are a plain copy. closeStack frees it.
func (e *exsEnd) region(n, distinct, size int, access exs.Access) ([][]byte, *exs.MHandle, error) {
	mem, err := e.st.Alloc(distinct * size)
	if err != nil {
		return nil, nil, err
	}
	stackMem.Lock()
	stackMem.m[e.st] = append(stackMem.m[e.st], mem)
	stackMem.Unlock()
	fillPattern(mem, 0, 0) // the pages are in memory before the measurement
	mh, err := e.st.Mregister(mem, access)
	if err != nil {
		return nil, nil, err
	}
	bufs := make([][]byte, n)
	for i := range bufs {
		j := i % distinct
		bufs[i] = mem[j*size : (j+1)*size : (j+1)*size]
	}
	return bufs, mh, nil
}

// sockMark is what the receiver records at an edge of the measured interval.
type sockMark struct {
	at    time.Time
	bytes int64
	msgs  int64
	cpu   time.Duration
	stats exs.Stats
}

func (xp *exsPair) Stream(ctx context.Context, warmup, d time.Duration) (Result, error) {
	snd := xp.cs.goSend()
	var m [2]sockMark
	win := newWindow(warmup, xp.p.MaxWarmup, d)
	rerr := xp.rs.receiver(ctx, &win, func(edge int, bytes int64) bool {
		m[edge-1] = sockMark{time.Now(), bytes, snd.sent.Load(), processCPU(), xp.cs.s.Stats()}
		return edge != edgeEnd
	})
	// Closing the stack cancels what is outstanding and wakes the sender;
	// Close frees the memory once it has stopped.
	serr := snd.end(xp.st)
	xp.Close()
	if rerr != nil {
		return Result{}, rerr
	}
	if serr != nil {
		return Result{}, serr
	}
	r := exsResult(m, xp.wait)
	r.Warmup, r.Unsteady = win.start, win.unsteady
	return r, nil
}

// exsResult is the result of a stream between two marks taken in one
// process: its CPU time is the whole process's.
func exsResult(m [2]sockMark, w WaitMode) Result {
	r := exsDirect(m[0].stats, m[1].stats)
	r.Bytes, r.Msgs, r.Elapsed = m[1].bytes-m[0].bytes, m[1].msgs-m[0].msgs, m[1].at.Sub(m[0].at)
	r.CPUSend, r.CPURecv, r.CPUTotal = -1, -1, cpuDelta(m[0].cpu, m[1].cpu)
	r.Note = "wait " + w.String()
	return r
}

// exsDirect is a result with the direct and indirect counts of the sender
// between two of its statistics.
func exsDirect(s0, s1 exs.Stats) Result {
	return Result{
		HasDirect:     true,
		BytesDirect:   s1.BytesDirect - s0.BytesDirect,
		BytesIndirect: s1.BytesIndirect - s0.BytesIndirect,
		XfersDirect:   s1.TransfersDirect - s0.TransfersDirect,
		XfersIndirect: s1.TransfersIndirect - s0.TransfersIndirect,
	}
}

// The exs ends run on ordinary goroutines, not on threads held with
// runtime.LockOSThread: while they wait they spin and yield (the adaptive
// wait mode), and a goroutine that holds its thread costs two thread
// hand-offs through the kernel each time it yields. Their CPU time is the
// process's (getrusage RUSAGE_SELF), which needs no held thread.

// receiver keeps Recvs recvs of Size bytes posted and times the measured
// interval with win: at each edge it calls mark with the bytes received so far,
// which says whether to go on receiving. After the interval it goes on until mark says stop, or
// until the stream ends or breaks (then it returns nil).
func (e *exsEnd) receiver(ctx context.Context, win *window, mark func(edge int, bytes int64) bool) error {
	p := e.p
	rbufs, rmh, err := e.region(p.Recvs, p.Buffers(p.Recvs), p.Size, exs.AccessWrite)
	if err != nil {
		return err
	}
	var off uint64
	for i := range rbufs {
		if err := e.s.Recv(e.q, rbufs[i], rmh, 0, nil); err != nil {
			return err
		}
	}
	events := make([]exs.Event, len(rbufs))
	var bytes int64
	next := 0
	// The clock starts at the first completion, not at the first post: the
	// sender may not be running yet (a slow or loaded machine).
	var start time.Time
	for {
		n, err := e.q.Dequeue(events, 1, 100*time.Millisecond)
		if err != nil && !errors.Is(err, exs.ErrTimeout) {
			return err
		}
		for _, ev := range events[:n] {
			if ev.Err != nil || ev.N == 0 {
				if win.phase == 2 {
					return nil // the sender went after the interval
				}
				if ev.Err != nil {
					return fmt.Errorf("recv: %w", ev.Err)
				}
				return errors.New("recv: unexpected end of stream")
			}
			buf := rbufs[next]
			if p.Verify {
				if i := checkPattern(buf[:ev.N], off, byte(p.Seed)); i >= 0 {
					return fmt.Errorf("recv: wrong byte at stream offset %d", off+uint64(i))
				}
				off += uint64(ev.N)
			}
			bytes += int64(ev.N)
			if err := e.s.Recv(e.q, buf, rmh, 0, nil); err != nil {
				return err
			}
			next = (next + 1) % len(rbufs)
		}
		if n > 0 && start.IsZero() {
			start = time.Now()
		}
		if win.phase < 2 && !start.IsZero() {
			if edge := win.check(time.Since(start), bytes); edge != edgeNone {
				if !mark(edge, bytes) {
					return nil
				}
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// asyncSender is a sender (exsEnd.sender) on a goroutine of its own.
type asyncSender struct {
	stop atomic.Bool
	sent atomic.Int64 // the sends completed
	wg   sync.WaitGroup
	err  error
}

// goSend starts e's sender; owner: the caller, which ends it with end.
func (e *exsEnd) goSend() *asyncSender {
	s := &asyncSender{}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.err = e.sender(&s.stop, &s.sent)
	}()
	return s
}

// end stops the sender, closing the stack st to cancel what is outstanding
// and wake it, waits for it and returns its error.
func (s *asyncSender) end(st *exs.Stack) error {
	s.stop.Store(true)
	st.Close()
	s.wg.Wait()
	return s.err
}

// sender keeps Sends sends of Size bytes posted until stop; sends complete
// in order, so the i-th completion frees buffer i mod Sends. Errors after
// stop are the end of the measurement, not failures.
func (e *exsEnd) sender(stop *atomic.Bool, sent *atomic.Int64) error {
	p := e.p
	bufs, mh, err := e.region(p.Sends, p.Buffers(p.Sends), p.Size, exs.AccessRead)
	if err != nil {
		if stop.Load() {
			return nil // the receiver ended before the sender started
		}
		return err
	}
	var off uint64
	post := func(b []byte) error {
		if p.Verify {
			fillPattern(b, off, byte(p.Seed))
			off += uint64(len(b))
		}
		return e.s.Send(e.q, b, mh, 0, nil)
	}
	for _, b := range bufs {
		if err := post(b); err != nil {
			if stop.Load() {
				return nil
			}
			return err
		}
	}
	events := make([]exs.Event, len(bufs))
	next := 0
	for {
		evs, done, err := e.dequeue(stop, events)
		if done {
			return err
		}
		for _, ev := range evs {
			if ev.Err != nil {
				if stop.Load() {
					return nil
				}
				return fmt.Errorf("send: %w", ev.Err)
			}
			sent.Add(1)
			if err := post(bufs[next]); err != nil {
				if stop.Load() {
					return nil
				}
				return err
			}
			next = (next + 1) % len(bufs)
		}
	}
}

// dequeue waits up to 100 ms for events of the sender's or the echoing
// side's queue. done reports the end of the loop: stop was set (err nil),
// or the queue failed.
func (e *exsEnd) dequeue(stop *atomic.Bool, events []exs.Event) (evs []exs.Event, done bool, err error) {
	n, err := e.q.Dequeue(events, 1, 100*time.Millisecond)
	if stop.Load() {
		return nil, true, nil
	}
	if err != nil && !errors.Is(err, exs.ErrTimeout) {
		return nil, true, err
	}
	return events[:n], false, nil
}

// PingPong: the connected side sends Size bytes, the accepted side receives
// them whole (MsgWaitAll) and sends Size bytes back. The wait mode is the
// one the pair was opened with.
func (xp *exsPair) PingPong(ctx context.Context, warmup, d time.Duration, w WaitMode) ([]time.Duration, error) {
	if w != xp.wait {
		return nil, fmt.Errorf("pair opened for wait mode %v, not %v", xp.wait, w)
	}
	var stop atomic.Bool
	echoErr := make(chan error, 1)
	go func() { // the echoing side; owner: this function, which stops it below
		echoErr <- xp.rs.echo(&stop, false)
	}()
	rts, err := xp.cs.ping(ctx, warmup, d)
	stop.Store(true)
	xp.st.Close()
	if eerr := <-echoErr; err == nil && eerr != nil {
		err = eerr
	}
	xp.Close()
	return rts, err
}

// ping sends Size bytes and waits for Size bytes back, for warmup and then
// for d, and returns the round trips of the measured interval.
func (e *exsEnd) ping(ctx context.Context, warmup, d time.Duration) ([]time.Duration, error) {
	size := e.p.Size
	cb, cmh, err := e.region(2, 2, size, exs.AccessRead|exs.AccessWrite)
	if err != nil {
		return nil, err
	}
	if err := e.s.Recv(e.q, cb[0], cmh, exs.MsgWaitAll, nil); err != nil {
		return nil, err
	}
	events := make([]exs.Event, 2)
	return pingLoop(ctx, warmup, d, func() error {
		if err := e.s.Send(e.q, cb[1], cmh, 0, nil); err != nil {
			return err
		}
		for got := 0; got < 2; {
			n, err := e.q.DequeueContext(ctx, events, 1)
			if err != nil {
				return err
			}
			for _, ev := range events[:n] {
				if ev.Err != nil {
					return fmt.Errorf("%v: %w", ev.Type, ev.Err)
				}
				if ev.Type == exs.EventRecv {
					if ev.N != size {
						return fmt.Errorf("recv of %d bytes with MsgWaitAll completed with %d", size, ev.N)
					}
					if err := e.s.Recv(e.q, cb[0], cmh, exs.MsgWaitAll, nil); err != nil {
						return err
					}
				}
				got++
			}
		}
		return nil
	})
}

// echo answers every message received with a message of the same size,
// until stop, or until the connection ends or breaks after stop was set
// or, with endOK, at any time (then it returns nil).
func (e *exsEnd) echo(stop *atomic.Bool, endOK bool) error {
	stopped := func() bool { return endOK || stop.Load() }
	size := e.p.Size
	bufs, mh, err := e.region(2, 2, size, exs.AccessRead|exs.AccessWrite)
	if err == nil {
		err = e.s.Recv(e.q, bufs[0], mh, exs.MsgWaitAll, nil)
	}
	if err != nil {
		if stop.Load() {
			return nil // the stack closed before this side started
		}
		return err
	}
	events := make([]exs.Event, 2)
	// One send at a time from bufs[1]: an answer owed while the previous
	// one is outstanding goes when that completes.
	sending, owed := false, 0
	send := func() error {
		if sending || owed == 0 {
			return nil
		}
		owed--
		sending = true
		return e.s.Send(e.q, bufs[1], mh, 0, nil)
	}
	for {
		evs, done, err := e.dequeue(stop, events)
		if done {
			return err
		}
		for _, ev := range evs {
			if ev.Err != nil || ev.Type == exs.EventRecv && ev.N == 0 {
				if stopped() {
					return nil
				}
				return fmt.Errorf("echo %v: %w", ev.Type, ev.Err)
			}
			switch ev.Type {
			case exs.EventSend:
				sending = false
			case exs.EventRecv:
				if ev.N != size {
					return fmt.Errorf("echo: recv of %d bytes with MsgWaitAll completed with %d", size, ev.N)
				}
				if err := e.s.Recv(e.q, bufs[0], mh, exs.MsgWaitAll, nil); err != nil {
					return err
				}
				owed++
			}
			if err := send(); err != nil {
				return err
			}
		}
	}
}
