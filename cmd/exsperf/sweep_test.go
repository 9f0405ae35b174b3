package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/exsgo/exs/cmd/exsperf/internal/measure"
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

func TestSweep(t *testing.T) {
	dir := t.TempDir()
	out := exsperf(t, append([]string{"sweep"}, append(fast, "--sizes", "64,1M", "--sends-list", "4,64", "--fig3-sizes", "64,1M",
		"--vwarmup", "100ms", "--vduration", "300ms", "--out", dir)...)...)
	for _, fig := range []string{"Targets", "Figure 1", "Figure 2", "Figure 3", "Figure 4", "Figure 5"} {
		if !strings.Contains(out, "## "+fig) {
			t.Errorf("no %s in:\n%s", fig, out)
		}
	}
	var rep report
	b, err := os.ReadFile(filepath.Join(dir, "sweep.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("sweep.json: %v", err)
	}
	checkSweepRows(t, rep.Stream)
	checkSweepTargets(t, rep.Targets, rep.Stream)
	checkSweepFigures(t, dir)
	md, err := os.ReadFile(filepath.Join(dir, "sweep.md"))
	if err != nil {
		t.Fatal(err)
	}
	checkSweepMarkdown(t, string(md), starved(rep.Stream))
}

// starved reports whether the two-CPU copy anchor moved nothing at 1 MiB
// in figure 1 (mayStarve), so that its target is not checked.
func starved(rows []row) bool {
	return slices.ContainsFunc(rows, func(r row) bool {
		return r.Figure == "fig1" && r.Size == 1<<20 && r.Bytes == 0 && mayStarve(r.Run)
	})
}

// checkSweepRows checks the rows of TestSweep's sweep: a row per point of
// figures 1, 3 and 5, figure 5's in virtual time.
func checkSweepRows(t *testing.T, rows []row) {
	t.Helper()
	count := map[string]int{}
	fig3 := map[string]int{}
	for _, r := range rows {
		count[r.Figure]++
		if r.Figure == "fig5" && !r.Virtual {
			t.Errorf("fig5 row in wall time: %+v", r)
		}
		if r.Figure == "fig3" {
			fig3[fmt.Sprintf("%d %s %d", r.Size, r.Run, r.Sends)]++
		}
	}
	if diff := cmp.Diff(map[string]int{"fig1": 2 * 7, "fig3": 2 * 3 * 2, "fig5": 2 * 3}, count); diff != "" {
		t.Errorf("rows per figure (-want +got):\n%s", diff)
	}
	for _, size := range []int{64, 1 << 20} {
		for _, m := range measure.Modes {
			for _, s := range []int{4, 64} {
				if k := fmt.Sprintf("%d %s %d", size, m, s); fig3[k] != 1 {
					t.Errorf("fig3: %d rows of %s", fig3[k], k)
				}
			}
		}
	}
}

// checkSweepTargets checks the targets of TestSweep's sweep: a ratio per
// point of figures 1, 3 and 5, and the three anchor ratios at 1 MiB, the
// last not checked if its anchor moved nothing (mayStarve).
func checkSweepTargets(t *testing.T, tg *targets, rows []row) {
	t.Helper()
	if tg == nil {
		t.Fatal("sweep.json has no targets")
	}
	anchors, missing := 3, 0
	if starved(rows) {
		anchors, missing = 2, 1
	}
	if len(tg.Points) != 2+2*2+2 || len(tg.Figures) != 3 || len(tg.Anchors) != anchors || len(tg.Missing) != missing {
		t.Fatalf("targets: %d points, %d figures, %d anchors, not checked %q", len(tg.Points), len(tg.Figures), len(tg.Anchors), tg.Missing)
	}
	for _, f := range tg.Figures {
		if f.Min == nil || f.Met == nil || *f.Met != (len(f.Below) == 0) {
			t.Errorf("target %+v", f)
		}
		for _, p := range tg.Points {
			if p.Figure == f.Figure && (p.Ratio < f.Min.Ratio || p.Ratio != p.Dynamic/p.Best) {
				t.Errorf("%s: point %+v against min %+v", f.Figure, p, *f.Min)
			}
		}
	}
	if a := tg.Anchors[0]; a.Name != "direct-only / TCP" || a.Size != 1<<20 || a.Met != (a.Ratio >= 2) {
		t.Errorf("anchor %+v", a)
	}
}

// checkSweepFigures checks the SVG files of TestSweep's sweep.
func checkSweepFigures(t *testing.T, dir string) {
	t.Helper()
	for _, f := range []string{"fig1-throughput.svg", "fig2-cpu.svg", "fig3-sends.svg", "fig4-direct.svg", "fig5-distance.svg"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		checkSVG(t, f, b)
		if n := strings.Count(string(b), "<svg"); f == "fig3-sends.svg" && n != 1+2 {
			t.Errorf("%s: %d svg elements, want a document of 2 panels", f, n)
		}
	}
}

// checkSweepMarkdown checks the sections and tables of TestSweep's
// sweep.md, with one anchor target fewer if that anchor starved.
func checkSweepMarkdown(t *testing.T, md string, starved bool) {
	t.Helper()
	anchors := 3
	if starved {
		anchors = 2
	}
	// Each section's tables: header rows and data rows.
	want := map[string][]int{
		"Targets":  {1 + 2, 1 + 3 + anchors}, // per point; the summary
		"Figure 1": {1 + 2},
		"Figure 2": {1 + 2},
		"Figure 3": {1 + 2*3},
		"Figure 4": {1 + 2},
		"Figure 5": {1 + 2},
	}
	for _, sec := range strings.Split(md, "\n## ")[1:] {
		name, _, _ := strings.Cut(sec, ":")
		name, _, _ = strings.Cut(name, ",")
		var got []int
		for _, tb := range strings.Split(sec, "\n\n") {
			if n := len(tableRows(t, tb)); n > 0 {
				got = append(got, n)
			}
		}
		if diff := cmp.Diff(want[name], got); diff != "" {
			t.Errorf("section %q: table rows (-want +got):\n%s", name, diff)
		}
		delete(want, name)
	}
	if len(want) > 0 {
		t.Errorf("sweep.md lacks %v", want)
	}
	for _, r := range tableRows(t, sectionOf(md, "Figure 3")) {
		if len(r) != 4 {
			t.Fatalf("figure 3 row %q: want size, mode and 2 sends", r)
		}
		if r[0] == "size" {
			continue
		}
		if !strings.Contains(","+strings.Join(modeNames(measure.Modes), ",")+",", ","+r[1]+",") {
			t.Errorf("figure 3 row %q: no mode %q", r, r[1])
		}
		for _, c := range r[2:] {
			if v := number(t, c); !(v > 0) {
				t.Errorf("figure 3 row %q: throughput %v", r, v)
			}
		}
	}
	for _, r := range tableRows(t, strings.Split(sectionOf(md, "Targets"), "\n\n")[1]) {
		if r[0] == "size" {
			if diff := cmp.Diff([]string{"size", "fig. 1", "fig. 3, sends 4", "fig. 3, sends 64", "fig. 5"}, r); diff != "" {
				t.Errorf("targets head (-want +got):\n%s", diff)
			}
			continue
		}
		for _, c := range r[1:] {
			if v := number(t, strings.Trim(c, "*")); !(v > 0) {
				t.Errorf("targets row %q: ratio %v", r, v)
			}
		}
	}
}

// sectionOf returns the markdown section whose heading starts with name.
func sectionOf(md, name string) string {
	for _, sec := range strings.Split(md, "\n## ")[1:] {
		if strings.HasPrefix(sec, name) {
			return sec
		}
	}
	return ""
}

func TestSweepTargets(t *testing.T) {
	rw := func(run string, gbps float64) row { return row{Run: run, GBps: gbps} }
	fig1 := newGrid([]int{64, 1 << 20}, nil)
	for _, r := range []row{rw("direct-only", 1), rw("indirect-only", 2), rw("dynamic", 1.8992), rw("copy() x2", 4), rw("TCP", 1)} {
		fig1.set(64, r.Run, r)
	}
	for _, r := range []row{rw("direct-only", 8), rw("indirect-only", 4), rw("dynamic", 9), rw("copy() x2", 8), rw("copy() x2, 2 CPUs", 4), rw("TCP", 4)} {
		fig1.set(1<<20, r.Run, r)
	}
	fig3 := newSendsGrid([]int{64, 1 << 20})
	fig3.set(64, "dynamic", 4, rw("dynamic", 1)) // only dynamic: not checked
	o := &sweepOpts{streamOpts: streamOpts{sizes: []int{64, 1 << 20}}, sendsList: []int{4}}
	tg := sweepTargets(o, fig1, fig3, nil, "TCP")
	if len(tg.Figures) != 2 || tg.Figures[1].Met != nil || tg.Figures[1].Points != 0 || len(tg.Missing) != 1 {
		t.Fatalf("figures %+v, not checked %q", tg.Figures, tg.Missing)
	}
	f := tg.Figures[0]
	if f.Points != 2 || f.Min == nil || f.Min.Size != 64 || f.Min.BestRun != "indirect-only" || len(f.Below) != 1 || *f.Met {
		t.Errorf("figure 1: %+v", f)
	}
	if len(tg.Anchors) != 3 || !tg.Anchors[0].Met || tg.Anchors[0].Ratio != 2 || tg.Anchors[1].Met || tg.Anchors[1].Ratio != 0.5 ||
		!tg.Anchors[2].Met || tg.Anchors[2].Ratio != 1 {
		t.Errorf("anchors %+v", tg.Anchors)
	}
	var md strings.Builder
	tg.write(&md)
	for _, s := range []string{"| 64 B | **0.9496** |", "| 1 MiB | 1.12 |", "1 of 2 points below 0.95: 64 B 0.9496", "| no |", "figure 3 | not measured |", "not checked: fig3: 0 of 2 points"} {
		if !strings.Contains(md.String(), s) {
			t.Errorf("no %q in:\n%s", s, md.String())
		}
	}
	if _, err := json.Marshal(tg); err != nil {
		t.Error(err)
	}
}

// checkSVG checks that b is well-formed XML with an svg root and at least one
// line drawn.
func checkSVG(t *testing.T, name string, b []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	root, lines := "", 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: not well-formed: %v", name, err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			if se.Name.Local == "polyline" {
				lines++
			}
		}
	}
	if root != "svg" || lines == 0 {
		t.Errorf("%s: root %q, %d lines", name, root, lines)
	}
}

func TestDynamicRatio(t *testing.T) {
	rw := func(run string, rounds ...float64) row {
		r := row{Run: run, RoundGBps: rounds}
		if len(rounds) > 0 {
			s := slices.Sorted(slices.Values(rounds))
			r.GBps = s[(len(s)-1)/2]
		}
		return r
	}
	tests := []struct {
		name                    string
		direct, indirect, dynam row
		want                    ratioPoint
	}{
		{"one round: ratio of the values", row{Run: "direct-only", GBps: 2}, row{Run: "indirect-only", GBps: 4}, row{Run: "dynamic", GBps: 3},
			ratioPoint{Dynamic: 3, Best: 4, BestRun: "indirect-only", Ratio: 0.75}},
		// Round 2 is slow for every run: the ratio within each round is 1,
		// although the medians come from different rounds.
		{"rounds: median of the ratios within rounds", rw("direct-only", 1, 0.1, 1), rw("indirect-only", 2, 0.5, 2.2), rw("dynamic", 2.2, 0.5, 1.8),
			ratioPoint{Dynamic: 1.8, Best: 2, BestRun: "indirect-only", Ratio: 1, RoundRatios: []float64{1.1, 1, 1.8 / 2.2}}},
		{"rounds: even count", rw("direct-only", 1, 1), rw("indirect-only", 1, 1), rw("dynamic", 0.9, 0.8),
			ratioPoint{Dynamic: 0.8, Best: 1, BestRun: "direct-only", Ratio: 0.85, RoundRatios: []float64{0.9, 0.8}}},
		{"dynamic sent nothing directly: the same path as indirect-only", row{Run: "direct-only", GBps: 5}, row{Run: "indirect-only", GBps: 2},
			row{Run: "dynamic", GBps: 1.8, PctDirect: optional(0)},
			ratioPoint{Dynamic: 1.8, Best: 5, BestRun: "direct-only", Ratio: 0.36, SameAs: "indirect-only", VsSame: 0.9}},
		// Each round, indirect-only and direct-only take turns at being the
		// faster: the max() runs ahead of either.
		{"dynamic sent all directly: against direct-only, round by round", rw("direct-only", 10, 8, 10), rw("indirect-only", 8, 10, 8),
			row{Run: "dynamic", GBps: 9, RoundGBps: []float64{9, 9, 9.5}, PctDirect: optional(99.95)},
			ratioPoint{Dynamic: 9, Best: 10, BestRun: "direct-only", Ratio: 0.9, RoundRatios: []float64{0.9, 0.9, 0.95}, SameAs: "direct-only", VsSame: 0.95}},
		{"a mix: no baseline's path", row{Run: "direct-only", GBps: 2}, row{Run: "indirect-only", GBps: 1},
			row{Run: "dynamic", GBps: 2, PctDirect: optional(50)},
			ratioPoint{Dynamic: 2, Best: 2, BestRun: "direct-only", Ratio: 1}},
	}
	for _, tt := range tests {
		got, ok := dynamicRatio("fig1", 64, 0, func(m string) (row, bool) {
			return map[string]row{"direct-only": tt.direct, "indirect-only": tt.indirect, "dynamic": tt.dynam}[m], true
		})
		tt.want.Figure, tt.want.Size = "fig1", 64
		if diff := cmp.Diff(tt.want, got, cmpopts.EquateApprox(0, 1e-9)); !ok || diff != "" {
			t.Errorf("%s: ok %v (-want +got):\n%s", tt.name, ok, diff)
		}
	}
}
