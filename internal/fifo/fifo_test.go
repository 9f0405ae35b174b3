package fifo

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestModel drives a Queue and a plain slice with the same random
// operations and compares them after each.
func TestModel(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	var q Queue[int]
	var model []int
	for i := range 20000 {
		switch op := rng.IntN(10); {
		case op < 5:
			q.Push(i)
			model = append(model, i)
		case op < 9 && len(model) > 0:
			if got, want := q.Pop(), model[0]; got != want {
				t.Fatalf("step %d: Pop %d, want %d", i, got, want)
			}
			model = model[1:]
		case op == 9 && len(model) > 0:
			n := rng.IntN(len(model) + 1)
			q.Truncate(n)
			model = model[:n]
		}
		c := q.Clone()
		got := make([]int, 0, c.Len())
		for j := range q.Len() {
			got = append(got, *q.At(j))
		}
		if diff := cmp.Diff(append([]int{}, model...), got); diff != "" {
			t.Fatalf("step %d (-want +got):\n%s", i, diff)
		}
		if c.Len() > 0 {
			*c.At(0) = -1
			if *q.At(0) == -1 {
				t.Fatalf("step %d: a clone shares storage", i)
			}
		}
	}
}

// TestSteadyStateNoAlloc checks that a queue whose length stays bounded
// stops allocating.
func TestSteadyStateNoAlloc(t *testing.T) {
	var q Queue[[4]int]
	for range 64 {
		q.Push([4]int{})
	}
	if n := testing.AllocsPerRun(1000, func() {
		q.Push([4]int{1})
		q.Pop()
	}); n != 0 {
		t.Errorf("%v allocations per push and pop", n)
	}
}
