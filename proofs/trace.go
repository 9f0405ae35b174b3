package proofs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/exsgo/exs/internal/dynproto/sim"
)

// ErrNotEnabled reports a replayed move that is not enabled in the state the
// replay has reached. Test for it with errors.Is.
var ErrNotEnabled = errors.New("move not enabled")

// Replay runs moves from spec's initial world and checks every property
// after every step, as Check does. If out is non-nil it writes a readable
// account of the run to it: each move, the engine actions it produced, and
// both engines' phases and sequence numbers afterwards.
//
// A move that is not enabled stops the replay with an error wrapping
// ErrNotEnabled, unless skipDisabled is set: then the move is left out, so
// that a trace recorded against one engine can drive another whose choices
// differ. skipped counts the moves left out. The returned world is the state
// the replay reached (nil only if the world could not be built); err wraps
// ErrSafety, ErrLiveness or ErrEfficiency on a violation.
func Replay(spec Spec, moves []sim.Move, out io.Writer, skipDisabled bool) (w *sim.World, skipped int, err error) {
	w, err = sim.New(spec.SimConfig())
	if err != nil {
		return nil, 0, err
	}
	pr := func(format string, args ...any) {
		if out != nil {
			fmt.Fprintf(out, format, args...)
		}
	}
	if out != nil {
		w.Trace = func(s string) { pr("          %s\n", s) }
	}
	describe := func() {
		if out == nil {
			return
		}
		a, b, _ := strings.Cut(w.Describe(), " | ")
		pr("          = %s\n          = %s\n", a, b)
	}
	pr("  initial state\n")
	describe()
	if err := CheckState(w); err != nil {
		pr("  VIOLATION: %v\n", err)
		return w, 0, err
	}
	var enabled []sim.Move
	for k, m := range moves {
		enabled = w.Moves(enabled[:0])
		if !containsMove(enabled, m) {
			if skipDisabled {
				skipped++
				pr("  step %d  %v: not enabled, skipped\n", k+1, m)
				continue
			}
			return w, skipped, fmt.Errorf("%w: step %d (%v); enabled: %v", ErrNotEnabled, k+1, m, enabled)
		}
		pr("  step %d  %v\n", k+1, m)
		if err := w.Step(m); err != nil {
			err = fmt.Errorf("%w: %v", ErrSafety, err)
			pr("  VIOLATION: %v\n", err)
			return w, skipped, err
		}
		describe()
		if err := CheckState(w); err != nil {
			pr("  VIOLATION: %v\n", err)
			return w, skipped, err
		}
	}
	return w, skipped, nil
}

func containsMove(ms []sim.Move, m sim.Move) bool {
	for _, x := range ms {
		if x == m {
			return true
		}
	}
	return false
}

// Trace is a saved run: a configuration, the mutant it was found with (""
// for the normal engine) and a sequence of moves. Its text form (WriteTo,
// ParseTrace) is line-based:
//
//	# comment lines and blank lines are ignored
//	config <name>
//	spec <Spec text>
//	mutant <build tag>            (optional)
//	move A:send                   (one line per move, in order)
//
// The zero value is an empty trace with no configuration. A Trace is a
// plain value, not safe for concurrent modification.
type Trace struct {
	Config string // the configuration's name
	Spec   Spec
	Mutant string
	Moves  []sim.Move
	// Comment is written as '#' lines before the moves (WriteTo only; it
	// is not read back).
	Comment string
}

// WriteTo writes t's text form to w, implementing io.WriterTo.
func (t *Trace) WriteTo(w io.Writer) (int64, error) {
	var b strings.Builder
	for line := range strings.Lines(t.Comment) {
		b.WriteString(strings.TrimRight("# "+strings.TrimSuffix(line, "\n"), " ") + "\n")
	}
	fmt.Fprintf(&b, "config %s\nspec %v\n", t.Config, t.Spec)
	if t.Mutant != "" {
		fmt.Fprintf(&b, "mutant %s\n", t.Mutant)
	}
	for _, m := range t.Moves {
		fmt.Fprintf(&b, "move %v\n", m)
	}
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}

// maxTraceMoves bounds the moves ParseTrace accepts.
const maxTraceMoves = 1 << 20

// ParseTrace reads a Trace from its text form. It rejects unknown lines,
// unknown moves and a missing config or spec with an error matching ErrSpec.
func ParseTrace(r io.Reader) (*Trace, error) {
	t := &Trace{}
	var haveConfig, haveSpec bool
	sc := bufio.NewScanner(r)
	for lineNo := 1; sc.Scan(); lineNo++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		key, val, _ := strings.Cut(line, " ")
		val = strings.TrimSpace(val)
		switch {
		case key == "config" && !haveConfig && val != "" && !strings.ContainsAny(val, " \t"):
			t.Config, haveConfig = val, true
		case key == "spec" && !haveSpec:
			s, err := ParseSpec(val)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", lineNo, err)
			}
			t.Spec, haveSpec = s, true
		case key == "mutant" && t.Mutant == "" && val != "" && !strings.ContainsAny(val, " \t"):
			t.Mutant = val
		case key == "move":
			if len(t.Moves) >= maxTraceMoves {
				return nil, fmt.Errorf("%w: line %d: more than %d moves", ErrSpec, lineNo, maxTraceMoves)
			}
			m, err := ParseMove(val)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", lineNo, err)
			}
			t.Moves = append(t.Moves, m)
		default:
			return nil, fmt.Errorf("%w: line %d: %q", ErrSpec, lineNo, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSpec, err)
	}
	if !haveConfig || !haveSpec {
		return nil, fmt.Errorf("%w: trace without config or spec", ErrSpec)
	}
	return t, nil
}

// moveKinds lists every move kind, for parsing.
var moveKinds = []sim.MoveKind{
	sim.MoveSend, sim.MoveShutdown, sim.MoveRecv, sim.MoveDrainRecv,
	sim.MoveCopy, sim.MoveDeliver, sim.MoveWriteDone, sim.MoveClose, sim.MoveLose, sim.MoveWritesDone,
}

// ParseMove reads a move in the form sim.Move.String writes ("A:send",
// "B:deliver", ...).
func ParseMove(s string) (sim.Move, error) {
	end, kind, ok := strings.Cut(s, ":")
	if !ok || (end != "A" && end != "B") {
		return sim.Move{}, fmt.Errorf("%w: move %q", ErrSpec, s)
	}
	m := sim.Move{End: end[0] - 'A'}
	if name, arg, ok := strings.Cut(kind, "("); ok {
		arg, ok = strings.CutSuffix(arg, ")")
		if !ok {
			return sim.Move{}, fmt.Errorf("%w: move %q", ErrSpec, s)
		}
		num, wait := strings.CutSuffix(arg, "w")
		n, err := parseCount(num)
		if err != nil || n > math.MaxUint16 {
			return sim.Move{}, fmt.Errorf("%w: move %q", ErrSpec, s)
		}
		kind, m.Chosen, m.Len, m.WaitAll = name, true, uint16(n), wait
	}
	for _, k := range moveKinds {
		if k.String() == kind {
			m.Kind = k
			if m.Chosen && k != sim.MoveSend && k != sim.MoveRecv || m.WaitAll && k != sim.MoveRecv {
				return sim.Move{}, fmt.Errorf("%w: move %q", ErrSpec, s)
			}
			return m, nil
		}
	}
	return sim.Move{}, fmt.Errorf("%w: move %q", ErrSpec, s)
}
