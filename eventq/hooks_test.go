package eventq

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestHooks checks when waiting operations call Options.Progress and
// Options.BeforeBlock: Progress on every round of a spin (here it posts the
// awaited event itself on its fifth call), BeforeBlock once before a wait
// blocks, never in a wait that does not block.
func TestHooks(t *testing.T) {
	type result struct {
		N           int
		Timeout     bool
		Progress    bool // called at all
		BeforeBlock int
	}
	tests := []struct {
		name    string
		opts    Options
		postsAt int // the Progress call that posts the event; 0: never
		want    result
	}{
		{"adaptive, progress posts", Options{Mode: Adaptive, SpinTime: time.Second}, 5, result{N: 1, Progress: true}},
		{"busy poll, progress posts", Options{Mode: BusyPoll}, 5, result{N: 1, Progress: true}},
		{"adaptive, nothing comes", Options{Mode: Adaptive, SpinTime: time.Millisecond}, 0, result{Timeout: true, Progress: true, BeforeBlock: 1}},
		{"notify blocks at once", Options{Mode: Notify}, 5, result{Timeout: true, BeforeBlock: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var q *Queue[int]
			calls, blocks := 0, 0
			tt.opts.Progress = func() bool {
				calls++
				if calls == tt.postsAt {
					if err := q.Post(calls); err != nil {
						t.Error(err)
					}
					return true
				}
				return false
			}
			tt.opts.BeforeBlock = func() { blocks++ }
			var err error
			if q, err = New[int](4, tt.opts); err != nil {
				t.Fatal(err)
			}
			evs := make([]int, 2)
			n, err := q.Dequeue(evs, 1, 20*time.Millisecond)
			if err != nil && !errors.Is(err, ErrTimeout) {
				t.Fatal(err)
			}
			got := result{N: n, Timeout: err != nil, Progress: calls > 0, BeforeBlock: blocks}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if n == 1 && evs[0] != tt.postsAt {
				t.Errorf("event %d, want %d", evs[0], tt.postsAt)
			}
		})
	}
}
