//go:build linux

package shm_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/shm"
	"github.com/exsgo/exs/verbs/verbstest"
)

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// remoteTarget is a local queue pair connected to a queue pair of a peer
// process, with a local source region and a peer target region of size
// bytes.
type remoteTarget struct {
	qp     *verbs.QP
	cq     *verbs.CQ
	src    *verbs.MR
	srcBuf []byte
	target verbstest.PeerMR
	pid    int
	p      *shm.Provider
}

func newRemoteTarget(b *testing.B, size int, opts ...shm.Option) *remoteTarget {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), verbstest.Timeout)
	defer cancel()
	dir := sockDir(b)
	pp := verbstest.StartPeerProcess(b, "shm:"+dir+"/peer")
	b.Cleanup(func() { pp.Close() })
	p := newProvider(opts...)
	dev, err := verbs.Open(p)
	if err != nil {
		b.Fatal(err)
	}
	addr, err := pp.Listen(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if err := pp.Serve(verbstest.Answer{}); err != nil {
		b.Fatal(err)
	}
	pd, _ := dev.AllocPD()
	cq, err := dev.CreateCQ(1024, verbs.CQOptions{Wait: verbs.WaitBusyPoll})
	if err != nil {
		b.Fatal(err)
	}
	qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, SendDepth: 256})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := qp.Connect(ctx, addr, nil); err != nil {
		b.Fatal(err)
	}
	pq, _, err := pp.Served(ctx)
	if err != nil {
		b.Fatal(err)
	}
	target, err := pq.Register(size, mreg.LocalWrite|mreg.RemoteWrite)
	if err != nil {
		b.Fatal(err)
	}
	buf, err := mreg.Alloc(size)
	if err != nil {
		b.Fatal(err)
	}
	for i := range buf {
		buf[i] = byte(i)
	}
	src, err := pd.RegisterMR(buf, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		dev.Close()
		src.Deregister()
		mreg.Free(buf)
	})
	return &remoteTarget{qp: qp, cq: cq, src: src, srcBuf: buf, target: target, pid: pp.Pid(), p: p}
}

// writeLoop posts one signaled RDMA WRITE of n bytes and polls its
// completion per iteration.
func (rt *remoteTarget) writeLoop(b *testing.B, n int) {
	wr := verbs.SendWR{
		Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{rt.src.SGE(0, n)},
		RKey: rt.target.RKey(), RemoteAddr: rt.target.Addr(),
	}
	wcs := make([]verbs.WC, 1)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		if err := rt.qp.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		for rt.cq.Poll(wcs) == 0 {
			runtime.Gosched()
		}
		if wcs[0].Status != verbs.StatusSuccess {
			b.Fatal(wcs[0])
		}
	}
}

// BenchmarkWrite measures RDMA WRITE into a peer process, one signaled
// WRITE posted and polled per iteration (verbs), next to its anchors in
// the same run: a raw process_vm_writev loop of the same size from the
// same source into the same target (pvw), and one copy() between two
// page-aligned buffers of this process (copy).
func BenchmarkWrite(b *testing.B) {
	for _, size := range []int{64, 4 << 10, 64 << 10, 1 << 20, 16 << 20} {
		b.Run(sizeName(size), func(b *testing.B) {
			rt := newRemoteTarget(b, size)
			b.Run("verbs", func(b *testing.B) { rt.writeLoop(b, size) })
			b.Run("pvw", func(b *testing.B) {
				local := []unix.Iovec{{Base: &rt.srcBuf[0]}}
				local[0].SetLen(size)
				remote := []unix.RemoteIovec{{Base: uintptr(rt.target.Addr()), Len: size}}
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					if n, err := unix.ProcessVMWritev(rt.pid, local, remote, 0); err != nil || n != size {
						b.Fatal(n, err)
					}
				}
			})
			b.Run("copy", func(b *testing.B) {
				dst, _ := mreg.Alloc(size)
				defer mreg.Free(dst)
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					copy(dst, rt.srcBuf)
				}
			})
		})
	}
}

// BenchmarkWriteShared measures RDMA WRITE into a peer process's memory
// from its shared allocator (the peer's region comes from Provider.Alloc,
// so this side writes it with a plain copy into its own mapping), one
// signaled WRITE posted and polled per iteration, next to one copy()
// between two page-aligned buffers of this process in the same run.
func BenchmarkWriteShared(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20, 16 << 20} {
		b.Run(sizeName(size), func(b *testing.B) {
			b.Setenv(modeEnv, "shared")
			rt := newRemoteTarget(b, size)
			deadline := time.Now().Add(verbstest.Timeout)
			for st := rt.p.Stats(); len(st) != 1 || st[0].PeerArenas == 0; st = rt.p.Stats() {
				if time.Now().After(deadline) {
					b.Fatalf("the peer's arena was not mapped: %+v", st)
				}
				time.Sleep(time.Millisecond)
			}
			b.Run("verbs", func(b *testing.B) {
				rt.writeLoop(b, size)
				if st := rt.p.Stats(); len(st) != 1 || st[0].Shared == 0 {
					b.Fatalf("no WRITE was a plain copy: %+v", st)
				}
			})
			b.Run("copy", func(b *testing.B) {
				dst, _ := mreg.Alloc(size)
				defer mreg.Free(dst)
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					copy(dst, rt.srcBuf)
				}
			})
		})
	}
}

// BenchmarkWriteCrossover compares, for small RDMA WRITEs into a peer
// process, the initiator's own process_vm_writev (direct) with a record
// through the ring that the target places (ring: inline up to
// DefaultInlineMax, then read by the target with process_vm_readv), both
// one WRITE per post and poll (lat) and 32 per PostSendBatch with the last
// signaled (batch).
func BenchmarkWriteCrossover(b *testing.B) {
	modes := []struct {
		name string
		opts []shm.Option
	}{
		{"direct", []shm.Option{shm.WithDirectMin(0)}},
		{"ring", []shm.Option{shm.WithDirectMin(verbs.MaxMessage + 1)}},
	}
	for _, size := range []int{64, 512, 2 << 10, 8 << 10, 16 << 10, 32 << 10, 128 << 10} {
		for _, m := range modes {
			b.Run(sizeName(size)+"/"+m.name, func(b *testing.B) {
				rt := newRemoteTarget(b, size, m.opts...)
				b.Run("lat", func(b *testing.B) { rt.writeLoop(b, size) })
				b.Run("batch", func(b *testing.B) {
					const batch = 32
					wrs := make([]verbs.SendWR, batch)
					for i := range wrs {
						wrs[i] = verbs.SendWR{Opcode: verbs.OpWrite, SGL: []verbs.SGE{rt.src.SGE(0, size)},
							RKey: rt.target.RKey(), RemoteAddr: rt.target.Addr()}
					}
					wrs[batch-1].Flags = verbs.Signaled
					wcs := make([]verbs.WC, 1)
					b.SetBytes(int64(size) * batch)
					b.ReportAllocs()
					start := time.Now()
					for b.Loop() {
						if n, err := rt.qp.PostSendBatch(wrs); err != nil || n != batch {
							b.Fatal(n, err)
						}
						for rt.cq.Poll(wcs) == 0 {
							runtime.Gosched()
						}
						if wcs[0].Status != verbs.StatusSuccess {
							b.Fatal(wcs[0])
						}
					}
					b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds()/1e6, "Mwr/s")
				})
			})
		}
	}
}

// BenchmarkSendRate measures the rate of 64-byte SENDs between two
// providers: posted 32 at a time with PostSendBatch (the last one
// signaled) and polled; the receiving application, a goroutine, reposts
// each RECV as it completes. Both ends run in this process (the rings,
// futexes and copies are those between processes); the receiver waits
// with RNRWait when it falls behind.
func BenchmarkSendRate(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := sockDir(b)
	qa, qb := connectPair(b, ctx, newProvider(), newProvider(), "shm:"+dir+"/s")
	const msg, batch, recvs = 64, 32, 256
	sbuf, _ := mreg.Alloc(msg)
	rbuf, _ := mreg.Alloc(msg * recvs)
	defer mreg.Free(sbuf)
	defer mreg.Free(rbuf)
	src, _ := qa.PD().RegisterMR(sbuf, 0)
	dst, _ := qb.PD().RegisterMR(rbuf, mreg.LocalWrite)
	defer src.Deregister()
	defer dst.Deregister()
	for i := range recvs {
		if err := qb.PostRecv(verbs.RecvWR{WRID: uint64(i), SGL: []verbs.SGE{dst.SGE(i*msg, msg)}}); err != nil {
			b.Fatal(err)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		cq := qb.Config().RecvCQ
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
				sgl[i] = dst.SGE(int(wc.WRID)*msg, msg)
				rws[i] = verbs.RecvWR{WRID: wc.WRID, SGL: sgl[i : i+1]}
			}
			if _, err := qb.PostRecvBatch(rws[:n]); err != nil {
				return
			}
		}
	}()
	wrs := make([]verbs.SendWR, batch)
	for i := range wrs {
		wrs[i] = verbs.SendWR{Opcode: verbs.OpSend, SGL: []verbs.SGE{src.SGE(0, msg)}}
	}
	wrs[batch-1].Flags = verbs.Signaled
	wcs := make([]verbs.WC, 1)
	cq := qa.Config().SendCQ
	b.SetBytes(msg * batch)
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		if n, err := qa.PostSendBatch(wrs); err != nil || n != batch {
			b.Fatal(n, err)
		}
		for cq.Poll(wcs) == 0 {
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
