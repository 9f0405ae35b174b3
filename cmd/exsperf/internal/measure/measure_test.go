package measure

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/exsgo/exs/dynproto"
	"github.com/google/go-cmp/cmp"
)

// TestWindow walks a window through its edges: the interval starts at the
// first check at or after the warm-up and ends at the first check at least
// d after that start, however far apart the checks are, once something
// moved in it; an interval in which nothing moved goes on until something
// does, or until it is ten times as long.
func TestWindow(t *testing.T) {
	ms := time.Millisecond
	type step struct {
		el    time.Duration
		bytes int64
		want  int
	}
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"moving", []step{
			{0, 0, edgeNone}, {9 * ms, 1, edgeNone}, {13 * ms, 2, edgeStart}, {13 * ms, 2, edgeNone},
			{32 * ms, 3, edgeNone}, {33 * ms, 4, edgeEnd}, {50 * ms, 5, edgeNone},
		}},
		{"starved until 40 ms", []step{
			{13 * ms, 2, edgeStart}, {33 * ms, 2, edgeNone}, {39 * ms, 2, edgeNone}, {40 * ms, 3, edgeEnd},
		}},
		{"starved throughout", []step{
			{13 * ms, 2, edgeStart}, {33 * ms, 2, edgeNone}, {212 * ms, 2, edgeNone}, {213 * ms, 2, edgeEnd},
		}},
	} {
		w := window{warmup: 10 * ms, d: 20 * ms}
		for _, s := range c.steps {
			if got := w.check(s.el, s.bytes); got != s.want {
				t.Errorf("%s: check(%v, %d) = %d, want %d", c.name, s.el, s.bytes, got, s.want)
			}
		}
	}
	if z := (window{}); z.check(0, 0) != edgeStart || z.check(0, 0) != edgeEnd {
		t.Error("a window of no warm-up and no length does not start and end at once")
	}
}

// fakeStream drives a window on a fake clock: a check every step, the
// bytes moved at rate(el) bytes per second in between. It returns the
// elapsed time of the start edge (-1 if none within limit) and the window.
func fakeStream(w window, step, limit time.Duration, rate func(el time.Duration) float64) (time.Duration, window) {
	var bytes float64
	for el := time.Duration(0); el <= limit; el += step {
		if w.check(el, int64(bytes)) == edgeStart {
			return el, w
		}
		bytes += rate(el) * step.Seconds()
	}
	return -1, w
}

// TestWindowSteady walks the steady-rate warm-up on a fake clock: it starts
// the interval once three 10 ms slices agree within 10%, not before the
// minimum, and at the cap, marked unsteady, when the rate never settles.
func TestWindowSteady(t *testing.T) {
	ms := time.Millisecond
	const gb = 1e9
	for _, c := range []struct {
		name         string
		warmup, max  time.Duration
		step         time.Duration
		rate         func(el time.Duration) float64
		start        time.Duration
		wantUnsteady bool
	}{
		// A steady rate from the first byte: three slices at 30 ms,
		// the minimum.
		{"steady", 30 * ms, 300 * ms, ms, func(time.Duration) float64 { return 10 * gb }, 30 * ms, false},
		// Steady at once but a minimum of 50 ms: the minimum holds.
		{"minimum", 50 * ms, 300 * ms, ms, func(time.Duration) float64 { return 10 * gb }, 50 * ms, false},
		// A tenth of the rate for 20 ms, half of it until 45 ms, then
		// full speed: the slice across the last change is between the
		// two, so the first three full-speed slices end at 80 ms. (A
		// slow phase of three slices or more would pass for steady: the
		// warm-up does not replace populated memory.)
		{"steps", 30 * ms, 300 * ms, ms, func(el time.Duration) float64 {
			switch {
			case el < 20*ms:
				return gb
			case el < 45*ms:
				return 5 * gb
			}
			return 10 * gb
		}, 80 * ms, false},
		// A rate rising 5% a slice never settles within 10% over three
		// slices: the cap ends the warm-up, unsteady.
		{"rising", 30 * ms, 200 * ms, ms, func(el time.Duration) float64 {
			return gb * math.Pow(1.05, float64(el/(10*ms)))
		}, 200 * ms, true},
		// Alternating fast and slow slices: unsteady at the cap.
		{"noisy", 30 * ms, 150 * ms, ms, func(el time.Duration) float64 {
			if el/(10*ms)%2 == 0 {
				return 5 * gb
			}
			return 10 * gb
		}, 150 * ms, true},
		// Checks 7 ms apart: slices are as long as the checks make them.
		{"coarse checks", 30 * ms, 300 * ms, 7 * ms, func(time.Duration) float64 { return 10 * gb }, 42 * ms, false},
		// A cap at or below the minimum: a fixed warm-up, however the
		// rate moves.
		{"fixed", 40 * ms, 0, ms, func(el time.Duration) float64 { return float64(el) }, 40 * ms, false},
		// Nothing moves: never steady, stopped at the cap.
		{"stalled", 30 * ms, 100 * ms, ms, func(time.Duration) float64 { return 0 }, 100 * ms, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			start, w := fakeStream(newWindow(c.warmup, c.max, 10*ms), c.step, time.Second, c.rate)
			if start != c.start || w.start != c.start || w.unsteady != c.wantUnsteady {
				t.Errorf("started at %v (window %v), unsteady %v; want %v, %v", start, w.start, w.unsteady, c.start, c.wantUnsteady)
			}
			if w.check(w.start+10*ms, w.startB+1) != edgeEnd {
				t.Error("no end edge d after the start")
			}
		})
	}
}

func TestParseModes(t *testing.T) {
	got, err := ParseModes("direct, indirect,dynamic,direct-only,indirect-only")
	want := []dynproto.Mode{dynproto.DirectOnly, dynproto.IndirectOnly, dynproto.Dynamic, dynproto.DirectOnly, dynproto.IndirectOnly}
	if diff := cmp.Diff(want, got); err != nil || diff != "" {
		t.Errorf("%v (-want +got):\n%s", err, diff)
	}
	for _, bad := range []string{"", "fast", "dynamic,", "direct only"} {
		if v, err := ParseModes(bad); err == nil || !strings.Contains(err.Error(), "unknown mode") {
			t.Errorf("%q: %v, %v", bad, v, err)
		}
	}
}

func TestParseWait(t *testing.T) {
	for in, want := range map[string]WaitMode{"busy": WaitBusy, "busy-poll": WaitBusy, " poll ": WaitBusy,
		"block": WaitBlock, "blocking": WaitBlock, "notify": WaitBlock, "adaptive": WaitAdaptive} {
		if got, err := ParseWait(in); err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "inline", "busy,block", "sometimes"} {
		if w, err := ParseWait(bad); err == nil || !strings.Contains(err.Error(), "bad wait mode") {
			t.Errorf("%q: %v, %v", bad, w, err)
		}
	}
	for w, s := range map[WaitMode]string{WaitBlock: "blocking", WaitBusy: "busy-poll", WaitInline: "inline", WaitAdaptive: "adaptive", 9: "waitMode(9)"} {
		if w.String() != s {
			t.Errorf("%d: %q, want %q", w, w, s)
		}
	}
}

// TestResult checks the figures derived from a result.
func TestResult(t *testing.T) {
	r := Result{Bytes: 3e9, Msgs: 1000, Elapsed: 2 * time.Second, HasDirect: true, BytesDirect: 1, BytesIndirect: 3}
	if r.GBps() != 1.5 || r.MsgRate() != 500 || r.PctDirect() != 25 || r.CPUPerGB(1500*time.Millisecond) != 0.5 || r.CPUPerGB(-1) != -1 {
		t.Errorf("%v GB/s, %v msg/s, %v%% direct, %v CPU s/GB", r.GBps(), r.MsgRate(), r.PctDirect(), r.CPUPerGB(1500*time.Millisecond))
	}
	if (Result{Bytes: 1, BytesDirect: 1}).PctDirect() != -1 || (Result{HasDirect: true}).PctDirect() != -1 {
		t.Error("a share of direct bytes without direct counts or bytes")
	}
}

func TestOpen(t *testing.T) {
	_, err := Open("carrier-pigeon")
	if !errors.Is(err, ErrUnknownTransport) || err.Error() != `unknown transport "carrier-pigeon" (want auto, `+Names()+")" {
		t.Errorf("Open(carrier-pigeon): %v", err)
	}
	if Names() != "exs-shm, exs-tcp, exs-tcp-netns, exs, engine, tcp, tcp-proc" {
		t.Errorf("Names() = %q", Names())
	}
	for _, name := range []string{"exs", "engine", "tcp", "tcp-proc"} {
		tr, err := Open(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if tr.Name() != name || tr.Describe() == "" {
			t.Errorf("%s: name %q, description %q", name, tr.Name(), tr.Describe())
		}
		if err := tr.Close(); err != nil {
			t.Errorf("%s: Close: %v", name, err)
		}
	}
}

func TestUnits(t *testing.T) {
	for n, want := range map[int]string{1: "1 B", 1000: "1000 B", 1024: "1 KiB", 1536: "1536 B", 3 << 20: "3 MiB", 2 << 30: "2 GiB"} {
		if got := SizeName(n); got != want {
			t.Errorf("SizeName(%d) = %q, want %q", n, got, want)
		}
	}
	for bps, want := range map[float64]string{0: "unlimited", 10e9: "10 Gbit/s", 1.5e9: "1.5 Gbit/s", 500e6: "500 Mbit/s", 64e3: "64000 bit/s"} {
		if got := BitRate(bps); got != want {
			t.Errorf("BitRate(%g) = %q, want %q", bps, got, want)
		}
	}
	if s := (Link{48 * time.Millisecond, 10e9}).String(); s != "48ms round trip at 10 Gbit/s" {
		t.Errorf("link %q", s)
	}
}

func TestParamsBuffers(t *testing.T) {
	for _, tc := range []struct {
		reuse   bool
		n, want int
	}{
		{false, 32, 32}, {false, 1, 1}, {true, 32, 1}, {true, 1, 1}, {true, 0, 0},
	} {
		if got := (Params{Reuse: tc.reuse}).Buffers(tc.n); got != tc.want {
			t.Errorf("Params{Reuse: %v}.Buffers(%d) = %d, want %d", tc.reuse, tc.n, got, tc.want)
		}
	}
}

func TestMeasureProcs(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want int
	}{
		{"", peerProcs}, {"0", 0}, {"2", 2}, {"-1", peerProcs}, {"many", peerProcs},
	} {
		t.Setenv(procsEnv, tc.env)
		if got := measureProcs(); got != tc.want {
			t.Errorf("%s=%q: %d, want %d", procsEnv, tc.env, got, tc.want)
		}
	}
	if got := procsAbout(0); !strings.Contains(got, "Go's default") {
		t.Errorf("procsAbout(0) = %q", got)
	}
}
