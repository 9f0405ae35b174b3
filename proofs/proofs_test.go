package proofs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/exsgo/exs/internal/dynproto/hook"
	"github.com/exsgo/exs/internal/dynproto/sim"
)

func TestMain(m *testing.M) {
	// The checker keeps every visited state's key alive: collecting less
	// often than the default (GOGC=100) saves about 30% of the CPU time
	// (docs/proofs.md).
	// A soft limit keeps the larger heap in check on a shared machine; the
	// deep run's largest configuration needs about 9 GiB.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(300)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		limit := int64(4 << 30)
		if deep() {
			limit = 12 << 30
		}
		debug.SetMemoryLimit(limit)
	}
	os.Exit(m.Run())
}

// maxStates bounds every check: the configurations are finite, so reaching
// it means a configuration is larger than intended, and the test fails.
const maxStates = 40_000_000

// checkContext returns a context that ends a little before the test's
// deadline, so that a check too long for -timeout fails with a message
// instead of a panic.
func checkContext(t *testing.T) context.Context {
	t.Helper()
	ctx := t.Context()
	if d, ok := t.Deadline(); ok {
		c, cancel := context.WithDeadline(ctx, d.Add(-10*time.Second))
		t.Cleanup(cancel)
		ctx = c
	}
	return ctx
}

// summary is one row of a run's table.
type summary struct {
	name string
	res  Result
}

func logTable(t *testing.T, rows []summary) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%-28s %10s %11s %5s %9s %9s %5s %6s %8s\n", "config", "states", "transitions", "depth", "quiescent", "caught-up", "phase", "direct", "time")
	var states, trans int
	var total time.Duration
	for _, r := range rows {
		fmt.Fprintf(&b, "%-28s %10d %11d %5d %9d %9d %5d %6v %8s\n", r.name, r.res.States, r.res.Transitions, r.res.MaxDepth,
			r.res.Quiescent, r.res.CaughtUp[1], r.res.MaxPhase, r.res.DirectAgain[0], r.res.Elapsed.Round(10*time.Millisecond))
		states += r.res.States
		trans += r.res.Transitions
		total += r.res.Elapsed
	}
	fmt.Fprintf(&b, "%-28s %10d %11d %5s %9s %9s %5s %6s %8s\n", "total", states, trans, "", "", "", "", "", total.Round(10*time.Millisecond))
	t.Logf("summary (caught-up: states where B's receiver is caught up; direct: A's sender went direct again after an indirect phase)\n%s", b.String())
}

// TestExhaustive checks every configuration of this run exhaustively
// against the normal engine.
func TestExhaustive(t *testing.T) {
	if m := hook.Active; m != "" {
		t.Skipf("built with mutant %s: TestMutantCaught hunts it", m)
	}
	var rows []summary
	for _, c := range configsFor(t) {
		t.Run(c.name, func(t *testing.T) {
			spec := mustSpec(t, c)
			res, err := Check(checkContext(t), spec, Options{MaxStates: maxStates})
			rows = append(rows, summary{c.name, res})
			t.Logf("%v\nstates %d, transitions %d, max depth %d, quiescent %d, caught up %v, max phase %d, direct again %v, reached %v, %v",
				spec, res.States, res.Transitions, res.MaxDepth, res.Quiescent, res.CaughtUp, res.MaxPhase, res.DirectAgain, res.Seen, res.Elapsed)
			if err != nil {
				t.Fatal(err)
			}
			if v := res.Violation; v != nil {
				reportViolation(t, c.name, v, "bug-"+c.name)
				return
			}
			for i := range 2 {
				if expectDirectAgain(spec, i) && !res.DirectAgain[i] {
					t.Errorf("endpoint %c's sender never returns to a direct phase after an indirect one (P_S >= 3) in any of %d states: the protocol has degraded to indirect-only",
						'A'+i, res.States)
				}
			}
		})
	}
	logTable(t, rows)
}

// reportViolation fails t with v's readable trace and saves the trace as a
// regression input testdata/<file>.trace.
func reportViolation(t *testing.T, name string, v *Violation, file string) {
	t.Helper()
	var b strings.Builder
	_, _, err := Replay(v.Spec, v.Moves, &b, false)
	if err == nil {
		t.Errorf("replaying the counterexample did not reproduce the violation")
	}
	t.Errorf("config %s: %v\nshortest trace (%d moves):\n%s", name, v.Err, len(v.Moves), b.String())
	saveTrace(t, name, v, b.String(), file)
}

// saveTrace writes v as testdata/<file>.trace unless an identical file is
// already there.
func saveTrace(t *testing.T, name string, v *Violation, readable, file string) {
	t.Helper()
	tr := Trace{Config: name, Spec: v.Spec, Mutant: hook.Active, Moves: v.Moves}
	var who string
	if tr.Mutant != "" {
		who = "mutant " + tr.Mutant + ": " + mutantDescription(tr.Mutant)
	} else {
		who = "the normal engine"
	}
	tr.Comment = fmt.Sprintf("Shortest counterexample found by the proofs model checker against %s.\nViolation: %v\nAfter %d moves:\n\n%s",
		who, v.Err, len(v.Moves), strings.TrimRight(readable, "\n"))
	var b bytes.Buffer
	if _, err := tr.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", file+".trace")
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b.Bytes()) {
		return
	}
	if err := os.MkdirAll("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("saved the trace as %s", path)
}

func mutantDescription(tag string) string {
	for _, m := range hook.Mutants {
		if m.Tag == tag {
			return m.Description
		}
	}
	return "unknown mutant"
}

// TestMutantCaught runs only in a test binary built with a mutant tag
// (go test -tags mut_nophasejump -run TestMutantCaught ./proofs/): it
// checks the configurations, small first, until one shows a violation, and
// fails if none does (the mutant survived).
func TestMutantCaught(t *testing.T) {
	m := hook.Active
	if m == "" {
		t.Skip("no mutant built in (use -tags mut_...)")
	}
	cs := concatConfigs(smokeConfigs, defaultConfigs, largeConfigs)
	if deep() {
		cs = append(cs, deepConfigs...)
	}
	cs = savedFirst(t, cs, m)
	var rows []summary
	defer func() { logTable(t, rows) }()
	for _, c := range cs {
		spec := mustSpec(t, c)
		res, err := Check(checkContext(t), spec, Options{MaxStates: maxStates})
		rows = append(rows, summary{c.name, res})
		if err != nil {
			t.Fatalf("config %s: %v", c.name, err)
		}
		if v := res.Violation; v != nil {
			var b strings.Builder
			if _, _, err := Replay(v.Spec, v.Moves, &b, false); err == nil {
				t.Fatalf("config %s: replaying the counterexample did not reproduce %v", c.name, v.Err)
			}
			t.Logf("mutant %s (%s) caught in config %s after %d states: %v\nshortest counterexample (%d moves):\n%s",
				m, mutantDescription(m), c.name, res.States, v.Err, len(v.Moves), b.String())
			saveTrace(t, c.name, v, b.String(), m)
			return
		}
		t.Logf("config %s: no violation in %d states", c.name, res.States)
	}
	t.Fatalf("mutant %s (%s) SURVIVED: no violation in %d configurations", m, mutantDescription(m), len(cs))
}

// savedFirst moves to the front of cs the configuration named by the
// trace saved for mutant m, if there is one: the hunt then starts where it
// last caught the mutant (the largest configurations take minutes, the
// smaller ones that miss it seconds to tens of seconds each) and goes on
// through the rest, smallest first, if that one no longer catches it.
func savedFirst(t *testing.T, cs []config, m string) []config {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", m+".trace"))
	if err != nil {
		return cs
	}
	defer f.Close()
	tr, err := ParseTrace(f)
	if err != nil {
		t.Fatalf("the trace saved for %s: %v", m, err)
	}
	i := slices.IndexFunc(cs, func(c config) bool { return c.name == tr.Config })
	if i <= 0 {
		return cs
	}
	t.Logf("config %s first: the trace saved for %s names it", tr.Config, m)
	return slices.Concat(cs[i:i+1], cs[:i], cs[i+1:])
}

// TestRegressionTraces replays every saved counterexample. Against the
// normal engine none may violate anything: moves the normal engine does not
// enable are skipped, and the run is then continued to quiescence (taking the
// first enabled move each time), checking every property on the way. Built
// with a mutant tag, the traces saved for that mutant must still reproduce
// its violation.
func TestRegressionTraces(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.trace"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no saved traces in testdata")
	}
	mutant := hook.Active
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			tr, err := ParseTrace(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			if mutant != "" {
				if tr.Mutant != mutant {
					t.Skipf("saved for %q, built with %s", tr.Mutant, mutant)
				}
				if _, _, err := Replay(tr.Spec, tr.Moves, nil, false); err == nil || errors.Is(err, ErrNotEnabled) {
					t.Fatalf("the saved counterexample no longer shows %s's violation: %v", mutant, err)
				}
				return
			}
			var b strings.Builder
			w, skipped, err := Replay(tr.Spec, tr.Moves, &b, true)
			if err != nil {
				t.Fatalf("%v\n%s", err, b.String())
			}
			steps, err := runOut(w)
			if err != nil {
				t.Fatalf("after the trace (%d moves skipped), %d more steps: %v\n%s", skipped, steps, err, b.String())
			}
			t.Logf("%d moves replayed (%d skipped), %d more to quiescence", len(tr.Moves)-skipped, skipped, steps)
		})
	}
}

// runOut takes the first enabled move until none is, checking every
// property after each step.
func runOut(w *sim.World) (int, error) {
	var moves []sim.Move
	for steps := 0; ; steps++ {
		moves = w.Moves(moves[:0])
		if len(moves) == 0 {
			return steps, nil
		}
		if steps > 100000 {
			return steps, errors.New("no quiescent state after 100000 steps")
		}
		if err := w.Step(moves[0]); err != nil {
			return steps + 1, fmt.Errorf("%w: %v", ErrSafety, err)
		}
		if err := CheckState(w); err != nil {
			return steps + 1, err
		}
	}
}
