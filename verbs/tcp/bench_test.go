//go:build linux

package tcp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/tcp"
)

// Benchmarks of the provider against raw Go TCP on loopback, run back to
// back so that each ratio is taken in one run. Both use the congestion
// control EXS_BENCH_CC names (cubic, bbr), or the system's.

// benchCC returns the congestion control of the benchmarks' sockets.
func benchCC(b *testing.B) string {
	if cc := os.Getenv("EXS_BENCH_CC"); cc != "" {
		return cc
	}
	cc, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	if err != nil {
		b.Fatal(err)
	}
	return strings.TrimSpace(string(cc))
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// rawPair returns the two ends of a loopback TCP connection with
// congestion control cc.
func rawPair(b *testing.B, cc string) (client, server *net.TCPConn) {
	b.Helper()
	control := func(_, _ string, c syscall.RawConn) error {
		var err error
		c.Control(func(fd uintptr) { err = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc) })
		return err
	}
	lc := net.ListenConfig{Control: control}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	d := net.Dialer{Control: control}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// benchPair is a queue pair of one provider connected over loopback to a
// queue pair of another, with send queues of 128 and CQs of depth 512
// (newBenchPairCQ: another depth).
type benchPair struct {
	qa, qb   *verbs.QP
	cqa, cqb *verbs.CQ
	pda, pdb *verbs.PD
}

func newBenchPair(b testing.TB, opts ...tcp.Option) *benchPair {
	b.Helper()
	return newBenchPairCQ(b, 512, opts...)
}

func newBenchPairCQ(b testing.TB, cqDepth int, opts ...tcp.Option) *benchPair {
	b.Helper()
	pa, pb := tcp.New(opts...), tcp.New(opts...)
	b.Cleanup(func() { pa.Close(); pb.Close() })
	devA, _ := verbs.Open(pa)
	devB, _ := verbs.Open(pb)
	b.Cleanup(func() { devA.Close(); devB.Close() })
	bp := &benchPair{}
	mk := func(d *verbs.Device) (*verbs.PD, *verbs.QP, *verbs.CQ) {
		pd, _ := d.AllocPD()
		cq, _ := d.CreateCQ(cqDepth, benchCQOpts())
		qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, SendDepth: 128, RecvDepth: 128})
		if err != nil {
			b.Fatal(err)
		}
		return pd, qp, cq
	}
	bp.pda, bp.qa, bp.cqa = mk(devA)
	bp.pdb, bp.qb, bp.cqb = mk(devB)
	ln, err := devB.Listen("tcp:127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		req, err := ln.Accept(ctx)
		if err == nil {
			err = req.Accept(bp.qb, nil)
		}
		done <- err
	}()
	if _, err := bp.qa.Connect(ctx, ln.Addr(), nil); err != nil {
		b.Fatal(err)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return bp
}

// BenchmarkWrite moves a stream of RDMA WRITEs of one size into one
// region of the peer, as many in flight as the send queue allows (at most
// 8 MiB), every one signaled; its anchor, rawtcp, writes the same bytes
// with Write on a loopback TCP connection whose reader reads them into a
// buffer of 1 MiB. Both end when the last byte is placed (the WRITE's
// completion) or read.
func BenchmarkWrite(b *testing.B) {
	cc := benchCC(b)
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
		b.Run(sizeName(size)+"/rawtcp", func(b *testing.B) { benchRawStream(b, size, cc) })
		b.Run(sizeName(size)+"/write-nocrc", func(b *testing.B) {
			benchWrite(b, size, tcp.WithoutCRC(), tcp.WithCongestionControl(cc))
		})
		b.Run(sizeName(size)+"/write-crc", func(b *testing.B) {
			benchWrite(b, size, tcp.WithCongestionControl(cc))
		})
	}
}

func benchRawStream(b *testing.B, size int, cc string) {
	c, s := rawPair(b, cc)
	buf := make([]byte, size)
	done := make(chan error, 1)
	total := int64(b.N) * int64(size)
	go func() {
		rbuf := make([]byte, 1<<20)
		var got int64
		for got < total {
			n, err := s.Read(rbuf)
			got += int64(n)
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil && err != io.EOF {
		b.Fatal(err)
	}
}

func benchWrite(b *testing.B, size int, opts ...tcp.Option) {
	bp := newBenchPair(b, opts...)
	src := make([]byte, size)
	smr, _ := bp.pda.RegisterMR(src, 0)
	dst := make([]byte, size)
	dmr, _ := bp.pdb.RegisterMR(dst, mreg.LocalWrite|mreg.RemoteWrite)
	window := min(64, max(2, (8<<20)/size))
	wr := verbs.SendWR{Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{smr.SGE(0, size)}, RKey: dmr.RKey(), RemoteAddr: dmr.Addr()}
	wcs := make([]verbs.WC, 64)
	ctx := context.Background()
	out, posted, completed := 0, 0, 0
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for completed < b.N {
		for out < window && posted < b.N {
			if err := bp.qa.PostSend(wr); err != nil {
				b.Fatal(err)
			}
			out++
			posted++
		}
		n, err := bp.cqa.Wait(ctx, wcs, 1)
		if err != nil {
			b.Fatal(err)
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.StatusSuccess {
				b.Fatalf("completion %+v", wc)
			}
		}
		out -= n
		completed += n
	}
}

// BenchmarkUnsignaledWrite posts a stream of unsignaled 64 B RDMA WRITEs
// into a send queue of 128 as fast as they are taken, posting again after
// an ErrQueueFull, and ends when a signaled one after them completes. With
// a send CQ of 4 or 16 slots, the CQ's reservations bound the WRITEs in
// flight, not the send queue.
func BenchmarkUnsignaledWrite(b *testing.B) {
	for _, depth := range []int{4, 16, 512} {
		b.Run(fmt.Sprintf("cq%d", depth), func(b *testing.B) {
			bp := newBenchPairCQ(b, depth, tcp.WithoutCRC())
			src := make([]byte, 64)
			smr, _ := bp.pda.RegisterMR(src, 0)
			dst := make([]byte, 64)
			dmr, _ := bp.pdb.RegisterMR(dst, mreg.LocalWrite|mreg.RemoteWrite)
			wr := verbs.SendWR{Opcode: verbs.OpWrite, SGL: []verbs.SGE{smr.SGE(0, 64)}, RKey: dmr.RKey(), RemoteAddr: dmr.Addr()}
			post := func() {
				for {
					err := bp.qa.PostSend(wr)
					if err == nil {
						return
					}
					if !errors.Is(err, verbs.ErrQueueFull) {
						b.Fatal(err)
					}
					runtime.Gosched()
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				post()
			}
			wr.Flags = verbs.Signaled
			post()
			wcs := make([]verbs.WC, 1)
			if n, err := bp.cqa.Wait(context.Background(), wcs, 1); err != nil || wcs[0].Status != verbs.StatusSuccess {
				b.Fatalf("completion %+v: %v", wcs[:n], err)
			}
		})
	}
}

// BenchmarkRoundTrip sends 64 bytes one way and back, one round trip per
// iteration: over the provider a SEND answered by a SEND, each consuming
// a RECV posted in advance, both sides waiting on their CQ (adaptive: a
// spin of 50 us, then a block; EXS_BENCH_WAIT chooses another wait); its
// anchors, rawtcp, a Write answered by a Write on a loopback TCP
// connection, both sides blocking in Read, and rawtcp-spin, the same with
// both sides spinning on non-blocking reads (yielding between them).
func BenchmarkRoundTrip(b *testing.B) {
	cc := benchCC(b)
	const size = 64
	b.Run("64B/rawtcp", func(b *testing.B) {
		c, s := rawPair(b, cc)
		go func() {
			buf := make([]byte, size)
			for {
				if _, err := io.ReadFull(s, buf); err != nil {
					return
				}
				if _, err := s.Write(buf); err != nil {
					return
				}
			}
		}()
		buf := make([]byte, size)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("64B/rawtcp-spin", func(b *testing.B) {
		c, s := rawPair(b, cc)
		spinRead := func(conn *net.TCPConn, buf []byte) error {
			rc, err := conn.SyscallConn()
			if err != nil {
				return err
			}
			for k := 0; k < len(buf); {
				var n int
				var rerr error
				rc.Read(func(fd uintptr) bool {
					n, rerr = unix.Read(int(fd), buf[k:])
					return true
				})
				switch {
				case rerr == unix.EAGAIN:
					runtime.Gosched()
				case rerr != nil:
					return rerr
				case n == 0:
					return io.EOF
				}
				k += max(n, 0)
			}
			return nil
		}
		go func() {
			buf := make([]byte, size)
			for {
				if err := spinRead(s, buf); err != nil {
					return
				}
				if _, err := s.Write(buf); err != nil {
					return
				}
			}
		}()
		buf := make([]byte, size)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
			if err := spinRead(c, buf); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		c.Close()
	})
	for _, mode := range []struct {
		name string
		opts []tcp.Option
	}{
		{"send-nocrc", []tcp.Option{tcp.WithoutCRC()}},
		{"send-crc", nil},
	} {
		b.Run("64B/"+mode.name, func(b *testing.B) {
			bp := newBenchPair(b, append(mode.opts, tcp.WithCongestionControl(cc))...)
			abuf, bbuf := make([]byte, size), make([]byte, size)
			amr, _ := bp.pda.RegisterMR(abuf, mreg.LocalWrite)
			bmr, _ := bp.pdb.RegisterMR(bbuf, mreg.LocalWrite)
			recv := func(qp *verbs.QP, mr *verbs.MR) {
				if err := qp.PostRecv(verbs.RecvWR{SGL: []verbs.SGE{mr.SGE(0, size)}}); err != nil {
					b.Fatal(err)
				}
			}
			send := func(qp *verbs.QP, mr *verbs.MR) {
				if err := qp.PostSend(verbs.SendWR{Opcode: verbs.OpSend, SGL: []verbs.SGE{mr.SGE(0, size)}}); err != nil {
					b.Fatal(err)
				}
			}
			// A RECV completion, or a failed SEND's.
			wait := func(cq *verbs.CQ, wcs []verbs.WC) bool {
				if _, err := cq.Wait(context.Background(), wcs, 1); err != nil {
					return false
				}
				return wcs[0].Status == verbs.StatusSuccess
			}
			for range 4 {
				recv(bp.qa, amr)
				recv(bp.qb, bmr)
			}
			stop := make(chan struct{})
			go func() {
				wcs := make([]verbs.WC, 1)
				for {
					select {
					case <-stop:
						return
					default:
					}
					if !wait(bp.cqb, wcs) {
						return
					}
					recv(bp.qb, bmr)
					send(bp.qb, bmr)
				}
			}()
			wcs := make([]verbs.WC, 1)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				send(bp.qa, amr)
				if !wait(bp.cqa, wcs) {
					b.Fatalf("completion %+v", wcs[0])
				}
				recv(bp.qa, amr)
			}
			b.StopTimer()
			close(stop)
			bp.qb.Disconnect()
		})
	}
}

// benchCQOpts returns the CQ options of the benchmarks (EXS_BENCH_WAIT:
// notify, busy, or adaptive by default).
func benchCQOpts() verbs.CQOptions {
	switch os.Getenv("EXS_BENCH_WAIT") {
	case "notify":
		return verbs.CQOptions{Wait: verbs.WaitNotify}
	case "busy":
		return verbs.CQOptions{Wait: verbs.WaitBusyPoll}
	}
	return verbs.CQOptions{}
}
