package measure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// tcpTransport is the plain-TCP anchor: a Go TCP connection over loopback
// between two goroutines of this process, each on its own locked OS thread
// so that RUSAGE_THREAD gives each side's CPU time. Kernel work done for the
// connection (loopback delivery in softirq context) is charged to whichever
// thread the kernel ran it on, mostly the writer's.
type tcpTransport struct{}

func (*tcpTransport) Name() string { return "tcp" }
func (*tcpTransport) Describe() string {
	return "plain Go TCP over loopback, writer and reader goroutines on locked threads (CPU per side: RUSAGE_THREAD)"
}
func (*tcpTransport) Close() error { return nil }

func (*tcpTransport) Open(ctx context.Context, p Params) (Pair, error) {
	lc := net.ListenConfig{Control: congestionControl(p.CC)}
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("tcp anchor: %w", err)
	}
	defer ln.Close()
	d := net.Dialer{Control: congestionControl(p.CC)}
	type accepted struct {
		c   net.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		c, err := ln.Accept()
		ch <- accepted{c, err}
	}()
	w, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		ln.Close()
		<-ch
		return nil, fmt.Errorf("tcp anchor: %w", err)
	}
	acc := <-ch
	if acc.err != nil {
		w.Close()
		return nil, fmt.Errorf("tcp anchor: %w", acc.err)
	}
	tp := &tcpPair{p: p, w: w.(*net.TCPConn), r: acc.c.(*net.TCPConn)}
	tp.cc = connCongestion(tp.w)
	return tp, nil
}

// tcpPair is a connected loopback pair: w writes, r reads (Stream); r echoes
// (PingPong).
type tcpPair struct {
	p    Params
	w, r *net.TCPConn
	cc   string
}

func (tp *tcpPair) Close() error {
	return errors.Join(tp.w.Close(), tp.r.Close())
}

// mark is what one side records at an edge of the measured interval.
type mark struct {
	at     time.Time
	bytes  int64
	msgs   int64
	thread time.Duration
	proc   time.Duration
}

func takeMark(bytes, msgs int64) mark {
	return mark{at: time.Now(), bytes: bytes, msgs: msgs, thread: threadCPU(), proc: processCPU()}
}

func cpuDelta(a, b time.Duration) time.Duration {
	if a < 0 || b < 0 {
		return -1
	}
	return b - a
}

func (tp *tcpPair) Stream(ctx context.Context, warmup, d time.Duration) (Result, error) {
	var phase atomic.Int32 // 0 warm-up, 1 measuring, 2 done: set by the reader
	var wg sync.WaitGroup
	var wm [2]mark
	var werr error
	wg.Add(1)
	go func() { // the writer
		defer wg.Done()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		bufs := makeBufs(tp.p.Buffers(tp.p.Sends), tp.p.Size)
		seen := int32(0)
		for i := 0; ; i++ {
			if ph := phase.Load(); ph != seen {
				for ; seen < ph; seen++ {
					wm[seen] = takeMark(0, 0) // the writer's CPU time
				}
				if seen == 2 {
					return
				}
			}
			b := bufs[i%len(bufs)]
			if tp.p.Verify {
				fillPattern(b, uint64(i)*uint64(len(b)), byte(tp.p.Seed))
			}
			if _, err := tp.w.Write(b); err != nil {
				if ph := phase.Load(); ph == 2 {
					for ; seen < ph; seen++ {
						wm[seen] = takeMark(0, 0) // the writer's CPU time
					}
					return
				}
				werr = err
				return
			}
		}
	}()
	// The reader runs here.
	runtime.LockOSThread()
	buf := make([]byte, tp.p.Size)
	var rm [2]mark
	var bytes int64
	start := time.Now()
	win := newWindow(warmup, tp.p.MaxWarmup, d)
	var rerr error
	for n := 0; ; n++ {
		k, err := tp.r.Read(buf)
		if tp.p.Verify && k > 0 {
			if off := checkPattern(buf[:k], uint64(bytes), byte(tp.p.Seed)); off >= 0 {
				rerr = fmt.Errorf("tcp anchor: wrong byte at stream offset %d", bytes+int64(off))
				break
			}
		}
		bytes += int64(k)
		if err != nil {
			rerr = fmt.Errorf("tcp anchor: %w", err)
			break
		}
		if e := win.check(time.Since(start), bytes); e != edgeNone {
			rm[e-1] = takeMark(bytes, 0)
			phase.Store(int32(e))
			if e == edgeEnd {
				break
			}
		}
		if n%256 == 0 && ctx.Err() != nil {
			rerr = ctx.Err()
			break
		}
	}
	runtime.UnlockOSThread()
	phase.Store(2)
	// Unblock a writer stuck in Write on a full socket buffer.
	tp.w.SetWriteDeadline(time.Now())
	wg.Wait()
	if rerr != nil {
		return Result{}, rerr
	}
	if werr != nil {
		return Result{}, fmt.Errorf("tcp anchor: %w", werr)
	}
	return Result{
		// The messages received in the reader's interval, as exs counts
		// them: the writer notices the interval's edges late when a full
		// socket blocks it, and a writer that got no CPU in a short
		// interval would count none while the reader took bytes.
		Bytes: rm[1].bytes - rm[0].bytes, Msgs: (rm[1].bytes - rm[0].bytes) / int64(tp.p.Size), Elapsed: rm[1].at.Sub(rm[0].at),
		CPUSend: cpuDelta(wm[0].thread, wm[1].thread), CPURecv: cpuDelta(rm[0].thread, rm[1].thread),
		CPUTotal: cpuDelta(rm[0].proc, rm[1].proc),
		Note:     "congestion control " + tp.cc,
		Warmup:   win.start, Unsteady: win.unsteady,
	}, nil
}

func (tp *tcpPair) PingPong(ctx context.Context, warmup, d time.Duration, w WaitMode) ([]time.Duration, error) {
	if w != WaitBlock && w != WaitBusy {
		return nil, fmt.Errorf("tcp anchor: wait mode %v does not apply", w)
	}
	var stop atomic.Bool
	echoErr := make(chan error, 1)
	go func() { echoErr <- echo(tp.r, tp.p.Size, w, stop.Load) }()
	rts, err := pingClient(ctx, tp.w, tp.p.Size, w, warmup, d)
	stop.Store(true)
	tp.w.CloseWrite()
	if eerr := <-echoErr; err == nil && eerr != nil {
		err = eerr
	}
	if err != nil {
		return nil, fmt.Errorf("tcp anchor: %w", err)
	}
	return rts, nil
}

// pingClient sends size-byte messages on c and waits for each to come back,
// for warmup and then d, on a locked thread, and returns the round trips
// timed during d.
func pingClient(ctx context.Context, c *net.TCPConn, size int, w WaitMode, warmup, d time.Duration) ([]time.Duration, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	buf := make([]byte, size)
	var rts []time.Duration
	var err error
	if w == WaitBusy {
		err = spinIO(c, func() bool { return ctx.Err() != nil }, func(read, write func([]byte) (int, error)) error {
			var err error
			rts, err = pingLoop(ctx, warmup, d, func() error {
				if err := writeAll(write, buf); err != nil {
					return err
				}
				return readFull(read, buf)
			})
			return err
		})
	} else {
		rts, err = pingLoop(ctx, warmup, d, func() error {
			if _, err := c.Write(buf); err != nil {
				return err
			}
			_, err := io.ReadFull(c, buf)
			return err
		})
	}
	return rts, err
}

// echo sends back every size-byte message it reads from c until the peer
// closes its side.
func echo(c *net.TCPConn, size int, w WaitMode, stop func() bool) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	buf := make([]byte, size)
	if w == WaitBusy {
		err := spinIO(c, stop, func(read, write func([]byte) (int, error)) error {
			for {
				if err := readFull(read, buf); err != nil {
					return err
				}
				if err := writeAll(write, buf); err != nil {
					return err
				}
			}
		})
		if errors.Is(err, io.EOF) || errors.Is(err, errStopped) {
			return nil
		}
		return err
	}
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if _, err := c.Write(buf); err != nil {
			return err
		}
	}
}

func readFull(read func([]byte) (int, error), b []byte) error {
	for len(b) > 0 {
		n, err := read(b)
		if err != nil {
			return err
		}
		if n == 0 {
			return io.EOF
		}
		b = b[n:]
	}
	return nil
}

func writeAll(write func([]byte) (int, error), b []byte) error {
	for len(b) > 0 {
		n, err := write(b)
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// ProbeCongestion reports whether the congestion control cc can be set on
// a socket here.
func ProbeCongestion(cc string) error {
	lc := net.ListenConfig{Control: congestionControl(cc)}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	return ln.Close()
}
