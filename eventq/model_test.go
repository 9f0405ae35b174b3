package eventq

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// model is a trivially correct queue that Queue is checked against.
type model struct {
	cap, reserved int
	events        []int
	closed        bool
}

func (m *model) free() int { return m.cap - len(m.events) - m.reserved }

// runModel interprets ops as a sequence of single-goroutine operations,
// applies each to a new queue and to the model, and reports the first
// difference. Each operation takes two bytes: the operation and its
// argument.
func runModel(t *testing.T, depth int, ops []byte) {
	t.Helper()
	q, err := New[int](depth, Options{Mode: Notify})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	m := &model{cap: depth}
	next := 0
	want := func(i int, what string, got, want error) {
		t.Helper()
		if !errors.Is(got, want) || (want == nil && got != nil) {
			t.Fatalf("op %d %s: error = %v, want %v", i, what, got, want)
		}
	}
	for i := 0; i+1 < len(ops); i += 2 {
		op, arg := ops[i]%9, int(ops[i+1])
		switch op {
		case 0: // Post
			var w error
			switch {
			case m.closed:
				w = ErrClosed
			case m.free() == 0:
				w = ErrFull
			default:
				m.events = append(m.events, next)
			}
			want(i, "Post", q.Post(next), w)
			next++
		case 1: // PostBatch
			evs := seq(next, arg%(depth+3))
			next += len(evs)
			n, err := q.PostBatch(evs)
			wn, w := min(len(evs), m.free()), error(nil)
			if m.closed {
				wn, w = 0, ErrClosed
			} else if wn < len(evs) {
				w = ErrFull
			}
			m.events = append(m.events, evs[:wn]...)
			want(i, "PostBatch", err, w)
			if n != wn {
				t.Fatalf("op %d PostBatch(%d) = %d, want %d", i, len(evs), n, wn)
			}
		case 2, 3: // TryDequeue, Dequeue poll
			evs := make([]int, arg%(depth+3))
			var n int
			var w error
			wn := min(len(evs), len(m.events))
			if op == 2 {
				n = q.TryDequeue(evs)
			} else {
				mn := 0
				if len(evs) > 0 {
					mn = arg / 7 % (len(evs) + 1)
				}
				n, err = q.Dequeue(evs, mn, 0)
				switch {
				case mn > depth:
					// A minimum the queue can never hold: refused,
					// nothing moved.
					w, wn = ErrInvalid, 0
				case m.closed && len(m.events) == 0:
					w = ErrClosed
				case !m.closed && len(m.events) < mn:
					w = ErrTimeout
				}
				want(i, "Dequeue", err, w)
			}
			if diff := cmp.Diff(m.events[:wn], evs[:n], cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("op %d dequeue (-want +got):\n%s", i, diff)
			}
			m.events = m.events[wn:]
		case 4: // Reserve
			k := arg % (depth + 2)
			var w error
			switch {
			case m.closed:
				w = ErrClosed
			case k > m.free():
				w = ErrFull
			default:
				m.reserved += k
			}
			want(i, "Reserve", q.Reserve(k), w)
		case 5: // Unreserve
			k := arg % (m.reserved + 1)
			q.Unreserve(k)
			m.reserved -= k
		case 6: // PostReserved, or PostReservedBatch for one arg in four
			if arg%4 == 3 {
				evs := seq(next, arg/4%(depth+2))
				next += len(evs)
				var w error
				switch {
				case len(evs) == 0:
				case len(evs) > m.reserved:
					w = ErrInvalid
				case m.closed:
					m.reserved -= len(evs)
					w = ErrClosed
				default:
					m.reserved -= len(evs)
					m.events = append(m.events, evs...)
				}
				want(i, "PostReservedBatch", q.PostReservedBatch(evs), w)
				continue
			}
			var w error
			switch {
			case m.reserved == 0:
				w = ErrInvalid
			case m.closed:
				m.reserved--
				w = ErrClosed
			default:
				m.reserved--
				m.events = append(m.events, next)
			}
			want(i, "PostReserved", q.PostReserved(next), w)
			next++
		case 7: // Close, rarely
			if arg%8 != 0 {
				continue
			}
			var w error
			if m.closed {
				w = ErrClosed
			}
			m.closed = true
			want(i, "Close", q.Close(), w)
		case 8: // Unreserve too many must panic and change nothing
			k := m.reserved + 1 + arg%3
			func() {
				defer func() {
					if recover() == nil {
						t.Fatalf("op %d Unreserve(%d) with %d reserved did not panic", i, k, m.reserved)
					}
				}()
				q.Unreserve(k)
			}()
		}
		if q.Len() != len(m.events) || q.Reserved() != m.reserved {
			t.Fatalf("op %d (%d): Len, Reserved = %d, %d; want %d, %d", i, op, q.Len(), q.Reserved(), len(m.events), m.reserved)
		}
	}
}

func FuzzQueueModel(f *testing.F) {
	f.Add(uint8(4), []byte{0, 0, 0, 0, 2, 3, 0, 0, 1, 9, 3, 12})
	f.Add(uint8(3), []byte{4, 2, 0, 0, 0, 0, 6, 0, 6, 0, 6, 0, 5, 1, 2, 5})
	f.Add(uint8(1), []byte{1, 5, 7, 0, 0, 0, 2, 1, 3, 1, 8, 0})
	f.Fuzz(func(t *testing.T, depth uint8, ops []byte) {
		runModel(t, 1+int(depth%16), ops)
	})
}

// TestQueueModelRandom runs the model check on random operations, wrapping
// the ring many times.
func TestQueueModelRandom(t *testing.T) {
	for s := range 20 {
		seed := uint64(s + 1)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0))
			ops := make([]byte, 4000)
			for i := range ops {
				ops[i] = byte(rng.UintN(256))
			}
			runModel(t, 1+rng.IntN(12), ops)
		})
	}
}
