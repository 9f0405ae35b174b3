package verbs

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/exsgo/exs/eventq"
)

// BenchmarkCQ measures the completion path a queue pair and its poller
// share, per completion: reserve a slot, post the completion into it
// (what a queue pair does per work request), and poll, in batches of 1 and
// of 64 completions per Poll. The ns/wc metric is the cost per completion.
func BenchmarkCQ(b *testing.B) {
	for _, batch := range []int{1, 64} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			d, _ := Open(nopProvider{})
			cq, err := d.CreateCQ(batch, CQOptions{})
			if err != nil {
				b.Fatal(err)
			}
			wcs := make([]WC, batch)
			b.ReportAllocs()
			for b.Loop() {
				if err := cq.reserve(batch); err != nil {
					b.Fatal(err)
				}
				for i := range batch {
					cq.push(WC{WRID: uint64(i), Status: StatusSuccess, Opcode: WCWrite})
				}
				if n := cq.Poll(wcs); n != batch {
					b.Fatalf("polled %d", n)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/wc")
		})
	}
}

func TestCQNotify(t *testing.T) {
	d, _ := Open(nopProvider{})
	cq, _ := d.CreateCQ(4, CQOptions{})
	cq.reserve(3)
	cq.push(WC{WRID: 1})
	select {
	case <-cq.Notify():
		t.Fatal("notification without RequestNotify")
	default:
	}
	cq.RequestNotify()
	cq.push(WC{WRID: 2})
	cq.push(WC{WRID: 3})
	select {
	case <-cq.Notify():
	default:
		t.Fatal("no notification after RequestNotify")
	}
	select {
	case <-cq.Notify():
		t.Fatal("two notifications for one RequestNotify")
	default:
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	wcs := make([]WC, 4)
	if n := cq.Poll(wcs); n != 3 {
		t.Errorf("after Close polled %d completions, want 3", n)
	}
}

// nopProvider is a provider that connects nothing.
type nopProvider struct{}

func (nopProvider) Listen(string) (LinkListener, error) { return nil, ErrInvalid }
func (nopProvider) Dial(context.Context, string, *Endpoint, []byte) (Link, []byte, error) {
	return nil, nil, ErrInvalid
}

// TestCQOptions checks that CreateCQ takes every wait mode, refuses an
// unknown one and a negative spin time with ErrInvalid, and that the zero
// options wait adaptively.
func TestCQOptions(t *testing.T) {
	d, _ := Open(nopProvider{})
	for _, tc := range []struct {
		opts CQOptions
		want eventq.WaitMode // 0: refused
	}{
		{CQOptions{}, eventq.Adaptive},
		{CQOptions{Wait: WaitAdaptive, SpinTime: time.Millisecond}, eventq.Adaptive},
		{CQOptions{Wait: WaitBusyPoll}, eventq.BusyPoll},
		{CQOptions{Wait: WaitNotify}, eventq.Notify},
		{CQOptions{Wait: WaitNotify + 1}, 0},
		{CQOptions{SpinTime: -time.Nanosecond}, 0},
	} {
		cq, err := d.CreateCQ(4, tc.opts)
		switch {
		case tc.want == 0 && !errors.Is(err, ErrInvalid):
			t.Errorf("CreateCQ(%+v) = %v, want ErrInvalid", tc.opts, err)
		case tc.want != 0 && err != nil:
			t.Errorf("CreateCQ(%+v): %v", tc.opts, err)
		case tc.want != 0 && cq.q.Mode() != tc.want:
			t.Errorf("CreateCQ(%+v): queue mode %v, want %v", tc.opts, cq.q.Mode(), tc.want)
		}
	}
}
