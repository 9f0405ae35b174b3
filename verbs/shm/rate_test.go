//go:build linux

package shm_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/exsgo/exs/internal/childproc"
	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// receiverEnv makes the test binary a receiving process for
// BenchmarkSendRateProcess: it listens at the variable's value.
const receiverEnv = "EXS_SHM_BENCH_RECEIVER"

const (
	rateMsg   = 64
	rateBatch = 32
	rateRecvs = 256
)

// receiverMain accepts one connection at addr, keeps rateRecvs RECVs of
// rateMsg bytes posted (reposting each one as it completes, in this
// process) until the connection ends, and returns the exit status.
func receiverMain(addr string) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "shm: receiver: %v\n", err)
		return 1
	}
	dev, err := verbs.Open(newProvider())
	if err != nil {
		return fail(err)
	}
	defer dev.Close()
	ln, err := dev.Listen(addr)
	if err != nil {
		return fail(err)
	}
	pd, _ := dev.AllocPD()
	cq, err := dev.CreateCQ(4*rateRecvs, verbs.CQOptions{Wait: verbs.WaitBusyPoll})
	if err != nil {
		return fail(err)
	}
	qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, RecvDepth: rateRecvs})
	if err != nil {
		return fail(err)
	}
	buf, err := mreg.Alloc(rateMsg * rateRecvs)
	if err != nil {
		return fail(err)
	}
	defer mreg.Free(buf)
	dst, err := pd.RegisterMR(buf, mreg.LocalWrite)
	if err != nil {
		return fail(err)
	}
	defer dst.Deregister()
	for i := range rateRecvs {
		if err := qp.PostRecv(verbs.RecvWR{WRID: uint64(i), SGL: []verbs.SGE{dst.SGE(i*rateMsg, rateMsg)}}); err != nil {
			return fail(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := ln.Accept(ctx)
	if err != nil {
		return fail(err)
	}
	if err := r.Accept(qp, nil); err != nil {
		return fail(err)
	}
	ln.Close()
	wcs := make([]verbs.WC, 64)
	rws := make([]verbs.RecvWR, 64)
	sgl := make([]verbs.SGE, 64)
	for {
		n := cq.Poll(wcs)
		if n == 0 {
			select {
			case <-qp.Done():
				return 0
			default:
			}
			runtime.Gosched()
			continue
		}
		k := 0
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.StatusSuccess {
				continue // flushed at the end
			}
			sgl[k] = dst.SGE(int(wc.WRID)*rateMsg, rateMsg)
			rws[k] = verbs.RecvWR{WRID: wc.WRID, SGL: sgl[k : k+1]}
			k++
		}
		if _, err := qp.PostRecvBatch(rws[:k]); err != nil {
			return 0 // the connection ended
		}
	}
}

// BenchmarkSendRateProcess is BenchmarkSendRate with the receiving
// application in another process (the test binary re-executed), which
// reposts its RECVs itself as they complete. It runs with one P
// (GOMAXPROCS 1) in each process, so that each side's goroutines share one
// CPU as one thread per process would (ucx_perftest's setting), and with
// Go's default, under which each process spins as many threads as the
// machine has CPUs.
func BenchmarkSendRateProcess(b *testing.B) {
	all := []int{1}
	if n := runtime.GOMAXPROCS(0); n > 1 {
		all = append(all, n)
	}
	for _, procs := range all {
		b.Run(fmt.Sprintf("procs=%d", procs), func(b *testing.B) { sendRateProcess(b, procs) })
	}
}

// sendRateProcess measures the send rate with procs Ps in each process.
func sendRateProcess(b *testing.B, procs int) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
	dir := sockDir(b)
	addr := "shm:" + dir + "/r"
	childproc.StartTest(b, childproc.Spec{Env: []string{receiverEnv + "=" + addr, "GOMAXPROCS=" + strconv.Itoa(procs)}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dev, err := verbs.Open(newProvider())
	if err != nil {
		b.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	cq, err := dev.CreateCQ(1024, verbs.CQOptions{Wait: verbs.WaitBusyPoll})
	if err != nil {
		b.Fatal(err)
	}
	qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, SendDepth: 256})
	if err != nil {
		b.Fatal(err)
	}
	for {
		if _, err = qp.Connect(ctx, addr, nil); err == nil {
			break
		}
		if ctx.Err() != nil {
			b.Fatal(err)
		}
		// The receiver is not listening yet: a new queue pair, as a
		// failed one is in Error.
		qp.Close()
		time.Sleep(5 * time.Millisecond)
		if qp, err = pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, SendDepth: 256}); err != nil {
			b.Fatal(err)
		}
	}
	sbuf, _ := mreg.Alloc(rateMsg)
	defer mreg.Free(sbuf)
	src, _ := pd.RegisterMR(sbuf, 0)
	defer src.Deregister()
	wrs := make([]verbs.SendWR, rateBatch)
	for i := range wrs {
		wrs[i] = verbs.SendWR{Opcode: verbs.OpSend, SGL: []verbs.SGE{src.SGE(0, rateMsg)}}
	}
	wrs[rateBatch-1].Flags = verbs.Signaled
	wcs := make([]verbs.WC, 1)
	b.SetBytes(rateMsg * rateBatch)
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		if n, err := qp.PostSendBatch(wrs); err != nil || n != rateBatch {
			b.Fatal(n, err)
		}
		for cq.Poll(wcs) == 0 {
			runtime.Gosched()
		}
		if wcs[0].Status != verbs.StatusSuccess {
			b.Fatal(wcs[0])
		}
	}
	b.ReportMetric(float64(b.N*rateBatch)/time.Since(start).Seconds()/1e6, "Mmsg/s")
	qp.Disconnect() // the receiver exits; the cleanup waits for it
}

// BenchmarkRingRate is the anchor of the send-rate benchmarks: rateMsg-byte
// records through a single-producer, single-consumer ring between two
// goroutines on threads pinned to two CPUs, each record published as it is
// written (as the provider's rings do) and copied out by the consumer,
// which publishes its progress once per batch it finds. It measures how many
// messages a second this machine, in its state at the time, moves from one
// CPU to the other through shared memory, with none of the verbs layer's
// work: on a virtual machine whose two vCPUs the host places now near, now
// far apart, it moves several times over between runs, and the provider's
// rates with it.
func BenchmarkRingRate(b *testing.B) {
	if runtime.NumCPU() < 2 {
		b.Skip("needs two CPUs")
	}
	const slots = 256
	ring := make([]byte, slots*rateMsg)
	var pos struct {
		head atomic.Uint64 // records published
		_    [56]byte
		tail atomic.Uint64 // records taken
		_    [56]byte
	}
	stop := make(chan struct{})
	consumer := make(chan error, 1)
	go func() {
		// The thread stays locked, so that it ends with the goroutine
		// and its affinity goes nowhere else.
		consumer <- pinThread(1)
		var dst [rateMsg]byte
		for t := uint64(0); ; {
			h := pos.head.Load()
			if h == t {
				select {
				case <-stop:
					return
				default:
				}
				continue
			}
			for ; t < h; t++ {
				i := t % slots
				copy(dst[:], ring[i*rateMsg:(i+1)*rateMsg])
			}
			pos.tail.Store(t)
		}
	}()
	if err := <-consumer; err != nil {
		close(stop)
		b.Skip(err)
	}
	producer := make(chan error, 1)
	b.SetBytes(rateMsg * rateBatch)
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		if err := pinThread(0); err != nil {
			producer <- err
			return
		}
		var src [rateMsg]byte
		start := time.Now()
		h := uint64(0)
		for range b.N {
			for h+rateBatch-pos.tail.Load() > slots {
			}
			for range rateBatch {
				i := h % slots
				copy(ring[i*rateMsg:(i+1)*rateMsg], src[:])
				h++
				pos.head.Store(h)
			}
		}
		for pos.tail.Load() != h {
		}
		b.ReportMetric(float64(b.N*rateBatch)/time.Since(start).Seconds()/1e6, "Mmsg/s")
		producer <- nil
	}()
	err := <-producer
	close(stop)
	if err != nil {
		b.Fatal(err)
	}
}

// pinThread locks the calling goroutine to its thread and the thread to
// CPU cpu.
func pinThread(cpu int) error {
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin to CPU %d: %w", cpu, err)
	}
	return nil
}
