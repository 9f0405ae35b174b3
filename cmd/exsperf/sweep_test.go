package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestSweepDocs draws docs/sweep again from the rows of its sweep.json and
// the command line recorded there, and compares the targets, sweep.md and
// every figure with what is in the directory: a sweep's presentation is a
// function of its rows and flags, and docs/sweep is what this code draws
// from the measurements it holds.
func TestSweepDocs(t *testing.T) {
	dir := filepath.Join("..", "..", "docs", "sweep")
	b, err := os.ReadFile(filepath.Join(dir, "sweep.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	args := strings.Fields(rep.Command)
	if len(args) < 2 || args[1] != "sweep" {
		t.Fatalf("command %q is not a sweep", rep.Command)
	}
	o := &sweepOpts{}
	fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
	o.register(fs)
	if err := fs.Parse(args[2:]); err != nil {
		t.Fatal(err)
	}
	if err := o.check(&env{}); err != nil {
		t.Fatal(err)
	}
	v := newSweepView(o, &rep)
	want := rep.Targets
	rep.Targets = sweepTargets(o, v.fig1, v.fig3, v.fig5, v.tcpRun)
	if diff := cmp.Diff(want, rep.Targets, cmpopts.IgnoreUnexported(targets{})); diff != "" {
		t.Errorf("targets (-sweep.json +computed):\n%s", diff)
	}
	md, figs := renderSweep(o, &rep, v)
	if b, err := os.ReadFile(filepath.Join(dir, "sweep.md")); err != nil || string(b) != md {
		t.Errorf("sweep.md differs (%v):\n%s", err, cmp.Diff(string(b), md))
	}
	var files []string
	for _, f := range figs {
		files = append(files, f.file)
		b, err := os.ReadFile(filepath.Join(dir, f.file))
		if err != nil {
			t.Error(err)
			continue
		}
		if got := panels(f.ps); !bytes.Equal(b, got) {
			t.Errorf("%s differs:\n%s", f.file, cmp.Diff(string(b), string(got)))
		}
	}
	svgs, _ := filepath.Glob(filepath.Join(dir, "*.svg"))
	for i := range svgs {
		svgs[i] = filepath.Base(svgs[i])
	}
	if diff := cmp.Diff(slices.Sorted(slices.Values(svgs)), slices.Sorted(slices.Values(files))); diff != "" {
		t.Errorf("figures (-in the directory +drawn):\n%s", diff)
	}
}
