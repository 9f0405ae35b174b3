package exs

import (
	"fmt"
	"testing"
)

// BenchmarkQueueSignal measures what a queue's signal costs a post and a
// dequeue: batches of 1 (every post raises the signal and every dequeue
// lowers it, the worst case) and of 32 events.
func BenchmarkQueueSignal(b *testing.B) {
	for _, batch := range []int{1, 32} {
		for _, sig := range []string{"none", "channel", "eventfd"} {
			b.Run(fmt.Sprintf("%s/batch%d", sig, batch), func(b *testing.B) {
				st, err := NewStack()
				if err != nil {
					b.Fatal(err)
				}
				defer st.Close()
				q, err := st.Qcreate(64)
				if err != nil {
					b.Fatal(err)
				}
				switch sig {
				case "channel":
					q.Signal()
				case "eventfd":
					if _, err := q.SignalFD(); err != nil {
						b.Skip(err)
					}
				}
				evs := make([]Event, batch)
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i += batch {
					for range batch {
						if err := q.reserve(); err != nil {
							b.Fatal(err)
						}
						q.post(Event{Type: EventSend})
					}
					if n := q.TryDequeue(evs); n != batch {
						b.Fatalf("dequeued %d, want %d", n, batch)
					}
				}
			})
		}
	}
}
