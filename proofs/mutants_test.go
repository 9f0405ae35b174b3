package proofs

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/exsgo/exs/internal/dynproto/hook"
)

// TestAllMutants is the mutant campaign for CI:
//
//	EXS_PROOFS_MUTANTS=1 go test -count=1 -run TestAllMutants -v ./proofs/
//
// For each mutant it builds and runs this package's tests with the mutant's
// build tag (go test -tags <tag> -run TestMutantCaught), and fails if any
// mutant survives. EXS_PROOFS_DEEP is passed on. The hunts run in
// parallel, -parallel (GOMAXPROCS by default) at a time.
func TestAllMutants(t *testing.T) {
	if os.Getenv("EXS_PROOFS_MUTANTS") == "" {
		t.Skip("set EXS_PROOFS_MUTANTS=1 to run the mutant campaign")
	}
	if hook.Active != "" {
		t.Skip("the campaign runs from a normal build")
	}
	goBin := goCommand(t)
	caught := regexp.MustCompile(`mutant \S+ \(.*\) caught in config (\S+) after (\d+) states: .*\n\s*shortest counterexample \((\d+) moves\)`)
	for _, m := range hook.Mutants {
		tag := m.Tag
		t.Run(tag, func(t *testing.T) {
			// Each hunt is one process checking on one CPU: as many run
			// at once as go test's -parallel allows (GOMAXPROCS).
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, goBin, "test", "-count=1", "-tags", tag,
				"-run", "^(TestMutantCaught|TestRegressionTraces)$", "-v", ".")
			start := time.Now()
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("mutant %s (%s) survived or the run failed after %v: %v\n%s", tag, m.Description, time.Since(start).Round(time.Second), err, out)
			}
			sm := caught.FindSubmatch(out)
			if sm == nil {
				t.Fatalf("mutant %s: the run passed but reported no counterexample:\n%s", tag, out)
			}
			t.Logf("caught (%s): config %s, %s states, counterexample of %s moves, %v",
				m.Description, sm[1], sm[2], sm[3], time.Since(start).Round(time.Second))
		})
	}
}

// goCommand finds the go command that runs the mutant builds.
func goCommand(t *testing.T) string {
	t.Helper()
	if root := os.Getenv("GOROOT"); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command to build the mutants with: %v", err)
	}
	return p
}
