package eventq

import (
	"context"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// allModes lists the wait modes for tests that run under every mode.
var allModes = []WaitMode{Adaptive, BusyPoll, Notify}

// bubbleModes lists the modes that can wait inside a synctest bubble.
// BusyPoll never blocks, so the bubble's clock never moves while it waits.
var bubbleModes = []WaitMode{Adaptive, Notify}

// newQueue returns a queue closed when the test ends.
func newQueue[T any](t *testing.T, depth int, mode WaitMode) *Queue[T] {
	t.Helper()
	q, err := New[T](depth, Options{Mode: mode})
	if err != nil {
		t.Fatalf("New(%d, %v): %v", depth, mode, err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

// result is what a waiting call returned.
type result struct {
	evs []int
	err error
}

// goDequeue runs Dequeue in a goroutine and returns where its result will
// arrive.
func goDequeue(q *Queue[int], size, min int, timeout time.Duration) <-chan result {
	ch := make(chan result, 1)
	go func() {
		evs := make([]int, size)
		n, err := q.Dequeue(evs, min, timeout)
		ch <- result{evs[:n], err}
	}()
	return ch
}

// goDequeueContext runs DequeueContext in a goroutine.
func goDequeueContext(ctx context.Context, q *Queue[int], size, min int) <-chan result {
	ch := make(chan result, 1)
	go func() {
		evs := make([]int, size)
		n, err := q.DequeueContext(ctx, evs, min)
		ch <- result{evs[:n], err}
	}()
	return ch
}

// goWait runs Wait in a goroutine.
func goWait(ctx context.Context, q *Queue[int]) <-chan result {
	ch := make(chan result, 1)
	go func() { ch <- result{err: q.Wait(ctx)} }()
	return ch
}

// returned reports whether ch has a result, without waiting.
func returned(ch <-chan result) (result, bool) {
	select {
	case r := <-ch:
		return r, true
	default:
		return result{}, false
	}
}

// within runs f and fails the test, dumping all goroutines, if it does not
// finish within d. It bounds tests that run in real time and could hang.
func within(t *testing.T, d time.Duration, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("did not finish within %v; goroutines:\n%s", d, buf)
	}
}

// seq returns [from, from+n).
func seq(from, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = from + i
	}
	return s
}
