package measure

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeUCXDir returns a new directory holding testdata/ucx_perftest, a fake
// ucx_perftest: as a server (no -t) it waits until its client has run; as
// a client it refuses its first start, as a client started before its
// server listens is refused, then records its test, size, iterations,
// warm-up and UCX_TLS in the file calls beside it and prints figures as
// ucx_perftest -v does: 1 GiB/s (1024 MiB/s) and a one-way latency of
// 0.5 us.
func fakeUCXDir(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("testdata/ucx_perftest")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, UCXCommand), b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestUCX runs the UCX anchor's points with a fake ucx_perftest on PATH:
// the client started again after a refused connection, the figures read
// from its output, the command shown, a first round sized from a probe of
// the rate and the next from the first;
// and without ucx_perftest on PATH, the anchor says it is absent.
func TestUCX(t *testing.T) {
	dir := fakeUCXDir(t)
	t.Setenv("PATH", dir)
	u, err := FindUCX()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(u.Points(Params{Size: 64})); n != 3 {
		t.Errorf("%d points at 64 B, want tag_bw, ucp_put_bw and tag_lat", n)
	}
	pts := u.Points(Params{Size: 1 << 20})
	if len(pts) != 2 || pts[0].Run != "UCX tag_bw" || pts[1].Run != "UCX ucp_put_bw" {
		t.Fatalf("points at 1 MiB: %+v", pts)
	}
	ctx := context.Background()
	ms := time.Millisecond
	r, err := Measure(ctx, pts[0], 30*ms, 100*ms)
	if err != nil {
		t.Fatal(err)
	}
	// A probe of 10 ms at the guessed 10 GB/s, 100 iterations of 1 MiB
	// after 10, measures the fake's 1024 MiB/s; the round then lasts
	// about 100 ms at that rate, 102 iterations after 30.
	if want := 1024.0 * (1 << 20) / 1e9; math.Abs(r.GBps()-want) > 1e-6 || r.Msgs != 102 || r.Bytes != 102<<20 {
		t.Errorf("tag_bw: %v GB/s, %d messages, %d bytes; want %v GB/s, 102 messages", r.GBps(), r.Msgs, r.Bytes, want)
	}
	if !strings.HasPrefix(r.Note, "UCX_TLS=posix,cma,self ucx_perftest -p ") || !strings.HasSuffix(r.Note, " -t tag_bw -s 1048576 -n 102 -w 30 -v") {
		t.Errorf("command %q", r.Note)
	}
	// The next round, with the rate known, has no probe.
	if _, err := Measure(ctx, pts[0], 30*ms, 100*ms); err != nil {
		t.Fatal(err)
	}
	lat := u.Points(Params{Size: 64})[2]
	r, err = Measure(ctx, lat, 30*ms, 100*ms)
	if err != nil {
		t.Fatal(err)
	}
	if r.Latency != 500*time.Nanosecond || r.Msgs != 100000 {
		t.Errorf("tag_lat: %v one way over %d round trips, want 500ns over 100000", r.Latency, r.Msgs)
	}
	calls, err := os.ReadFile(filepath.Join(dir, "calls"))
	if err != nil {
		t.Fatal(err)
	}
	// tag_lat's probe of 3000 round trips at the guessed 300 000 a
	// second measures 1 000 000 a second (0.5 us one way).
	want := "tag_bw 1048576 100 10 posix,cma,self\ntag_bw 1048576 102 30 posix,cma,self\ntag_bw 1048576 102 30 posix,cma,self\n" +
		"tag_lat 64 3000 300 posix,cma,self\ntag_lat 64 100000 30000 posix,cma,self\n"
	if string(calls) != want {
		t.Errorf("runs:\n%s\nwant:\n%s", calls, want)
	}

	t.Setenv("PATH", t.TempDir())
	if _, err := FindUCX(); err == nil || !strings.Contains(err.Error(), "ucx_perftest not found on PATH") {
		t.Errorf("FindUCX without ucx_perftest: %v", err)
	}
}

// TestParseUCX reads the final figures of ucx_perftest -v, past its
// progress lines, and refuses output without them.
func TestParseUCX(t *testing.T) {
	out := "iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr\n" +
		"[thread 0]7682,0.060,130.376,130.376,0.47,0.47,7670,7670\n" +
		"100000,0.180,4.793,14.440,12.73,4.23,208640,69251\n"
	f, err := parseUCX(out)
	if err != nil || f != (ucxFigures{iters: 100000, lat: 14.44, mibps: 4.23}) {
		t.Errorf("%+v, %v", f, err)
	}
	for _, bad := range []string{"", "iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr\n", "[thread 0]1,2,3,4,5,6,7,8\n", "0,1,2,3,4,5,6,7\n"} {
		if f, err := parseUCX(bad); err == nil {
			t.Errorf("%q: %+v", bad, f)
		}
	}
}
