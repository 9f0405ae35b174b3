package eventq

import (
	"testing"
	"unsafe"
)

// completion is an event the size of a work completion (32 bytes).
type completion struct {
	WRID   uint64
	Len    uint32
	QPN    uint32
	Imm    uint32
	Status int32
	Opcode uint8
	Flags  uint8
}

var benchEvent = completion{WRID: 7, Len: 64, QPN: 3}

func newBenchQueue(b *testing.B, depth int, mode WaitMode) *Queue[completion] {
	b.Helper()
	q, err := New[completion](depth, Options{Mode: mode})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = q.Close() })
	return q
}

// BenchmarkPostTryDequeue is one completion posted and polled on one
// goroutine, the verbs fast path. Channel is the same through a buffered
// channel, as an anchor for ratios.
func BenchmarkPostTryDequeue(b *testing.B) {
	b.Run("Queue", func(b *testing.B) {
		q := newBenchQueue(b, 1024, Adaptive)
		out := make([]completion, 1)
		b.SetBytes(int64(unsafe.Sizeof(benchEvent)))
		b.ReportAllocs()
		for b.Loop() {
			if err := q.Post(benchEvent); err != nil {
				b.Fatal(err)
			}
			if q.TryDequeue(out) != 1 {
				b.Fatal("TryDequeue found nothing")
			}
		}
	})
	b.Run("Channel", func(b *testing.B) {
		ch := make(chan completion, 1024)
		b.SetBytes(int64(unsafe.Sizeof(benchEvent)))
		b.ReportAllocs()
		for b.Loop() {
			select {
			case ch <- benchEvent:
			default:
				b.Fatal("channel full")
			}
			<-ch
		}
	})
}

// BenchmarkDequeueBatch32 posts 32 completions and dequeues them in one
// call. One op is 32 events; ns/event is reported too.
func BenchmarkDequeueBatch32(b *testing.B) {
	const batch = 32
	evs := make([]completion, batch)
	for i := range evs {
		evs[i] = benchEvent
		evs[i].WRID = uint64(i)
	}
	b.Run("Post+Dequeue", func(b *testing.B) {
		q := newBenchQueue(b, 1024, Adaptive)
		out := make([]completion, batch)
		b.SetBytes(batch * int64(unsafe.Sizeof(benchEvent)))
		b.ReportAllocs()
		for b.Loop() {
			for _, ev := range evs {
				if err := q.Post(ev); err != nil {
					b.Fatal(err)
				}
			}
			if n, err := q.Dequeue(out, batch, 0); n != batch || err != nil {
				b.Fatal(n, err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/event")
	})
	b.Run("PostBatch+TryDequeue", func(b *testing.B) {
		q := newBenchQueue(b, 1024, Adaptive)
		out := make([]completion, batch)
		b.SetBytes(batch * int64(unsafe.Sizeof(benchEvent)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := q.PostBatch(evs); err != nil {
				b.Fatal(err)
			}
			if n := q.TryDequeue(out); n != batch {
				b.Fatal(n)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/event")
	})
	b.Run("Channel", func(b *testing.B) {
		ch := make(chan completion, 1024)
		out := make([]completion, batch)
		b.SetBytes(batch * int64(unsafe.Sizeof(benchEvent)))
		b.ReportAllocs()
		for b.Loop() {
			for _, ev := range evs {
				ch <- ev
			}
			for i := range out {
				out[i] = <-ch
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/event")
	})
}

// BenchmarkPingPong sends one event to an echo goroutine and waits for it
// to come back: one op is a round trip, two cross-goroutine wake-ups.
// Channel does the same over two unbuffered channels, as an anchor.
func BenchmarkPingPong(b *testing.B) {
	for _, mode := range allModes {
		b.Run(mode.String(), func(b *testing.B) {
			ping := newBenchQueue(b, 64, mode)
			pong := newBenchQueue(b, 64, mode)
			done := make(chan struct{})
			go func() {
				defer close(done)
				evs := make([]completion, 1)
				for {
					if _, err := ping.Dequeue(evs, 1, -1); err != nil {
						return // closed
					}
					if err := pong.Post(evs[0]); err != nil {
						b.Error(err)
						return
					}
				}
			}()
			evs := make([]completion, 1)
			b.ReportAllocs()
			for b.Loop() {
				if err := ping.Post(benchEvent); err != nil {
					b.Fatal(err)
				}
				if _, err := pong.Dequeue(evs, 1, -1); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			_ = ping.Close()
			<-done
		})
	}
	b.Run("Channel", func(b *testing.B) {
		ping, pong := make(chan completion), make(chan completion)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for ev := range ping {
				pong <- ev
			}
		}()
		b.ReportAllocs()
		for b.Loop() {
			ping <- benchEvent
			<-pong
		}
		b.StopTimer()
		close(ping)
		<-done
	})
}
