package proofs

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exsgo/exs/internal/dynproto/sim"
)

// ErrTooManyStates reports that a check reached Options.MaxStates before it
// had explored every reachable state: the configuration was not verified.
// Test for it with errors.Is.
var ErrTooManyStates = errors.New("state-space bound reached before the check completed")

// Options tunes a check. The zero value checks with GOMAXPROCS workers and
// no bound on the number of states. Check only reads it.
type Options struct {
	// Workers is the number of goroutines expanding states; 0 means
	// GOMAXPROCS. The result does not depend on it.
	Workers int
	// MaxStates stops the check with ErrTooManyStates once this many
	// distinct states have been found; 0 means no bound.
	MaxStates int
	// Progress, when non-nil, is called after each breadth-first level with
	// the depth reached and the states found so far.
	Progress func(depth, states int)
}

// Result is what a check found. It is a plain value (the zero value is an
// empty check's); Violation, if set, is not shared with the checker.
type Result struct {
	States      int // distinct reachable states
	Transitions int // moves taken (edges explored, including those to states seen before)
	MaxDepth    int // length of the longest shortest path from the initial state
	Quiescent   int // distinct states with no move enabled (each one checked for liveness)
	// CaughtUp[i] counts the distinct states in which endpoint i's receiver
	// is caught up, where the efficiency invariant has something to say.
	CaughtUp [2]int
	MaxPhase int64 // highest phase any engine reached, counted from the start of its stream
	// DirectAgain[i] reports that some reachable state has endpoint i's
	// sender in a direct phase after an indirect one other than the first
	// (P_S direct and at least 3): the protocol returned to direct
	// transfers after falling back to the stream buffer.
	DirectAgain [2]bool
	// Seen is every event (sim.Events) some explored path went through:
	// what the configuration reaches.
	Seen    sim.Events
	Elapsed time.Duration
	// Violation is the first property violation found, with a shortest
	// trace leading to it (see Violation); nil if every reachable state and
	// step satisfies every property and the state graph has no cycle.
	Violation *Violation
}

// Violation is a property violation together with a shortest sequence of
// moves from the initial state that exhibits it (for a livelock: moves that
// lead to a cycle and go round it once). Replay(v.Spec, v.Moves, ...)
// replays it. It is a plain value, safe to read concurrently.
type Violation struct {
	Spec  Spec
	Moves []sim.Move
	Err   error
}

// Error describes the violation and the length of its trace.
func (v *Violation) Error() string {
	return fmt.Sprintf("violation after %d moves: %v", len(v.Moves), v.Err)
}

// Unwrap returns the property's error.
func (v *Violation) Unwrap() error { return v.Err }

// Property errors, wrapped by the error of a Violation. Safety violations
// found by the simulation itself (sim.World.Step) are wrapped by ErrSafety.
var (
	// ErrSafety: a step broke a safety property the simulation checks
	// (stream integrity, writes into the wrong buffer, stream-buffer overrun,
	// phases going back, sends completing wrongly, an engine's protocol
	// error).
	ErrSafety = errors.New("safety violated")
	// ErrLiveness: a state with no move enabled in which something is
	// stranded (a send never completes, a byte is never delivered).
	ErrLiveness = errors.New("liveness violated")
	// ErrEfficiency: a receiver that is caught up (stream buffer empty, no
	// recv pending, everything sent delivered, the stream not ended) would
	// send an ADVERT that the sender must judge stale: its S_A is not the
	// next unit to deliver, or its P_A is older than the sender's P_S (or it
	// would send none).
	ErrEfficiency = errors.New("efficiency invariant violated")
	// ErrForged: an endpoint whose peer is an adversary (Spec's forge)
	// accepted a wrong frame the peer could have sent, or refused it
	// otherwise than with a protocol error and nothing done.
	ErrForged = errors.New("forged frame not refused")
)

// CheckState checks the properties that belong to a state rather than to a
// step: liveness when no move is enabled, the efficiency invariant at both
// receivers, and, where an endpoint is an adversary, that its peer refuses
// every wrong frame it could send next. It returns an error wrapping
// ErrLiveness, ErrEfficiency or ErrForged.
//
// The efficiency invariant: whenever a receiver is caught up, the ADVERT it
// would send for its next recv is fresh: its S_A is the next unit to be
// delivered and its P_A is not before the sender's P_S, so that the sender
// will use it. Without it the protocol stays safe but may never go direct
// again after an indirect phase (or, with the held-recv hint, deadlock),
// which no safety property can see. The simulation judges both without the
// receiver's own bookkeeping (sim.World.CheckCaughtUp).
func CheckState(w *sim.World) error {
	if w.Quiescent() {
		if err := w.Finished(); err != nil {
			return fmt.Errorf("%w: %v", ErrLiveness, err)
		}
	}
	for i := range 2 {
		if err := w.CheckCaughtUp(i); err != nil {
			return fmt.Errorf("%w: %v", ErrEfficiency, err)
		}
	}
	if err := w.CheckForgeries(); err != nil {
		return fmt.Errorf("%w: %v", ErrForged, err)
	}
	return nil
}

// node is a state waiting to be expanded.
type node struct {
	w  *sim.World
	id uint32
}

// succ is one successor found while expanding a level.
type succ struct {
	parent uint32
	move   sim.Move
	to     uint32 // the state reached, if it was found at an earlier level
	w      *sim.World
	key    string
	err    error   // a violation reached by this move (the state is not kept)
	caught [2]bool // endpoint i's receiver is caught up in it
	quiet  bool    // no move is enabled in it
}

// chunk is the work unit of a level's expansion.
const chunk = 64

// Check explores every state reachable from spec's initial world, breadth
// first, and checks every property on every state and step. It returns an
// error only if the world cannot be built, a bound in opt was reached, or ctx
// ended first (the error then wraps ctx.Err()); a property violation is
// reported in Result.Violation with a shortest trace. The Result returned
// with an error describes the part explored.
//
// Once every state is explored, Check also looks for a cycle in the state
// graph: with none, every execution ends in a quiescent state, so checking
// liveness there covers every execution. A cycle is reported as a liveness
// violation (a livelock) whose trace leads to the cycle and goes round it
// once; that trace is not necessarily a shortest one.
//
// States are identified by their exact canonical encoding
// (sim.World.AppendKey), so two states are merged only if they are equal.
// The exploration order, and so the reported trace, does not depend on
// opt.Workers.
func Check(ctx context.Context, spec Spec, opt Options) (Result, error) {
	start := time.Now()
	var res Result
	w0, err := sim.New(spec.SimConfig())
	if err != nil {
		return res, err
	}
	workers := opt.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	visited := map[string]uint32{string(packKey(nil, w0.AppendKey(nil))): 0}
	// parent[id] and via[id] lead back from state id to the initial state.
	parent := []uint32{0}
	via := []sim.Move{{}}
	// The state graph, every transition from, to, by move, in the order
	// the states were expanded (so sorted by from).
	var g graph
	violation := func(id uint32, last []sim.Move, err error) {
		res.Violation = &Violation{Spec: spec, Moves: append(pathTo(parent, via, id), last...), Err: err}
	}
	res.States = 1
	observe(&res, w0)
	if err := CheckState(w0); err != nil {
		violation(0, nil, err)
		res.Elapsed = time.Since(start)
		return res, nil
	}
	if w0.Quiescent() {
		res.Quiescent++
	}
	for i, c := range caughtUpAt(w0) {
		if c {
			res.CaughtUp[i]++
		}
	}

	frontier := []node{{w: w0, id: 0}}
	for depth := 0; len(frontier) > 0; depth++ {
		res.MaxDepth = depth
		if err := ctx.Err(); err != nil {
			res.Elapsed = time.Since(start)
			return res, fmt.Errorf("check stopped at depth %d after %d states: %w", depth, res.States, err)
		}
		out := expand(ctx, frontier, visited, workers)
		if err := ctx.Err(); err != nil {
			res.Elapsed = time.Since(start)
			return res, fmt.Errorf("check stopped at depth %d after %d states: %w", depth, res.States, err)
		}
		frontier = nil
		var next []node
		for _, c := range out {
			for k := range c {
				sc := &c[k]
				res.Transitions++
				if sc.w == nil {
					g.add(sc.parent, sc.to, sc.move) // a state seen at an earlier level
					continue
				}
				if errors.Is(sc.err, ErrSafety) {
					violation(sc.parent, []sim.Move{sc.move}, sc.err)
					res.Elapsed = time.Since(start)
					return res, nil
				}
				if to, dup := visited[sc.key]; dup {
					g.add(sc.parent, to, sc.move)
					continue
				}
				id := uint32(len(parent))
				visited[sc.key] = id
				g.add(sc.parent, id, sc.move)
				parent = append(parent, sc.parent)
				via = append(via, sc.move)
				res.States++
				if sc.err != nil {
					violation(id, nil, sc.err)
					res.Elapsed = time.Since(start)
					return res, nil
				}
				for i, c := range sc.caught {
					if c {
						res.CaughtUp[i]++
					}
				}
				observe(&res, sc.w)
				if sc.quiet {
					res.Quiescent++
				}
				next = append(next, node{w: sc.w, id: id})
				if opt.MaxStates > 0 && res.States >= opt.MaxStates {
					res.Elapsed = time.Since(start)
					return res, fmt.Errorf("%w: %d states at depth %d", ErrTooManyStates, res.States, depth+1)
				}
			}
		}
		frontier = next
		if opt.Progress != nil {
			opt.Progress(depth+1, res.States)
		}
	}
	visited = nil
	if id, loop := g.cycle(res.States); loop != nil {
		violation(id, loop, fmt.Errorf("%w: livelock: a cycle of %d moves leads back to the state it starts from, so an execution can go on forever", ErrLiveness, len(loop)))
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// pathTo returns the moves that lead from the initial state to state id.
func pathTo(parent []uint32, via []sim.Move, id uint32) []sim.Move {
	var ms []sim.Move
	for ; id != 0; id = parent[id] {
		ms = append(ms, via[id])
	}
	for i, j := 0, len(ms)-1; i < j; i, j = i+1, j-1 {
		ms[i], ms[j] = ms[j], ms[i]
	}
	return ms
}

// graph is a state graph: its edges, sorted by the state they leave.
type graph struct {
	from, to []uint32
	move     []sim.Move
}

func (g *graph) add(from, to uint32, m sim.Move) {
	g.from = append(g.from, from)
	g.to = append(g.to, to)
	g.move = append(g.move, m)
}

// cycle looks for a cycle in the graph of n states, all reachable from state
// 0, by depth-first search. It returns nil if there is none; otherwise a
// state on a cycle and the moves that go round it.
func (g *graph) cycle(n int) (uint32, []sim.Move) {
	// start[s] is the index of the first edge leaving s.
	start := make([]uint32, n+1)
	for i, f := range g.from {
		if i > 0 && f < g.from[i-1] {
			panic("proofs: state graph edges out of order")
		}
		start[f+1]++
	}
	for s := 1; s <= n; s++ {
		start[s] += start[s-1]
	}
	const (
		white = iota
		grey  // on the DFS path
		black // done
	)
	colour := make([]uint8, n)
	type frame struct{ s, next uint32 }
	stack := []frame{{0, start[0]}}
	colour[0] = grey
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		if top.next == start[top.s+1] {
			colour[top.s] = black
			stack = stack[:len(stack)-1]
			continue
		}
		e := top.next
		top.next++
		t := g.to[e]
		switch colour[t] {
		case white:
			colour[t] = grey
			stack = append(stack, frame{t, start[t]})
		case grey:
			// Back edge: the path from t to the top, then e, is a cycle.
			k := len(stack) - 1
			for stack[k].s != t {
				k--
			}
			var loop []sim.Move
			for _, f := range stack[k:] {
				loop = append(loop, g.move[f.next-1])
			}
			return t, loop
		}
	}
	return 0, nil
}

// observe records what a new state shows about phases, counted from the
// start of each stream.
func observe(res *Result, w *sim.World) {
	res.Seen |= w.Seen()
	for i := range 2 {
		ps, pr := w.RelPhases(i)
		res.MaxPhase = max(res.MaxPhase, ps, pr)
		if ps%2 == 1 && ps >= 3 {
			res.DirectAgain[i] = true
		}
	}
}

// packKey appends to b a shorter encoding of the state key k, in which every
// run of zero bytes becomes a zero and the run's length. The encoding is
// one-to-one, so states stay identified exactly; it halves the memory the
// visited set takes (keys are mostly small numbers and zero padding).
func packKey(b, k []byte) []byte {
	for i := 0; i < len(k); {
		if k[i] != 0 {
			b = append(b, k[i])
			i++
			continue
		}
		j := i + 1
		for j < len(k) && k[j] == 0 && j-i < 255 {
			j++
		}
		b = append(b, 0, byte(j-i))
		i = j
	}
	return b
}

// expand computes the successors of every state in frontier, in order, with
// the given number of goroutines (all of which have returned when it
// returns). visited is only read. When ctx ends, the remaining chunks are
// left empty.
func expand(ctx context.Context, frontier []node, visited map[string]uint32, workers int) [][]succ {
	n := (len(frontier) + chunk - 1) / chunk
	out := make([][]succ, n)
	work := func(k int) {
		if ctx.Err() != nil {
			return
		}
		var moves []sim.Move
		var raw, key []byte
		var res []succ
		for _, nd := range frontier[k*chunk : min(len(frontier), (k+1)*chunk)] {
			moves = nd.w.Moves(moves[:0])
			for j, m := range moves {
				c := nd.w
				if j < len(moves)-1 {
					c = nd.w.Clone()
				}
				sc := succ{parent: nd.id, move: m}
				if err := c.Step(m); err != nil {
					sc.err = fmt.Errorf("%w: %v", ErrSafety, err)
					sc.w = c
					res = append(res, sc)
					continue
				}
				raw = c.AppendKey(raw[:0])
				key = packKey(key[:0], raw)
				if to, seen := visited[string(key)]; seen {
					sc.to = to
					res = append(res, sc)
					continue
				}
				sc.w, sc.key = c, string(key)
				sc.err = CheckState(c)
				sc.quiet = c.Quiescent()
				sc.caught = caughtUpAt(c)
				res = append(res, sc)
			}
		}
		out[k] = res
	}
	if workers <= 1 || n <= 1 {
		for k := range n {
			work(k)
		}
		return out
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1)) - 1
				if k >= n {
					return
				}
				work(k)
			}
		}()
	}
	wg.Wait()
	return out
}

func caughtUpAt(w *sim.World) (c [2]bool) {
	for i := range 2 {
		c[i] = w.CaughtUp(i)
	}
	return c
}
