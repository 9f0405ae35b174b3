package spin

import (
	"runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDetector(t *testing.T) {
	ms := int64(time.Millisecond)
	cpus := int64(runtime.NumCPU())
	busy, idle := cpus+3, cpus // runnable threads, the sampler included
	// at in ms; own: the process's running goroutines (1 if 0)
	type sample struct{ at, runnable, own int64 }
	for _, tc := range []struct {
		name    string
		samples []sample
		probe   []int64 // contended at these times (ms) after the samples?
		want    []bool
		n       uint64
	}{
		{"no samples", nil, []int64{0, 50}, []bool{false, false}, 0},
		{"idle", []sample{{0, idle, 0}, {10, idle, 0}, {20, idle, 0}}, []int64{21}, []bool{false}, 0},
		{"a first busy sample counts", []sample{{0, busy, 0}}, []int64{1, 99, 100}, []bool{true, true, false}, 1},
		{"one busy sample among idle ones is smoothed away", []sample{{0, idle, 0}, {10, idle, 0}, {20, busy, 0}, {30, idle, 0}}, []int64{31}, []bool{false}, 0},
		{"busy for a while", []sample{{0, idle, 0}, {10, busy, 0}, {20, busy, 0}, {30, busy, 0}}, []int64{31, 129, 131}, []bool{true, true, false}, 1},
		{"samples within a window are skipped", []sample{{0, idle, 0}, {5, 100, 0}, {10, idle, 0}}, []int64{11}, []bool{false}, 0},
		{"held, then contended again", []sample{{0, busy, 0}, {10, idle, 0}, {200, busy, 0}, {210, busy, 0}, {220, busy, 0}}, []int64{221}, []bool{true}, 2},
		{"the process's own threads beyond one do not count", []sample{{0, busy, 4}, {10, busy, 4}, {20, busy, 4}}, []int64{21}, []bool{false}, 0},
		{"its first thread does", []sample{{0, busy, 1}, {10, busy, 1}}, []int64{11}, []bool{true}, 1},
		{"busy beside the process's threads", []sample{{0, busy + 2, 3}, {10, busy + 2, 3}}, []int64{11}, []bool{true}, 1},
		{"no fewer than none", []sample{{0, 1, 5}}, []int64{1}, []bool{false}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d detector
			own := int64(1)
			d.own = func() int64 { return own }
			for _, s := range tc.samples {
				own = max(s.own, 1)
				if d.due(s.at * ms) {
					d.sample(s.at*ms, func() (int64, bool) { return s.runnable, true })
				}
			}
			var got []bool
			for _, p := range tc.probe {
				got = append(got, d.contended(p*ms))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("contended at %v ms (-want +got):\n%s", tc.probe, diff)
			}
			if n := d.n.Load(); n != tc.n {
				t.Errorf("%d contentions, want %d", n, tc.n)
			}
		})
	}
}

// TestLimitCut checks that contended CPUs cut long spins only.
func TestLimitCut(t *testing.T) {
	saved, savedNext := proc.until.Load(), proc.next.Load()
	defer func() { proc.until.Store(saved); proc.next.Store(savedNext) }()
	now := time.Now()
	proc.until.Store(int64(now.Sub(epoch)) + int64(time.Hour))
	proc.next.Store(int64(now.Sub(epoch)) + int64(time.Hour)) // no sample meanwhile
	for _, tc := range []struct{ d, want time.Duration }{
		{50 * time.Microsecond, ContendedSpin},
		{ContendedSpin, ContendedSpin},
		{time.Microsecond, time.Microsecond},
		{0, 0},
	} {
		if got := limit(tc.d, now); got != tc.want {
			t.Errorf("contended: limit(%v) = %v, want %v", tc.d, got, tc.want)
		}
	}
}

func TestParseRunnable(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0.52 0.58 0.59 3/245 12345\n", 3, true},
		{"12.00 8.10 4.00 17/1024 1\n", 17, true},
		{"0.00 0.00 0.00 0/1 1", 0, true},
		{"0.52 0.58 0.59 /245 12345", 0, false},
		{"0.52 0.58 0.59 3", 0, false},
		{"0.52 0.58 3/245", 0, false},
		{"", 0, false},
		{"0.1 0.1 0.1 9999999999/1 1", 0, false},
	} {
		v, ok := parseRunnable([]byte(tc.in))
		if diff := cmp.Diff([2]any{tc.want, tc.ok}, [2]any{v, ok}); diff != "" {
			t.Errorf("parseRunnable(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

func FuzzParseRunnable(f *testing.F) {
	f.Add([]byte("0.52 0.58 0.59 3/245 12345\n"))
	f.Add([]byte("1 2 3 /"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, ok := parseRunnable(b); ok && (v < 0 || v > 999_999_999) {
			t.Fatalf("parseRunnable(%q) = %d", b, v)
		}
	})
}

// TestRunnable reads the count where the system gives it: this thread,
// running, is one.
func TestRunnable(t *testing.T) {
	v, ok := runnable()
	if !ok {
		if runtime.GOOS == "linux" {
			t.Fatal("no runnable count from /proc/loadavg")
		}
		t.Skip("no runnable count on this system")
	}
	if v < 1 {
		t.Errorf("runnable %d, want at least this thread", v)
	}
}

// TestSampleOneAtATime checks that a sample neither reads while another
// goroutine samples nor reads before it is due, and that a failed read
// changes nothing.
func TestSampleOneAtATime(t *testing.T) {
	d := detector{own: func() int64 { return 1 }}
	reads := 0
	read := func() (int64, bool) { reads++; return 1, true }
	d.mu.Lock()
	d.sample(0, read) // another goroutine is sampling
	d.mu.Unlock()
	d.sample(0, read)
	d.sample(int64(window)-1, read) // not due
	d.sample(int64(window), func() (int64, bool) { reads++; return 1000, false })
	if reads != 2 {
		t.Errorf("%d reads, want 2", reads)
	}
	if d.contended(int64(window)) {
		t.Error("a failed read made the CPUs contended")
	}
}

// TestOwnRunning reads the runtime's count of running goroutines, without
// allocating: the caller is one.
func TestOwnRunning(t *testing.T) {
	var d detector
	d.mu.Lock()
	defer d.mu.Unlock()
	if n := d.ownRunning(); n < 1 || n > int64(runtime.GOMAXPROCS(0)) {
		t.Errorf("ownRunning() = %d, want 1 to GOMAXPROCS (%d)", n, runtime.GOMAXPROCS(0))
	}
	if a := testing.AllocsPerRun(100, func() { d.ownRunning() }); a != 0 {
		t.Errorf("ownRunning allocates %v times", a)
	}
}
