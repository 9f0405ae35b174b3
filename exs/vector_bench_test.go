package exs_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/exsgo/exs/exs"
)

// BenchmarkSendMsg compares, in one run, a vectored send of 4 x 256 KiB
// (SendMsg) with one send of 1 MiB (Send), over the in-process and the
// same-host providers, in each protocol mode: one goroutine keeps k sends
// and k WAITALL recvs of 1 MiB posted on registered buffers (the recvs
// are plain Recvs), reposting each as its event arrives; one iteration is
// a round of 16 messages, so MB/s is the throughput. The pieces of a
// SendMsg are consecutive quarters of the same registered buffer as the
// Send's, with the handle: what differs is the scatter/gather list (4
// entries instead of 1) and the bookkeeping of the vector.
//
//	go test -run '^$' -bench 'SendMsg$' -count 5 ./exs/
//
// On a loaded machine the two subtests of a pair run minutes apart under
// different loads: BenchmarkSendMsgPaired alternates them.
func BenchmarkSendMsg(b *testing.B) {
	for _, pr := range providers {
		for _, mode := range []exs.Mode{exs.ModeDynamic, exs.ModeDirectOnly, exs.ModeIndirectOnly} {
			for _, pieces := range []int{1, 4} {
				b.Run(fmt.Sprintf("%s/%v/%s", pr.name, mode, vecName(pieces)), func(b *testing.B) {
					vb := newVecBench(b, pr.addr(b), pieces, exs.WithMode(mode))
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

// BenchmarkSendMsgPaired runs the two sends of BenchmarkSendMsg (dynamic
// mode) on two connections, alternately, a round of 16 MiB each (each
// first in turn), so that both see the same load; one iteration is one
// round of each. It reports
// the median over the iterations of the ratio of their throughputs
// (sendmsg/send: 1 is the same speed), and each one's throughput in its
// median round.
//
//	go test -run '^$' -bench 'SendMsgPaired' -count 5 ./exs/
func BenchmarkSendMsgPaired(b *testing.B) {
	for _, pr := range providers {
		b.Run(pr.name, func(b *testing.B) {
			one := newVecBench(b, pr.addr(b), 1)
			four := newVecBench(b, pr.addr(b), 4)
			var t1, t4, ratio []float64
			timed := func(vb *vecBench) float64 {
				s := time.Now()
				vb.round()
				return time.Since(s).Seconds()
			}
			for i := 0; b.Loop(); i++ {
				var d1, d4 float64
				if i%2 == 0 { // each first in turn
					d1, d4 = timed(one), timed(four)
				} else {
					d4, d1 = timed(four), timed(one)
				}
				t1, t4, ratio = append(t1, d1), append(t4, d4), append(ratio, d1/d4)
			}
			b.StopTimer()
			mb := float64(vecRound*vecSize) / 1e6
			b.ReportMetric(median(ratio), "ratio")
			b.ReportMetric(mb/median(t1), "send-MB/s")
			b.ReportMetric(mb/median(t4), "sendmsg-MB/s")
		})
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

func vecName(pieces int) string {
	if pieces == 1 {
		return "send-1MiB"
	}
	return fmt.Sprintf("sendmsg-%dx%s", pieces, sizeName(vecSize/pieces))
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

func newVecBench(b *testing.B, addr string, pieces int, opts ...exs.SocketOption) *vecBench {
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
	for i := range vb.vecs {
		buf := vb.sbuf[i*vecSize : (i+1)*vecSize]
		for j := range pieces {
			vb.vecs[i] = append(vb.vecs[i], exs.IOVec{Buf: buf[j*vecSize/pieces : (j+1)*vecSize/pieces], MH: vb.smh})
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
