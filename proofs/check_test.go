package proofs

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/exsgo/exs/dynproto"
	"github.com/exsgo/exs/internal/dynproto/sim"
)

// TestCheckWorkersAgree checks that the exploration, and so every figure and
// trace it reports, does not depend on the number of workers.
func TestCheckWorkersAgree(t *testing.T) {
	spec := mustSpec(t, smokeConfigs[0])
	var results []Result
	for _, workers := range []int{1, 2, 5} {
		res, err := Check(checkContext(t), spec, Options{Workers: workers})
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, res)
	}
	for i, res := range results[1:] {
		if diff := cmp.Diff(results[0], res, cmpopts.IgnoreFields(Result{}, "Elapsed")); diff != "" {
			t.Errorf("result with more workers (run %d) differs (-want +got):\n%s", i+1, diff)
		}
	}
	if results[0].States < 1000 || results[0].Quiescent == 0 || results[0].CaughtUp[1] == 0 {
		t.Errorf("smoke configuration explored too little: %+v", results[0])
	}
}

// TestCheckFindsDeadlock checks the checker end to end on a configuration
// whose application deadlocks by design: in direct-only mode a send waits
// for an ADVERT, and the receiver never posts a recv. The shortest trace is
// the send alone.
func TestCheckFindsDeadlock(t *testing.T) {
	spec, err := ParseSpec("mode=direct-only type=stream ring=0 frames=1 a.sends=2,1")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Check(checkContext(t), spec, Options{})
	if err != nil {
		t.Fatal(err)
	}
	v := res.Violation
	if v == nil {
		t.Fatalf("no violation found in %d states", res.States)
	}
	want := []sim.Move{{End: 0, Kind: sim.MoveSend}, {End: 0, Kind: sim.MoveSend}}
	if !errors.Is(v.Err, ErrLiveness) || !cmp.Equal(v.Moves, want) {
		t.Fatalf("got %v after %v, want a liveness violation after %v", v.Err, v.Moves, want)
	}
	var b strings.Builder
	if _, _, err := Replay(spec, v.Moves, &b, false); !errors.Is(err, ErrLiveness) {
		t.Fatalf("replay: %v, want ErrLiveness\n%s", err, b.String())
	}
	if !strings.Contains(b.String(), "send 0 never completed") {
		t.Errorf("the readable trace does not say what is stranded:\n%s", b.String())
	}
}

// TestCheckFindsStarvedSender checks that the liveness check sees a sender
// starved by a receiver that stops posting recvs, once every frame has been
// delivered: the shortest trace interleaves both ends, so it also exercises
// trace rebuilding over several levels.
func TestCheckFindsStarvedSender(t *testing.T) {
	spec, err := ParseSpec("mode=dynamic type=stream ring=1 frames=1 a.sends=1,2,1 b.recvs=1")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Check(checkContext(t), spec, Options{})
	if err != nil {
		t.Fatal(err)
	}
	v := res.Violation
	if v == nil || !errors.Is(v.Err, ErrLiveness) {
		t.Fatalf("got %v, want a liveness violation", v)
	}
	w, _, err := Replay(spec, v.Moves, nil, false)
	if !errors.Is(err, ErrLiveness) {
		t.Fatalf("replay: %v, want ErrLiveness", err)
	}
	if !w.Quiescent() {
		t.Errorf("the trace does not end in a quiescent state")
	}
	// The trace is shortest: its prefix violates nothing, and no quiescent
	// state is nearer the initial state (breadth-first order).
	if _, _, err := Replay(spec, v.Moves[:len(v.Moves)-1], nil, false); err != nil {
		t.Errorf("a prefix of the shortest trace already violates: %v", err)
	}
	if len(v.Moves) < 5 {
		t.Errorf("trace of %d moves %v: too short to need the receiver", len(v.Moves), v.Moves)
	}
	t.Logf("shortest trace %d moves: %v", len(v.Moves), v.Moves)
}

func TestReplayNotEnabled(t *testing.T) {
	spec := mustSpec(t, smokeConfigs[0])
	moves := []sim.Move{{End: 1, Kind: sim.MoveDeliver}}
	if _, _, err := Replay(spec, moves, nil, false); !errors.Is(err, ErrNotEnabled) {
		t.Fatalf("Replay = %v, want ErrNotEnabled", err)
	}
	_, skipped, err := Replay(spec, moves, nil, true)
	if err != nil || skipped != 1 {
		t.Fatalf("Replay skipping = (%d, %v), want (1, nil)", skipped, err)
	}
}

func TestCheckBounds(t *testing.T) {
	spec := mustSpec(t, smokeConfigs[0])
	_, err := Check(checkContext(t), spec, Options{MaxStates: 100})
	if !errors.Is(err, ErrTooManyStates) {
		t.Errorf("Check with MaxStates 100 = %v, want ErrTooManyStates", err)
	}
	if _, err := Check(checkContext(t), Spec{Mode: dynproto.Dynamic, Type: dynproto.Stream}, Options{}); !errors.Is(err, dynproto.ErrConfig) {
		t.Errorf("Check of an invalid configuration = %v, want dynproto.ErrConfig", err)
	}
}

func TestPackKey(t *testing.T) {
	tests := []struct{ in, want []byte }{
		{nil, nil},
		{[]byte{1, 2, 3}, []byte{1, 2, 3}},
		{[]byte{0}, []byte{0, 1}},
		{[]byte{5, 0, 0, 0, 7, 0}, []byte{5, 0, 3, 7, 0, 1}},
		{make([]byte, 300), []byte{0, 255, 0, 45}},
	}
	for _, tt := range tests {
		if got := packKey(nil, tt.in); !bytes.Equal(got, tt.want) {
			t.Errorf("packKey(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// FuzzPackKey checks that packKey is one-to-one: it can be undone.
func FuzzPackKey(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0})
	f.Fuzz(func(t *testing.T, k []byte) {
		p := packKey(nil, k)
		var back []byte
		for i := 0; i < len(p); i++ {
			if p[i] != 0 {
				back = append(back, p[i])
				continue
			}
			if i+1 >= len(p) || p[i+1] == 0 {
				t.Fatalf("packKey(%v) = %v: a zero without its run length", k, p)
			}
			back = append(back, make([]byte, p[i+1])...)
			i++
		}
		if !bytes.Equal(back, k) && !(len(back) == 0 && len(k) == 0) {
			t.Fatalf("packKey(%v) = %v, which unpacks to %v", k, p, back)
		}
	})
}

func TestGraphCycle(t *testing.T) {
	m := func(k sim.MoveKind) sim.Move { return sim.Move{Kind: k} }
	// 0 -> 1 -> 2 -> 3, 0 -> 2, 1 -> 3: a diamond, no cycle.
	var g graph
	g.add(0, 1, m(sim.MoveSend))
	g.add(0, 2, m(sim.MoveRecv))
	g.add(1, 2, m(sim.MoveCopy))
	g.add(1, 3, m(sim.MoveDeliver))
	g.add(2, 3, m(sim.MoveDeliver))
	if s, loop := g.cycle(4); loop != nil {
		t.Fatalf("cycle found in an acyclic graph: state %d, %v", s, loop)
	}
	// Add 3 -> 1: the cycle 1 -> 2 -> 3 -> 1 (or 1 -> 3 -> 1).
	g.add(3, 1, m(sim.MoveWriteDone))
	s, loop := g.cycle(4)
	if loop == nil {
		t.Fatal("no cycle found")
	}
	want := map[uint32][]sim.Move{
		1: {m(sim.MoveCopy), m(sim.MoveDeliver), m(sim.MoveWriteDone)},
	}
	if diff := cmp.Diff(want[s], loop); diff != "" {
		t.Errorf("cycle from state %d mismatch (-want +got):\n%s", s, diff)
	}
}
