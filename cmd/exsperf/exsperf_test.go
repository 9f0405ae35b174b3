package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
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

// fast are flags that keep a run short: a fixed warm-up.
var fast = []string{"-t", "20ms", "-w", "5ms", "--warmup-max", "0", "-q", "--rounds", "1"}

// fakeUCX puts a fake ucx_perftest (measure's testdata/ucx_perftest, which
// reports 1 GiB/s and a one-way latency of 0.5 us) alone on PATH for the
// rest of the test.
func fakeUCX(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("internal", "measure", "testdata", measure.UCXCommand))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, measure.UCXCommand), b, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
}

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

// mayStarve reports whether a run may move nothing in the tests' 20 ms
// intervals: the two-CPU copy anchor spins on two threads bound to CPUs 0
// and 1, and on a loaded machine, or when the runtime needs one of the two
// Ps they hold, one of them can wait out a whole interval (measure's
// TestCopyAnchors checks that it moves bytes).
func mayStarve(run string) bool { return run == measure.RunCopy2C }

// TestCompare runs the default command with the UCX anchor (a fake
// ucx_perftest) and the steady-rate warm-up.
func TestCompare(t *testing.T) {
	fakeUCX(t)
	out := exsperf(t, append(fast, "--sizes", "64,5000", "--verify", "--rounds", "3", "--warmup-max", "30ms")...)
	rows := tableRows(t, out)
	head, rows := rows[0], rows[1:]
	want := []string{"size", "run", "GB/s", "range", "x copy()", "x TCP", "x UCX", "% direct", "CPU s/GB send", "CPU s/GB recv", "CPU s/GB total"}
	if diff := cmp.Diff(want, head); diff != "" {
		t.Errorf("header (-want +got):\n%s", diff)
	}
	if len(rows) != 2*9 {
		t.Fatalf("%d rows, want 18:\n%s", len(rows), out)
	}
	for _, r := range rows {
		if len(r) != len(want) {
			t.Fatalf("row %q has %d cells", r, len(r))
		}
		v := number(t, r[2])
		lo, hi, _ := strings.Cut(r[3], "..")
		if !(v > 0 || v == 0 && mayStarve(r[1])) || number(t, lo) > v || v > number(t, hi) {
			t.Errorf("row %q: throughput %v outside its range", r, v)
		}
		if strings.HasPrefix(r[1], "UCX ") && (r[2] != "1.07" || r[6] != "1.00") {
			t.Errorf("UCX row %q: want the fake's 1.07 GB/s, 1.00 x UCX tag_bw", r)
		}
		pct := number(t, r[7])
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
	for _, s := range []string{"transport: " + measure.Auto, "congestion control", "copy() x1 and x2", "path: ",
		"note: UCX: ucx_perftest", "UCX tag_lat 64 B: one-way latency 0.500 us (median of 3 rounds, 0.500..0.500)",
		"UCX ucp_put_bw 5000 B: UCX_TLS=posix,cma,self ucx_perftest -p ", " -t ucp_put_bw -s 5000 -n ",
		"warm-up: each point ran until its rate held steady"} {
		if !strings.Contains(out, s) {
			t.Errorf("output does not say %q:\n%s", s, out)
		}
	}
}

// TestCompareJSON runs without ucx_perftest on PATH: the report says the
// UCX anchor is absent.
func TestCompareJSON(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	out := exsperf(t, append(fast, "--sizes", "1K", "--modes", "dynamic", "--tcp", "tcp-proc", "--json", "-")...)
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	var runs []string
	for _, r := range rep.Stream {
		runs = append(runs, r.Run)
		if r.Size != 1024 || !(r.GBps > 0 && r.Bytes > 0 || r.Bytes == 0 && mayStarve(r.Run)) {
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
	if !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.HasPrefix(n, "UCX anchor absent: ucx_perftest not found on PATH") }) {
		t.Errorf("no note of the absent UCX anchor: %q", rep.Notes)
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
	out := exsperf(t, append([]string{"rate"}, append(fast, "--sizes", "8", "--ucx", "off")...)...)
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

// TestRateReuse runs rate with --reuse, as ucx_perftest uses its buffers,
// over the default transport (a child process): the report says so.
func TestRateReuse(t *testing.T) {
	out := exsperf(t, append([]string{"rate"}, append(fast, "--sizes", "64", "--ucx", "off", "--reuse", "--json", "-")...)...)
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if rep.Params["reuse"] != true {
		t.Errorf("params %v: want reuse true", rep.Params)
	}
	if !slices.Contains(rep.Notes, reuseNote) {
		t.Errorf("no note of the reused buffers: %q", rep.Notes)
	}
	if len(rep.Stream) != 4 {
		t.Fatalf("%d rows, want 4: %+v", len(rep.Stream), rep.Stream)
	}
	for _, r := range rep.Stream {
		if !(r.Bytes > 0) {
			t.Errorf("row %+v moved nothing", r)
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
	var rows [][]string
	// A point of 20 ms on a loaded machine may end before the sending
	// socket publishes its counters ("-" for % direct): the client runs
	// again then, up to three times.
	for try := 1; ; try++ {
		out.Reset()
		err = run(ctx, []string{"client", "-t", "20ms", "-w", "5ms", "-q", "--sizes", "64,64K", "--lat", "--wait", "block", "--verify", "--addr", addr}, &out, io.Discard)
		if err != nil {
			break
		}
		rows = tableRows(t, out.String())
		if len(rows) != 2+2*3+2*3 {
			t.Fatalf("%d rows, want 14:\n%s", len(rows), out.String())
		}
		unpublished := slices.ContainsFunc(rows[1:7], func(r []string) bool { return r[4] == "-" })
		if !unpublished || try == 3 {
			break
		}
		t.Logf("try %d: a point without the sender's counters, again:\n%s", try, out.String())
	}
	stop()
	if serr := <-done; serr != nil {
		t.Errorf("server: %v", serr)
	}
	if err != nil {
		t.Fatalf("client: %v\n%s", err, out.String())
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
		{[]string{"rate", "--reuse", "--verify"}, true, "--reuse with --verify"},
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
	out := exsperf(t, append(fast, "--sizes", "4096", "--modes", "dynamic", "--tcp", "off", "--ucx", "off")...)
	for _, s := range []string{"could not run here", "in-process provider", "| 4 KiB | dynamic |"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "transport: "+measure.Auto) {
		t.Errorf("output claims the %s transport:\n%s", measure.Auto, out)
	}
}
