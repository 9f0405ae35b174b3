package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/exsgo/exs/cmd/exsperf/internal/measure"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(measure.PeerEnv) == "1" {
		// Re-executed as "exsperf peer" by a transport with a child
		// process.
		main()
		return
	}
	goleak.VerifyTestMain(m)
}

// fast are flags that keep a run short.
var fast = []string{"-t", "20ms", "-w", "5ms", "-q", "--rounds", "1"}

// exsperf runs the command line args with a deadline and returns stdout.
func exsperf(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	if err := run(ctx, args, &out, &errb); err != nil {
		t.Fatalf("exsperf %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// tableRows returns the data rows of the markdown tables in s, split into
// cells.
func tableRows(t *testing.T, s string) [][]string {
	t.Helper()
	var rows [][]string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, "|") || strings.HasPrefix(l, "|---") || strings.Contains(l, "---:|") {
			continue
		}
		if !strings.HasSuffix(l, "|") {
			t.Fatalf("table row without a closing bar: %q", l)
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows = append(rows, cells)
	}
	return rows
}

// number parses a table cell; "-" is NaN.
func number(t *testing.T, cell string) float64 {
	t.Helper()
	if cell == "-" {
		return math.NaN()
	}
	v, err := strconv.ParseFloat(cell, 64)
	if err != nil {
		t.Fatalf("cell %q is not a number", cell)
	}
	return v
}

func TestCompare(t *testing.T) {
	out := exsperf(t, append(fast, "--sizes", "64,5000", "--verify", "--rounds", "3")...)
	rows := tableRows(t, out)
	head, rows := rows[0], rows[1:]
	want := []string{"size", "run", "GB/s", "range", "x copy()", "x TCP", "% direct", "CPU s/GB send", "CPU s/GB recv", "CPU s/GB total"}
	if diff := cmp.Diff(want, head); diff != "" {
		t.Errorf("header (-want +got):\n%s", diff)
	}
	if len(rows) != 2*7 {
		t.Fatalf("%d rows, want 14:\n%s", len(rows), out)
	}
	for _, r := range rows {
		if len(r) != len(want) {
			t.Fatalf("row %q has %d cells", r, len(r))
		}
		v := number(t, r[2])
		lo, hi, _ := strings.Cut(r[3], "..")
		if !(v > 0) || number(t, lo) > v || v > number(t, hi) {
			t.Errorf("row %q: throughput %v outside its range", r, v)
		}
		pct := number(t, r[6])
		switch r[1] {
		case "direct-only":
			if pct != 100 {
				t.Errorf("direct-only sent %v%% directly", pct)
			}
		case "indirect-only":
			if pct != 0 {
				t.Errorf("indirect-only sent %v%% directly", pct)
			}
		case "dynamic":
			if math.IsNaN(pct) {
				t.Errorf("dynamic without a direct share")
			}
		default:
			if !math.IsNaN(pct) {
				t.Errorf("anchor %q with a direct share", r[1])
			}
		}
	}
	for _, s := range []string{"transport: " + measure.Auto, "congestion control", "copy() x1 and x2", "path: "} {
		if !strings.Contains(out, s) {
			t.Errorf("output does not say %q:\n%s", s, out)
		}
	}
}

func TestCompareJSON(t *testing.T) {
	out := exsperf(t, append(fast, "--sizes", "1K", "--modes", "dynamic", "--tcp", "tcp-proc", "--json", "-")...)
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	var runs []string
	for _, r := range rep.Stream {
		runs = append(runs, r.Run)
		if r.Size != 1024 || !(r.GBps > 0) || r.Bytes <= 0 {
			t.Errorf("row %+v", r)
		}
		if strings.HasPrefix(r.Run, "TCP") && (r.CPUSend == nil || r.CPURecv == nil) {
			t.Errorf("two-process TCP row without each side's CPU: %+v", r)
		}
	}
	if diff := cmp.Diff([]string{measure.RunCopy1, measure.RunCopy2, measure.RunCopy2C, "TCP (2 processes)", "dynamic"}, runs); diff != "" {
		t.Errorf("runs (-want +got):\n%s", diff)
	}
	if rep.Transport != measure.Auto || rep.Host.Go == "" || rep.Host.CPUs < 1 {
		t.Errorf("report header %+v", rep)
	}
}

func TestEngine(t *testing.T) {
	out := exsperf(t, append([]string{"engine"}, append(fast, "--sizes", "64..256:4", "--sends", "4", "--recvs", "8")...)...)
	rows := tableRows(t, out)
	if len(rows) != 1+2*6 {
		t.Fatalf("%d rows, want 13:\n%s", len(rows), out)
	}
	if strings.Contains(out, "| TCP") {
		t.Errorf("engine runs the TCP anchor:\n%s", out)
	}
}

func TestRate(t *testing.T) {
	out := exsperf(t, append([]string{"rate"}, append(fast, "--sizes", "8")...)...)
	rows := tableRows(t, out)
	if len(rows) != 1+4 {
		t.Fatalf("%d rows, want 5:\n%s", len(rows), out)
	}
	for _, r := range rows[1:] {
		if v := number(t, r[2]); !(v > 0) {
			t.Errorf("row %q: rate %v", r, v)
		}
	}
}

func TestLat(t *testing.T) {
	out := exsperf(t, "lat", "-t", "30ms", "-w", "5ms", "-q", "--sizes", "64", "--wait", "block", "--json", "-")
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(rep.Latency) != 3+1 {
		t.Fatalf("%d latency rows, want 4: %+v", len(rep.Latency), rep.Latency)
	}
	for _, r := range rep.Latency {
		if r.Samples < 1 || !(r.Min > 0) || r.Min > r.P50 || r.P50 > r.P99 || r.P99 > r.P999 {
			t.Errorf("row %+v: percentiles out of order", r)
		}
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
	count := map[string]int{}
	fig3 := map[string]int{}
	for _, r := range rep.Stream {
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

	// The targets: a ratio per point of figures 1, 3 and 5, and the three
	// anchor ratios at 1 MiB.
	tg := rep.Targets
	if tg == nil {
		t.Fatal("sweep.json has no targets")
	}
	if len(tg.Points) != 2+2*2+2 || len(tg.Figures) != 3 || len(tg.Anchors) != 3 || len(tg.Missing) != 0 {
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
	md, err := os.ReadFile(filepath.Join(dir, "sweep.md"))
	if err != nil {
		t.Fatal(err)
	}
	// Each section's tables: header rows and data rows.
	want := map[string][]int{
		"Targets":  {1 + 2, 1 + 3 + 3}, // per point; the summary
		"Figure 1": {1 + 2},
		"Figure 2": {1 + 2},
		"Figure 3": {1 + 2*3},
		"Figure 4": {1 + 2},
		"Figure 5": {1 + 2},
	}
	for _, sec := range strings.Split(string(md), "\n## ")[1:] {
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
	for _, r := range tableRows(t, sectionOf(string(md), "Figure 3")) {
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
	for _, r := range tableRows(t, strings.Split(sectionOf(string(md), "Targets"), "\n\n")[1]) {
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

func TestServerClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sctx, stop := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(sctx, []string{"server", "--listen", "tcp:127.0.0.1:0"}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr)
	f := strings.Fields(line)
	addr := ""
	for _, w := range f {
		if strings.HasPrefix(w, "tcp:") {
			addr = w
		}
	}
	if addr == "" {
		t.Fatalf("server said %q", line)
	}
	var out bytes.Buffer
	err = run(ctx, []string{"client", "-t", "20ms", "-w", "5ms", "-q", "--sizes", "64,64K", "--lat", "--wait", "block", "--verify", addr}, &out, io.Discard)
	stop()
	if serr := <-done; serr != nil {
		t.Errorf("server: %v", serr)
	}
	if err != nil {
		t.Fatalf("client: %v\n%s", err, out.String())
	}
	rows := tableRows(t, out.String())
	if len(rows) != 2*(1+2) {
		t.Fatalf("%d rows, want 6:\n%s", len(rows), out.String())
	}
	for _, r := range rows[1:3] {
		if v := number(t, r[3]); !(v > 0) {
			t.Errorf("row %q: throughput %v", r, v)
		}
	}
}

// TestServerClientShm runs a server on an shm: address and a client
// against it: streams in every mode and ping-pongs, both socket ends in
// this process over the same-host provider.
func TestServerClientShm(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the same-host provider needs Linux")
	}
	dir, err := os.MkdirTemp("", "exsperf")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	addr := "shm:" + filepath.Join(dir, "s")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sctx, stop := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(sctx, []string{"server", "--addr", addr}, pw, io.Discard)
		pw.Close()
	}()
	if line, err := bufio.NewReader(pr).ReadString('\n'); err != nil || !strings.Contains(line, addr) {
		t.Fatalf("server said %q: %v", line, err)
	}
	go io.Copy(io.Discard, pr)
	var out bytes.Buffer
	err = run(ctx, []string{"client", "-t", "20ms", "-w", "5ms", "-q", "--sizes", "64,64K", "--lat", "--wait", "block", "--verify", "--addr", addr}, &out, io.Discard)
	stop()
	if serr := <-done; serr != nil {
		t.Errorf("server: %v", serr)
	}
	if err != nil {
		t.Fatalf("client: %v\n%s", err, out.String())
	}
	rows := tableRows(t, out.String())
	if len(rows) != 2+2*3+2*3 {
		t.Fatalf("%d rows, want 14:\n%s", len(rows), out.String())
	}
	for _, r := range rows[1:7] {
		if v := number(t, r[3]); !(v > 0) {
			t.Errorf("row %q: throughput %v", r, v)
		}
		pct := number(t, r[4])
		if r[1] == "direct-only" && pct != 100 || r[1] == "indirect-only" && pct != 0 || math.IsNaN(pct) {
			t.Errorf("row %q: %v%% direct", r, pct)
		}
		if cpu := number(t, r[7]); !(cpu > 0) {
			t.Errorf("row %q: CPU total %v", r, cpu)
		}
	}
	for _, r := range rows[8:] {
		if n := number(t, r[3]); !(n > 0) {
			t.Errorf("latency row %q without round trips", r)
		}
	}
	if !strings.Contains(out.String(), "cross-memory attach") {
		t.Errorf("the client does not say how the provider moved the bytes:\n%s", out.String())
	}
}

func TestHelp(t *testing.T) {
	out := exsperf(t, "-h")
	for _, s := range []string{"compare", "engine", "sweep", "lat", "rate", "server", "client", "-rtt", "-bandwidth", "-sizes", "-json", "-out", "-wait", "-listen", "tcp-proc", "exs-shm", "shm:PATH"} {
		if !strings.Contains(out, s) {
			t.Errorf("help does not mention %q", s)
		}
	}
	if strings.Contains(out, "peer") {
		t.Errorf("help mentions the hidden peer subcommand")
	}
	if sub := exsperf(t, "help", "sweep"); !strings.Contains(sub, "-figures") || strings.Contains(sub, "-listen") {
		t.Errorf("help sweep:\n%s", sub)
	}
}

func TestBadCommandLines(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		usage bool   // a usage error (exit 2)
		want  string // in the message
	}{
		{[]string{"--bogus"}, true, "bogus"},
		{[]string{"frobnicate"}, true, "unknown subcommand"},
		{[]string{"-t", "-1s"}, true, "duration"},
		{[]string{"--sizes", "12Q"}, true, "bad size"},
		{[]string{"--sizes", "1M..64"}, true, "empty range"},
		{[]string{"--modes", "fast"}, true, "unknown mode"},
		{[]string{"--transport", "carrier-pigeon"}, true, "unknown transport"},
		{[]string{"--tcp", "udp"}, true, "--tcp"},
		{[]string{"--sends", "0"}, true, "--sends"},
		{[]string{"extra"}, true, "unknown subcommand"},
		{[]string{"compare", "extra"}, true, "unexpected argument"},
		{[]string{"sweep", "--figures", "7"}, true, "no figure 7"},
		{[]string{"sweep", "--bandwidth", "fast"}, true, "bad bandwidth"},
		{[]string{"lat", "--wait", "sometimes"}, true, "bad wait mode"},
		{[]string{"client"}, true, "one address"},
		{[]string{"client", "--addr", "shm:x", "shm:y"}, true, "one address"},
		{[]string{"client", "--sends", "0", "shm:x"}, true, "--sends"},
		{[]string{"client", "--modes", "fast", "shm:x"}, true, "unknown mode"},
		{[]string{"client", "exs+iwarp:x"}, true, "no such exs provider"},
		{[]string{"client", "inproc:x"}, true, "cannot reach another process"},
		{[]string{"client", "exs+inproc:x"}, true, "cannot reach another process"},
		{[]string{"server", "--listen", "nonsense"}, true, "bad address"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := run(ctx, tc.args, io.Discard, io.Discard)
			if err == nil {
				t.Fatal("no error")
			}
			if got := errors.As(err, new(usageError)); got != tc.usage {
				t.Errorf("usage error %v, want %v: %v", got, tc.usage, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

func TestParseSizes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
	}{
		{"64", []int{64}},
		{"4K,1MiB,2g", []int{4096, 1 << 20, 2 << 30}},
		{"64..1K", []int{64, 128, 256, 512, 1024}},
		{"64..1M:4", []int{64, 256, 1024, 4096, 16384, 65536, 262144, 1 << 20}},
		{"1..10:3,7B", []int{1, 3, 9, 7}},
	} {
		got, err := parseSizes(tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%q (-want +got):\n%s", tc.in, diff)
		}
	}
	for _, bad := range []string{"", "0", "-1", "3X", "4G", "1..2:1", "8..4"} {
		if v, err := parseSizes(bad); err == nil {
			t.Errorf("%q parsed as %v", bad, v)
		}
	}
}

func TestParseBandwidth(t *testing.T) {
	for in, want := range map[string]float64{"10G": 10e9, "10Gbit/s": 10e9, "1.5g": 1.5e9, "500M": 500e6, "64k": 64e3, "0": 0, "100": 100} {
		if got, err := parseBandwidth(in); err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "fast", "-1G"} {
		if v, err := parseBandwidth(bad); err == nil {
			t.Errorf("%q parsed as %v", bad, v)
		}
	}
}

func TestLatencyPercentiles(t *testing.T) {
	var rts []time.Duration
	for i := 1000; i >= 1; i-- {
		rts = append(rts, time.Duration(i)*time.Microsecond)
	}
	got := makeLatRow("x", "y", measure.WaitBlock, 8, rts)
	want := latRow{Transport: "x", Run: "y", Wait: "blocking", Size: 8, Samples: 1000, Min: 1, P50: 500, P99: 990, P999: 999, Mean: 500.5}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestSig(t *testing.T) {
	for v, want := range map[float64]string{1234: "1234", 12.34: "12.3", 1.234: "1.23", 0.2: "0.200", 0.0123: "0.0123", 2.49e-5: "0.0000249", 0: "0", math.NaN(): "-"} {
		if got := sig(v); got != want {
			t.Errorf("sig(%v) = %q, want %q", v, got, want)
		}
	}
}

// TestCompareFallback makes the same-host transport unable to start (its
// temporary directory cannot be made) and checks that the default run
// falls back to the in-process provider and says why.
func TestCompareFallback(t *testing.T) {
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "missing"))
	out := exsperf(t, append(fast, "--sizes", "4096", "--modes", "dynamic", "--tcp", "off")...)
	for _, s := range []string{"could not run here", "in-process provider", "| 4 KiB | dynamic |"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "transport: "+measure.Auto) {
		t.Errorf("output claims the %s transport:\n%s", measure.Auto, out)
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
