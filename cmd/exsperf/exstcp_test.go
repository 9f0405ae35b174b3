package main

import (
	"math"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCompareExsTCP measures exs to a child process over the TCP provider,
// on loopback and (as root, with iproute2) across a veth pair into another
// network namespace: a stream in every mode, every byte checked, and the
// anchors beside it.
func TestCompareExsTCP(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the TCP provider needs Linux")
	}
	for _, tc := range []struct {
		transport string
		says      string // in the transport's description
		needNetns bool
	}{
		{"exs-tcp", "on 127.0.0.1", false},
		{"exs-tcp-netns", "across a veth pair", true},
	} {
		t.Run(tc.transport, func(t *testing.T) {
			if tc.needNetns {
				if _, err := exec.LookPath("ip"); err != nil || os.Geteuid() != 0 {
					if os.Getenv("CI") == "true" {
						t.Fatal(errNoNetns)
					}
					t.Skip(errNoNetns)
				}
			}
			// Intervals of 100 ms: a 64 KiB direct-only point of 20 ms
			// saw no byte across the veth pair at a load of 22.
			out := exsperf(t, "-t", "100ms", "-w", "20ms", "-q", "--rounds", "1", "--transport", tc.transport, "--sizes", "64,64K", "--verify")
			rows := tableRows(t, out)[1:]
			var runs []string
			moved := map[string]float64{} // GB/s of the exs rows, by size
			for _, r := range rows {
				runs = append(runs, r[0]+" "+r[1])
				pct := number(t, r[6])
				switch r[1] {
				case "direct-only", "indirect-only", "dynamic":
					// One point may see no byte in its interval on a
					// loaded machine (a load of 22-29 here); the three
					// of a size together must.
					moved[r[0]] += number(t, r[2])
					if math.IsNaN(pct) || r[1] == "direct-only" && pct != 100 || r[1] == "indirect-only" && pct != 0 {
						t.Errorf("row %q: %v%% direct", r, pct)
					}
				}
			}
			for _, size := range []string{"64 B", "64 KiB"} {
				if !(moved[size] > 0) {
					t.Errorf("%s: no throughput in any mode:\n%s", size, out)
				}
			}
			want := []string{"64 B copy() x1", "64 B copy() x2", "64 B copy() x2, 2 CPUs", "64 B TCP", "64 B direct-only", "64 B indirect-only", "64 B dynamic",
				"64 KiB copy() x1", "64 KiB copy() x2", "64 KiB copy() x2, 2 CPUs", "64 KiB TCP", "64 KiB direct-only", "64 KiB indirect-only", "64 KiB dynamic"}
			if diff := cmp.Diff(want, runs); diff != "" {
				t.Errorf("runs (-want +got):\n%s\n%s", diff, out)
			}
			for _, s := range []string{"transport: " + tc.transport + ":", "TCP provider", tc.says} {
				if !strings.Contains(out, s) {
					t.Errorf("output does not say %q:\n%s", s, out)
				}
			}
		})
	}
}

// TestExsAddr: which addresses name exs across processes, and exs's
// address for them.
func TestExsAddr(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"shm:/tmp/x", "shm:/tmp/x", true},
		{"exs+shm:/tmp/x", "shm:/tmp/x", true},
		{"exs+tcp:127.0.0.1:5201", "tcp:127.0.0.1:5201", true},
		{"exs+tcp:[::1]:0", "tcp:[::1]:0", true},
		{"tcp:127.0.0.1:5201", "", false}, // the TCP anchor's
		{"exs+tcp:", "", false},
		{"shm:", "", false},
		{"127.0.0.1:5201", "", false},
	} {
		got, ok := exsAddr(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("exsAddr(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// TestDataAddr: where a server listens for its data connections.
func TestDataAddr(t *testing.T) {
	for _, tc := range []struct {
		ctl  string
		seq  int
		want string
	}{
		{"shm:/tmp/d/peer", 3, "shm:/tmp/d/peer.3"},
		{"tcp:127.0.0.1:40000", 1, "tcp:127.0.0.1:0"},
		{"tcp:[::1]:40000", 2, "tcp:[::1]:0"},
		{"tcp:10.214.7.2:5201", 9, "tcp:10.214.7.2:0"},
	} {
		if got := dataAddr(tc.ctl, tc.seq); got != tc.want {
			t.Errorf("dataAddr(%q, %d) = %q, want %q", tc.ctl, tc.seq, got, tc.want)
		}
	}
}
