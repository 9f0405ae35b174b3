package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
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
func (exsTransport) HasModes() bool { return true }
func (exsTransport) Close() error   { return nil }

func exsMode(m dynproto.Mode) exs.Mode {
	switch m {
	case dynproto.DirectOnly:
		return exs.ModeDirectOnly
	case dynproto.IndirectOnly:
		return exs.ModeIndirectOnly
	}
	return exs.ModeDynamic
}

func exsWait(w waitMode) exs.WaitMode {
	switch w {
	case waitBusy:
		return exs.WaitBusyPoll
	case waitBlock:
		return exs.WaitNotify
	}
	return exs.WaitAdaptive
}

// exsPair is a connected pair of sockets: cs (connected) sends, rs
// (accepted) receives. Each has its queue and one registered region.
type exsPair struct {
	p      pairParams
	wait   waitMode
	st     *exs.Stack
	cs, rs *exs.Socket
	cq, rq *exs.Queue
	closed bool

	streamResult result
}

func (exsTransport) Open(ctx context.Context, p pairParams) (pair, error) {
	if p.Link != nil {
		return nil, errors.New("exs: the exs transport has no emulated link yet")
	}
	w := p.Wait
	if w == 0 {
		w = waitAdaptive
	}
	frames := min(exs.MaxFrames, max(exs.DefaultFrames, 4*max(p.Sends, p.Recvs)))
	st, err := exs.NewStack(exs.WithMode(exsMode(p.Mode)), exs.WithStreamBuffer(p.Ring),
		exs.WithOutstanding(max(p.Sends, 1), max(p.Recvs, 1)), exs.WithFrames(frames), exs.WithWaitMode(exsWait(w)))
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
	depth := xp.p.Sends + xp.p.Recvs + 8
	var err error
	if xp.cq, err = st.Qcreate(depth); err != nil {
		return err
	}
	if xp.rq, err = st.Qcreate(depth); err != nil {
		return err
	}
	ls, err := st.Socket(exs.SockStream)
	if err != nil {
		return err
	}
	if err := ls.Bind(addr); err != nil {
		return err
	}
	if err := ls.Listen(); err != nil {
		return err
	}
	if err := ls.Accept(xp.rq, nil); err != nil {
		return err
	}
	if xp.cs, err = st.Socket(exs.SockStream); err != nil {
		return err
	}
	if err := xp.cs.Connect(xp.cq, addr, nil); err != nil {
		return err
	}
	ev, err := dequeueOne(ctx, xp.rq)
	if err != nil {
		return fmt.Errorf("exs: accept: %w", err)
	}
	if ev.Err != nil {
		return ev.Err
	}
	xp.rs = ev.Accepted
	if ev, err = dequeueOne(ctx, xp.cq); err != nil {
		return fmt.Errorf("exs: connect: %w", err)
	}
	if ev.Err != nil {
		return ev.Err
	}
	// The listening socket is done; its close event goes to rq.
	if err := ls.Close(xp.rq, nil); err != nil {
		return err
	}
	if _, err := dequeueOne(ctx, xp.rq); err != nil {
		return fmt.Errorf("exs: closing the listener: %w", err)
	}
	return nil
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
	return xp.st.Close()
}

// region registers n buffers of size bytes in one handle.
func (xp *exsPair) region(n, size int, access exs.Access) ([][]byte, *exs.MHandle, error) {
	mem := makeBufs(1, n*size)[0]
	mh, err := xp.st.Mregister(mem, access)
	if err != nil {
		return nil, nil, err
	}
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = mem[i*size : (i+1)*size : (i+1)*size]
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

func (xp *exsPair) Stream(ctx context.Context, warmup, d time.Duration) (result, error) {
	p := xp.p
	sbufs, smh, err := xp.region(p.Sends, p.Size, exs.AccessRead)
	if err != nil {
		return result{}, err
	}
	rbufs, rmh, err := xp.region(p.Recvs, p.Size, exs.AccessWrite)
	if err != nil {
		return result{}, err
	}
	var stop atomic.Bool
	var sent atomic.Int64
	var wg sync.WaitGroup
	var serr error
	wg.Add(1)
	go func() { // the sender
		defer wg.Done()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		serr = xp.sender(sbufs, smh, &stop, &sent)
	}()
	rerr := func() error { // the receiver
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var m [2]sockMark
		var off uint64
		for i := range rbufs {
			if err := xp.rs.Recv(xp.rq, rbufs[i], rmh, 0, nil); err != nil {
				return err
			}
		}
		events := make([]exs.Event, len(rbufs))
		var bytes int64
		next := 0
		start := time.Now()
		win := window{warmup: warmup, d: d}
		for win.phase < 2 {
			n, err := xp.rq.Dequeue(events, 1, 100*time.Millisecond)
			if err != nil && !errors.Is(err, exs.ErrTimeout) {
				return err
			}
			for _, ev := range events[:n] {
				if ev.Err != nil {
					return fmt.Errorf("exs: recv: %w", ev.Err)
				}
				if ev.N == 0 {
					return errors.New("exs: recv: unexpected end of stream")
				}
				buf := rbufs[next]
				if p.Verify {
					if i := checkPattern(buf[:ev.N], off, byte(p.Seed)); i >= 0 {
						return fmt.Errorf("exs: recv: wrong byte at stream offset %d", off+uint64(i))
					}
					off += uint64(ev.N)
				}
				bytes += int64(ev.N)
				if err := xp.rs.Recv(xp.rq, buf, rmh, 0, nil); err != nil {
					return err
				}
				next = (next + 1) % len(rbufs)
			}
			if e := win.check(time.Since(start)); e != edgeNone {
				m[e-1] = sockMark{time.Now(), bytes, sent.Load(), processCPU(), xp.cs.Stats()}
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		xp.streamResult = xp.result(m)
		return nil
	}()
	stop.Store(true)
	// Closing the stack cancels what is outstanding and wakes the sender.
	xp.Close()
	wg.Wait()
	if rerr != nil {
		return result{}, rerr
	}
	if serr != nil {
		return result{}, serr
	}
	return xp.streamResult, nil
}

func (xp *exsPair) result(m [2]sockMark) result {
	s0, s1 := m[0].stats, m[1].stats
	return result{
		Bytes: m[1].bytes - m[0].bytes, Msgs: m[1].msgs - m[0].msgs, Elapsed: m[1].at.Sub(m[0].at),
		HasDirect:     true,
		BytesDirect:   s1.BytesDirect - s0.BytesDirect,
		BytesIndirect: s1.BytesIndirect - s0.BytesIndirect,
		XfersDirect:   s1.TransfersDirect - s0.TransfersDirect,
		XfersIndirect: s1.TransfersIndirect - s0.TransfersIndirect,
		CPUSend:       -1, CPURecv: -1, CPUTotal: cpuDelta(m[0].cpu, m[1].cpu),
		Note: "wait " + xp.wait.String(),
	}
}

// sender keeps every send buffer posted until stop; sends complete in order,
// so the i-th completion frees buffer i mod len(bufs).
func (xp *exsPair) sender(bufs [][]byte, mh *exs.MHandle, stop *atomic.Bool, sent *atomic.Int64) error {
	p := xp.p
	var off uint64
	post := func(b []byte) error {
		if p.Verify {
			fillPattern(b, off, byte(p.Seed))
			off += uint64(len(b))
		}
		return xp.cs.Send(xp.cq, b, mh, 0, nil)
	}
	for _, b := range bufs {
		if err := post(b); err != nil {
			return err
		}
	}
	events := make([]exs.Event, len(bufs))
	next := 0
	for {
		n, err := xp.cq.Dequeue(events, 1, 100*time.Millisecond)
		if stop.Load() {
			return nil
		}
		if err != nil && !errors.Is(err, exs.ErrTimeout) {
			return err
		}
		for _, ev := range events[:n] {
			if ev.Err != nil {
				if stop.Load() {
					return nil
				}
				return fmt.Errorf("exs: send: %w", ev.Err)
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

// PingPong: the connected side sends Size bytes, the accepted side receives
// them whole (MsgWaitAll) and sends Size bytes back. The wait mode is the
// one the pair was opened with.
func (xp *exsPair) PingPong(ctx context.Context, warmup, d time.Duration, w waitMode) ([]time.Duration, error) {
	if w != xp.wait {
		return nil, fmt.Errorf("exs: pair opened for wait mode %v, not %v", xp.wait, w)
	}
	size := xp.p.Size
	cb, cmh, err := xp.region(2, size, exs.AccessRead|exs.AccessWrite)
	if err != nil {
		return nil, err
	}
	rb, rmh, err := xp.region(2, size, exs.AccessRead|exs.AccessWrite)
	if err != nil {
		return nil, err
	}
	var stop atomic.Bool
	echoErr := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		echoErr <- xp.echo(rb, rmh, &stop)
	}()
	rts, err := func() ([]time.Duration, error) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := xp.cs.Recv(xp.cq, cb[0], cmh, exs.MsgWaitAll, nil); err != nil {
			return nil, err
		}
		events := make([]exs.Event, 2)
		return pingLoop(ctx, warmup, d, func() error {
			if err := xp.cs.Send(xp.cq, cb[1], cmh, 0, nil); err != nil {
				return err
			}
			for got := 0; got < 2; {
				n, err := xp.cq.DequeueContext(ctx, events, 1)
				if err != nil {
					return err
				}
				for _, ev := range events[:n] {
					if ev.Err != nil {
						return fmt.Errorf("exs: %v: %w", ev.Type, ev.Err)
					}
					if ev.Type == exs.EventRecv {
						if ev.N != size {
							return fmt.Errorf("exs: recv of %d bytes with MsgWaitAll completed with %d", size, ev.N)
						}
						if err := xp.cs.Recv(xp.cq, cb[0], cmh, exs.MsgWaitAll, nil); err != nil {
							return err
						}
					}
					got++
				}
			}
			return nil
		})
	}()
	stop.Store(true)
	xp.Close()
	if eerr := <-echoErr; err == nil && eerr != nil {
		err = eerr
	}
	return rts, err
}

// echo answers every message received on rs with a message of the same
// size, until stop.
func (xp *exsPair) echo(bufs [][]byte, mh *exs.MHandle, stop *atomic.Bool) error {
	size := xp.p.Size
	if err := xp.rs.Recv(xp.rq, bufs[0], mh, exs.MsgWaitAll, nil); err != nil {
		return err
	}
	events := make([]exs.Event, 2)
	for {
		n, err := xp.rq.Dequeue(events, 1, 100*time.Millisecond)
		if stop.Load() {
			return nil
		}
		if err != nil && !errors.Is(err, exs.ErrTimeout) {
			return err
		}
		for _, ev := range events[:n] {
			if ev.Err != nil {
				if stop.Load() {
					return nil
				}
				return fmt.Errorf("exs: echo %v: %w", ev.Type, ev.Err)
			}
			if ev.Type != exs.EventRecv {
				continue
			}
			if ev.N != size {
				return fmt.Errorf("exs: echo: recv of %d bytes with MsgWaitAll completed with %d", size, ev.N)
			}
			if err := xp.rs.Recv(xp.rq, bufs[0], mh, exs.MsgWaitAll, nil); err != nil {
				return err
			}
			if err := xp.rs.Send(xp.rq, bufs[1], mh, 0, nil); err != nil {
				return err
			}
		}
	}
}
