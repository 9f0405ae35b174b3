//go:build linux

package shm_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/exsgo/exs/eventq"
	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/shm"
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
		fmt.Fprintf(os.Stderr, "exs: shm: receiver: %v\n", err)
		return 1
	}
	dev, err := verbs.Open(shm.New())
	if err != nil {
		return fail(err)
	}
	defer dev.Close()
	ln, err := dev.Listen(addr)
	if err != nil {
		return fail(err)
	}
	pd, _ := dev.AllocPD()
	cq, err := dev.CreateCQ(4*rateRecvs, eventq.Options{Mode: eventq.BusyPoll})
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
// reposts its RECVs itself as they complete. It runs twice: with one P
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
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), receiverEnv+"="+addr, "GOMAXPROCS="+strconv.Itoa(procs))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	waited := false
	defer func() {
		if !waited {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dev, err := verbs.Open(shm.New())
	if err != nil {
		b.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	cq, err := dev.CreateCQ(1024, eventq.Options{Mode: eventq.BusyPoll})
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
	qp.Disconnect()
	waited = true
	if err := cmd.Wait(); err != nil {
		b.Errorf("receiver process: %v", err)
	}
}
