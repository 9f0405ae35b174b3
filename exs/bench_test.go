package exs_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/exsgo/exs/exs"
)

var benchSizes = []int{64, 64 << 10, 1 << 20}

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// outstandingFor is how many sends and recvs the benchmark keeps posted.
func outstandingFor(size int) int {
	switch {
	case size <= 4<<10:
		return 32
	case size <= 64<<10:
		return 8
	}
	return 4
}

// BenchmarkSendRecv measures the throughput of one stream connection over
// the in-process provider: one goroutine keeps k sends and k WAITALL recvs
// of size bytes posted on registered buffers, reposting each as its event
// arrives; one iteration is one message received. BenchmarkCopy is the
// anchor: one copy() of the same size, in the same run. cpu-ns/op is the
// process's CPU time (user and system) per message: with -cpu 1, the work
// of both ends and of the goroutine hand-offs, less sensitive to a loaded
// machine than ns/op.
func BenchmarkSendRecv(b *testing.B) {
	for _, mode := range []exs.Mode{exs.ModeDynamic, exs.ModeDirectOnly, exs.ModeIndirectOnly} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("%v/%s", mode, sizeName(size)), func(b *testing.B) {
				benchStream(b, size, exs.WithMode(mode))
			})
		}
	}
}

func BenchmarkCopy(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			src, dst := make([]byte, size), make([]byte, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}

func benchStream(b *testing.B, size int, opts ...exs.SocketOption) {
	k := outstandingFor(size)
	opts = append(opts, exs.WithOutstanding(k, k))
	p := connect(b, exs.SockStream, opts...)
	q := newQueue(b, p.st, 2*k+8)
	sendBuf := make([]byte, k*size)
	recvBuf := make([]byte, k*size)
	smh, err := p.st.Mregister(sendBuf, exs.AccessRead)
	if err != nil {
		b.Fatal(err)
	}
	rmh, err := p.st.Mregister(recvBuf, exs.AccessWrite)
	if err != nil {
		b.Fatal(err)
	}
	send := func(i int) {
		if err := p.client.Send(q, sendBuf[i*size:(i+1)*size], smh, 0, i); err != nil {
			b.Fatal(err)
		}
	}
	recv := func(i int) {
		if err := p.server.Recv(q, recvBuf[i*size:(i+1)*size], rmh, exs.MsgWaitAll, i); err != nil {
			b.Fatal(err)
		}
	}
	for i := range k {
		recv(i)
		send(i)
	}
	evs := make([]exs.Event, 2*k)
	received := 0 // recv events not yet counted by an iteration
	b.SetBytes(int64(size))
	b.ReportAllocs()
	cpu0 := processCPU()
	for b.Loop() {
		for received == 0 {
			n, err := q.Dequeue(evs, 1, 10*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			for _, ev := range evs[:n] {
				if ev.Err != nil || ev.N != size {
					b.Fatalf("%v event: %d bytes, %v", ev.Type, ev.N, ev.Err)
				}
				if ev.Type == exs.EventSend {
					send(ev.User.(int))
				} else {
					received++
					recv(ev.User.(int))
				}
			}
		}
		received--
	}
	b.StopTimer()
	if cpu1 := processCPU(); cpu0 >= 0 && cpu1 >= 0 {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	}
	cs := p.client.Stats()
	total := cs.BytesDirect + cs.BytesIndirect
	if total > 0 {
		b.ReportMetric(100*float64(cs.BytesDirect)/float64(total), "%direct")
	}
}
