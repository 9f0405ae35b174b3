package inproc_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/inproc"
)

// benchSizes are the transfer sizes of the throughput benchmarks.
var benchSizes = []int{64, 4 << 10, 64 << 10, 1 << 20}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// benchPair is a connected pair of queue pairs with a registered source
// region on one side and a remotely writable target on the other.
type benchPair struct {
	dev          *verbs.Device
	cq           *verbs.CQ
	a, b         *verbs.QP
	src, dst     *verbs.MR
	srcBuf, dBuf []byte
}

func newBenchPair(tb testing.TB, size int) *benchPair {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := inproc.New()
	dev, err := verbs.Open(p)
	if err != nil {
		tb.Fatal(err)
	}
	pd, _ := dev.AllocPD()
	cq, err := dev.CreateCQ(1024, verbs.CQOptions{Wait: verbs.WaitBusyPoll})
	if err != nil {
		tb.Fatal(err)
	}
	rcq, _ := dev.CreateCQ(1024, verbs.CQOptions{})
	cfg := verbs.QPConfig{SendCQ: cq, RecvCQ: rcq, SendDepth: 256, RecvDepth: 256}
	a, err := pd.CreateQP(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	b, _ := pd.CreateQP(verbs.QPConfig{SendCQ: rcq, RecvCQ: rcq, RecvDepth: 256})
	ln, err := dev.Listen("inproc:bench")
	if err != nil {
		tb.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		r, err := ln.Accept(ctx)
		if err == nil {
			err = r.Accept(b, nil)
		}
		errc <- err
	}()
	if _, err := a.Connect(ctx, ln.Addr(), nil); err != nil {
		tb.Fatal(err)
	}
	if err := <-errc; err != nil {
		tb.Fatal(err)
	}
	ln.Close()
	bp := &benchPair{dev: dev, cq: cq, a: a, b: b}
	bp.srcBuf, _ = mreg.Alloc(size)
	bp.dBuf, _ = mreg.Alloc(size)
	for i := range bp.srcBuf {
		bp.srcBuf[i] = byte(i)
	}
	if bp.src, err = pd.RegisterMR(bp.srcBuf, 0); err != nil {
		tb.Fatal(err)
	}
	if bp.dst, err = pd.RegisterMR(bp.dBuf, mreg.LocalWrite|mreg.RemoteWrite); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		dev.Close()
		bp.src.Deregister()
		bp.dst.Deregister()
		mreg.Free(bp.srcBuf)
		mreg.Free(bp.dBuf)
	})
	return bp
}

// write returns a signaled RDMA WRITE of the whole source into the target.
func (bp *benchPair) write(n int) verbs.SendWR {
	return verbs.SendWR{
		Opcode: verbs.OpWrite, Flags: verbs.Signaled,
		SGL:  []verbs.SGE{bp.src.SGE(0, n)},
		RKey: bp.dst.RKey(), RemoteAddr: bp.dst.Addr(),
	}
}

// BenchmarkWrite posts one signaled RDMA WRITE and polls its completion
// per iteration (sub-benchmark "verbs"), next to its anchor: one copy()
// of the same size between two page-aligned buffers (sub-benchmark
// "copy"), which is the copy such a WRITE makes. The two run back to back
// for each size, so their ratio holds on a machine whose speed drifts.
func BenchmarkWrite(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size)+"/verbs", func(b *testing.B) {
			bp := newBenchPair(b, size)
			wr := bp.write(size)
			wcs := make([]verbs.WC, 1)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if err := bp.a.PostSend(wr); err != nil {
					b.Fatal(err)
				}
				for bp.cq.Poll(wcs) == 0 {
				}
				if wcs[0].Status != verbs.StatusSuccess {
					b.Fatal(wcs[0])
				}
			}
		})
		b.Run(sizeName(size)+"/copy", func(b *testing.B) {
			src, _ := mreg.Alloc(size)
			dst, _ := mreg.Alloc(size)
			defer mreg.Free(src)
			defer mreg.Free(dst)
			for i := range src {
				src[i] = byte(i)
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}

// BenchmarkWriteBatch posts RDMA WRITEs 32 at a time with PostSendBatch,
// only the last signaled, and polls that one completion: the cost per
// work request when completions are moderated.
func BenchmarkWriteBatch(b *testing.B) {
	const batch = 32
	for _, size := range benchSizes[:2] {
		b.Run(sizeName(size), func(b *testing.B) {
			bp := newBenchPair(b, size)
			wrs := make([]verbs.SendWR, batch)
			for i := range wrs {
				wrs[i] = bp.write(size)
				wrs[i].Flags = 0
			}
			wrs[batch-1].Flags = verbs.Signaled
			wcs := make([]verbs.WC, 1)
			b.SetBytes(int64(size) * batch)
			b.ReportAllocs()
			for b.Loop() {
				if n, err := bp.a.PostSendBatch(wrs); err != nil || n != batch {
					b.Fatal(n, err)
				}
				for bp.cq.Poll(wcs) == 0 {
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/wr")
		})
	}
}

// BenchmarkSendRecv posts a RECV and a signaled 64-byte SEND per
// iteration and polls both completions.
func BenchmarkSendRecv(b *testing.B) {
	bp := newBenchPair(b, 64)
	rcq := bp.b.Config().RecvCQ
	recv := verbs.RecvWR{SGL: []verbs.SGE{bp.dst.SGE(0, 64)}}
	send := verbs.SendWR{Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{bp.src.SGE(0, 64)}}
	wcs := make([]verbs.WC, 1)
	b.SetBytes(64)
	b.ReportAllocs()
	for b.Loop() {
		if err := bp.b.PostRecv(recv); err != nil {
			b.Fatal(err)
		}
		if err := bp.a.PostSend(send); err != nil {
			b.Fatal(err)
		}
		for bp.cq.Poll(wcs) == 0 {
		}
		for rcq.Poll(wcs) == 0 {
		}
	}
}

// BenchmarkSendRate is the message-rate benchmark of the same-host
// provider (verbs/shm) over the in-process provider, whose Transmit places
// each SEND at once: the cost of the verbs layer alone. 64-byte SENDs, 32
// per PostSendBatch (the last signaled), polled; a goroutine reposts each
// RECV as it completes (RNRWait when it falls behind).
func BenchmarkSendRate(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const msg, batch, recvs = 64, 32, 256
	bp := newBenchPair(b, msg*recvs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		cq := bp.b.Config().RecvCQ
		wcs := make([]verbs.WC, 64)
		rws := make([]verbs.RecvWR, 64)
		sgl := make([]verbs.SGE, 64)
		for ctx.Err() == nil {
			n := cq.Poll(wcs)
			if n == 0 {
				runtime.Gosched()
				continue
			}
			for i, wc := range wcs[:n] {
				sgl[i] = bp.dst.SGE(int(wc.WRID)*msg, msg)
				rws[i] = verbs.RecvWR{WRID: wc.WRID, SGL: sgl[i : i+1]}
			}
			if _, err := bp.b.PostRecvBatch(rws[:n]); err != nil {
				return
			}
		}
	}()
	for i := range recvs {
		if err := bp.b.PostRecv(verbs.RecvWR{WRID: uint64(i), SGL: []verbs.SGE{bp.dst.SGE(i*msg, msg)}}); err != nil {
			b.Fatal(err)
		}
	}
	wrs := make([]verbs.SendWR, batch)
	for i := range wrs {
		wrs[i] = verbs.SendWR{Opcode: verbs.OpSend, SGL: []verbs.SGE{bp.src.SGE(0, msg)}}
	}
	wrs[batch-1].Flags = verbs.Signaled
	wcs := make([]verbs.WC, 1)
	b.SetBytes(msg * batch)
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		if n, err := bp.a.PostSendBatch(wrs); err != nil || n != batch {
			b.Fatal(n, err)
		}
		for bp.cq.Poll(wcs) == 0 {
			runtime.Gosched()
		}
		if wcs[0].Status != verbs.StatusSuccess {
			b.Fatal(wcs[0])
		}
	}
	b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds()/1e6, "Mmsg/s")
	cancel()
	<-done
}
