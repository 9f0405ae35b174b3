package exs_test

import (
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/exsgo/exs/exs"
	"github.com/exsgo/exs/internal/bigcopy"
)

// BenchmarkSendMsg compares, in one run, a vectored send of 4 x 256 KiB
// (SendMsg) with one send of 1 MiB (Send), over the in-process and the
// same-host providers, in each protocol mode: one goroutine keeps k sends
// and k WAITALL recvs of 1 MiB posted on registered buffers (the recvs
// are plain Recvs), reposting each as its event arrives; one iteration is
// a round of 16 messages, so MB/s is the throughput. The pieces of a
// SendMsg lie in a registered buffer like the Send's, with the handle:
// consecutive quarters of a send buffer (adjacent, so one scatter/gather
// entry, as for the Send), or apart (4 entries, so 4 copies of 256 KiB for
// a provider that copies, where the Send's is one copy of 1 MiB).
//
//	go test -run '^$' -bench 'SendMsg$' -count 5 ./exs/
//
// On a loaded machine the two subtests of a pair run minutes apart under
// different loads: BenchmarkSendMsgPaired alternates them.
func BenchmarkSendMsg(b *testing.B) {
	for _, pr := range providers {
		for _, mode := range []exs.Mode{exs.ModeDynamic, exs.ModeDirectOnly, exs.ModeIndirectOnly} {
			for _, l := range vecLayouts {
				b.Run(fmt.Sprintf("%s/%v/%s", pr.name, mode, l.name), func(b *testing.B) {
					vb := newVecBench(b, pr.addr(b), l.pieces, l.apart, exs.WithMode(mode))
					b.SetBytes(vecRound * vecSize)
					b.ReportAllocs()
					cpu0 := processCPU()
					for b.Loop() {
						vb.round()
					}
					b.StopTimer()
					if cpu1 := processCPU(); cpu0 >= 0 && cpu1 >= 0 {
						b.ReportMetric(float64(cpu1-cpu0)/float64(b.N*vecRound), "cpu-ns/MiB")
					}
					vb.report(b)
				})
			}
		}
	}
}

// BenchmarkSendMsgPaired runs the sends of BenchmarkSendMsg on one
// connection each, in turn, a round of 16 MiB each (each first in turn),
// so that all see the same load; one iteration is one round of each. It
// reports each one's throughput in its median round, and for each SendMsg
// the median over the iterations of the ratio of its throughput to the
// Send's (1 is the same speed).
//
//	go test -run '^$' -bench 'SendMsgPaired' -count 5 ./exs/
func BenchmarkSendMsgPaired(b *testing.B) {
	for _, pr := range pairedProviders {
		for _, mode := range []exs.Mode{exs.ModeDynamic, exs.ModeDirectOnly, exs.ModeIndirectOnly} {
			b.Run(fmt.Sprintf("%s/%v", pr.name, mode), func(b *testing.B) {
				benchPaired(b, pr.addr, exs.WithMode(mode))
			})
		}
	}
}

// pairedProviders are the in-process and same-host providers, which copy
// each scatter/gather entry with copy(), and the TCP provider over
// loopback, whose WRITE hands its entries to one writev and whose receiver
// reads the payload into place: the kernel copies, whatever the pieces.
var pairedProviders = append(providers[:len(providers):len(providers)], struct {
	name string
	addr func(t testing.TB) string
}{"tcp", func(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return "tcp:" + ln.Addr().String()
}})

func benchPaired(b *testing.B, addr func(testing.TB) string, opts ...exs.SocketOption) {
	vbs := make([]*vecBench, len(vecLayouts))
	for i, l := range vecLayouts {
		vbs[i] = newVecBench(b, addr(b), l.pieces, l.apart, opts...)
	}
	times := make([][]float64, len(vbs))  // per layout, per iteration
	ratios := make([][]float64, len(vbs)) // the same, as a ratio to the Send's
	for it := 0; b.Loop(); it++ {
		d := make([]float64, len(vbs))
		for j := range vbs {
			// Each first in turn.
			i := (j + it) % len(vbs)
			s := time.Now()
			vbs[i].round()
			d[i] = time.Since(s).Seconds()
		}
		for i := range vbs {
			times[i] = append(times[i], d[i])
			ratios[i] = append(ratios[i], d[0]/d[i])
		}
	}
	b.StopTimer()
	mb := float64(vecRound*vecSize) / 1e6
	for i, l := range vecLayouts {
		b.ReportMetric(mb/median(times[i]), l.name+"-MB/s")
		if i > 0 {
			b.ReportMetric(median(ratios[i]), l.name+"-ratio")
		}
	}
}

func median(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	return s[len(s)/2]
}

const (
	vecSize  = 1 << 20 // bytes per send and per recv
	vecRound = 16      // messages per round
)

// vecLayouts are the sends the benchmarks compare: one buffer (Send), and
// 4 (SendMsg) that follow each other in memory, or lie apart.
var vecLayouts = []struct {
	name   string
	pieces int
	apart  bool
}{
	{"send-1MiB", 1, false},
	{"sendmsg-4x256KiB", 4, false},
	{"sendmsg-4x256KiB-apart", 4, true},
}

// vecBench is a connection that sends vecSize bytes per send, in pieces
// buffers (SendMsg), or one (Send) if pieces is 1, to WAITALL recvs.
type vecBench struct {
	b      *testing.B
	p      *pair
	q      *exs.Queue
	k      int // sends and recvs kept posted
	sbuf   []byte
	rbuf   []byte
	smh    *exs.MHandle
	rmh    *exs.MHandle
	vecs   [][]exs.IOVec
	pieces int
	evs    []exs.Event
}

func newVecBench(b *testing.B, addr string, pieces int, apart bool, opts ...exs.SocketOption) *vecBench {
	k := outstandingFor(vecSize)
	opts = append(opts, exs.WithOutstanding(k, k))
	st, err := exs.NewStack()
	if err != nil {
		b.Fatal(err)
	}
	var mem [][]byte
	b.Cleanup(func() {
		st.Close()
		for _, m := range mem {
			st.Free(m)
		}
	})
	vb := &vecBench{b: b, k: k, pieces: pieces, evs: make([]exs.Event, 2*k)}
	vb.p = connectAddr(b, st, exs.SockStream, addr, opts...)
	vb.q = newQueue(b, st, 2*k+8)
	for _, m := range []*[]byte{&vb.sbuf, &vb.rbuf} {
		if *m, err = st.Alloc(k * vecSize); err != nil {
			b.Fatal(err)
		}
		mem = append(mem, *m)
	}
	if vb.smh, err = st.Mregister(vb.sbuf, exs.AccessRead); err != nil {
		b.Fatal(err)
	}
	if vb.rmh, err = st.Mregister(vb.rbuf, exs.AccessWrite); err != nil {
		b.Fatal(err)
	}
	vb.vecs = make([][]exs.IOVec, k)
	n := vecSize / pieces
	for i := range vb.vecs {
		for j := range pieces {
			// Adjacent: the quarters of send buffer i. Apart: piece j of
			// every send lies in quarter j of the whole buffer, so that
			// no piece continues the one before it.
			off := i*vecSize + j*n
			if apart {
				off = j*k*n + i*n
			}
			vb.vecs[i] = append(vb.vecs[i], exs.IOVec{Buf: vb.sbuf[off : off+n], MH: vb.smh})
		}
	}
	return vb
}

func (vb *vecBench) send(i int) {
	var err error
	if vb.pieces == 1 {
		err = vb.p.client.Send(vb.q, vb.sbuf[i*vecSize:(i+1)*vecSize], vb.smh, 0, i)
	} else {
		err = vb.p.client.SendMsg(vb.q, vb.vecs[i], 0, i)
	}
	if err != nil {
		vb.b.Fatal(err)
	}
}

func (vb *vecBench) recv(i int) {
	if err := vb.p.server.Recv(vb.q, vb.rbuf[i*vecSize:(i+1)*vecSize], vb.rmh, exs.MsgWaitAll, i); err != nil {
		vb.b.Fatal(err)
	}
}

// round sends and receives vecRound messages, k at a time, and returns
// once every one has completed at both ends.
func (vb *vecBench) round() {
	sends, recvs := 0, 0
	for ; sends < min(vb.k, vecRound); sends++ {
		vb.recv(sends)
		vb.send(sends)
	}
	recvs = sends
	for done := 0; done < 2*vecRound; {
		n, err := vb.q.Dequeue(vb.evs, 1, 10*time.Second)
		if err != nil {
			vb.b.Fatal(err)
		}
		for _, ev := range vb.evs[:n] {
			if ev.Err != nil || ev.N != vecSize {
				vb.b.Fatalf("%v event: %d bytes, %v", ev.Type, ev.N, ev.Err)
			}
			done++
			switch {
			case ev.Type == exs.EventRecv && recvs < vecRound:
				vb.recv(ev.User.(int))
				recvs++
			case ev.Type != exs.EventRecv && sends < vecRound:
				vb.send(ev.User.(int))
				sends++
			}
		}
	}
}

func (vb *vecBench) report(b *testing.B) {
	cs := vb.p.client.Stats()
	if total := cs.BytesDirect + cs.BytesIndirect; total > 0 {
		b.ReportMetric(100*float64(cs.BytesDirect)/float64(total), "%direct")
	}
}

// BenchmarkCopyPieces is the anchor of BenchmarkSendMsgPaired's apart
// layout: the copy a copying provider does for a WRITE of 1 MiB, as one
// copy() or as 4 of 256 KiB, alternately over 4 buffers of each (the
// working set of a connection of the benchmark), with the median ratio of
// their speeds (4 copies against one). runtime.memmove moves 1 MiB and
// more with non-temporal stores, and less through the cache: the ratio
// shows what that costs here. The bigcopy ratio is that of 4 pieces copied
// by bigcopy.Copy (non-temporal stores, as the copying providers copy the
// pieces of a transfer of 1 MiB or more) against one copy().
func BenchmarkCopyPieces(b *testing.B) {
	const nbuf = 4
	src, dst := make([]byte, nbuf*vecSize), make([]byte, nbuf*vecSize)
	copyIn := func(i, pieces int, cp func(d, s []byte) int) float64 {
		s, d := src[i*vecSize:(i+1)*vecSize], dst[i*vecSize:(i+1)*vecSize]
		n := vecSize / pieces
		t := time.Now()
		for j := range pieces {
			cp(d[j*n:(j+1)*n], s[j*n:(j+1)*n])
		}
		return time.Since(t).Seconds()
	}
	plain := func(d, s []byte) int { return copy(d, s) }
	var ratio, bigRatio []float64
	b.SetBytes(3 * vecSize)
	for it := 0; b.Loop(); it++ {
		i := it % nbuf
		var one, four, big float64
		if it%2 == 0 {
			one, four, big = copyIn(i, 1, plain), copyIn(i, 4, plain), copyIn(i, 4, bigcopy.Copy)
		} else {
			big, four, one = copyIn(i, 4, bigcopy.Copy), copyIn(i, 4, plain), copyIn(i, 1, plain)
		}
		ratio = append(ratio, one/four)
		bigRatio = append(bigRatio, one/big)
	}
	b.ReportMetric(median(ratio), "4x256KiB-ratio")
	b.ReportMetric(median(bigRatio), "4x256KiB-bigcopy-ratio")
}
