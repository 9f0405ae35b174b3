package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/exsgo/exs/cmd/exsperf/internal/measure"
)

// row is one stream measurement as reported (table and JSON). Figures that
// do not apply are null in JSON and "-" in tables.
type row struct {
	Figure    string    `json:"figure,omitempty"`
	Transport string    `json:"transport"`
	Run       string    `json:"run"` // a mode, or an anchor's name
	Size      int       `json:"size"`
	Sends     int       `json:"sends,omitempty"`
	Recvs     int       `json:"recvs,omitempty"`
	Bytes     int64     `json:"bytes"`
	Seconds   float64   `json:"seconds"`
	Virtual   bool      `json:"virtual_time,omitempty"`
	GBps      float64   `json:"gb_per_s"`
	Rounds    int       `json:"rounds,omitempty"`
	MinGBps   float64   `json:"gb_per_s_min,omitempty"`
	MaxGBps   float64   `json:"gb_per_s_max,omitempty"`
	RoundGBps []float64 `json:"gb_per_s_rounds,omitempty"` // in the order of the rounds
	MsgsPerS  float64   `json:"msgs_per_s"`
	PctDirect *float64  `json:"pct_bytes_direct"`
	PctXfers  *float64  `json:"pct_transfers_direct"`
	CPUSend   *float64  `json:"cpu_send_s_per_gb"`
	CPURecv   *float64  `json:"cpu_recv_s_per_gb"`
	CPUTotal  *float64  `json:"cpu_total_s_per_gb"`
	Note      string    `json:"note,omitempty"`
	// The warm-up each round took, in the order of the rounds, and how
	// many stopped at the cap without a steady rate.
	WarmupMs       []float64 `json:"warmup_ms_rounds,omitempty"`
	UnsteadyRounds int       `json:"unsteady_rounds,omitempty"`
	// A latency anchor's one-way latency (UCX tag_lat).
	LatencyUs *float64 `json:"latency_us_one_way,omitempty"`
}

func optional(v float64) *float64 {
	if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func makeRow(fig, tr, run string, p measure.Params, r measure.Result) row {
	rw := row{
		Figure: fig, Transport: tr, Run: run, Size: p.Size, Sends: p.Sends, Recvs: p.Recvs,
		Bytes: r.Bytes, Seconds: r.Elapsed.Seconds(), Virtual: r.Virtual,
		GBps: r.GBps(), MsgsPerS: r.MsgRate(), Rounds: r.Rounds, MinGBps: r.MinGBps, MaxGBps: r.MaxGBps, RoundGBps: r.RoundGBps,
		PctDirect: optional(r.PctDirect()),
		CPUSend:   optional(r.CPUPerGB(r.CPUSend)),
		CPURecv:   optional(r.CPUPerGB(r.CPURecv)),
		CPUTotal:  optional(r.CPUPerGB(r.CPUTotal)),
		Note:      r.Note,
	}
	if t := r.XfersDirect + r.XfersIndirect; r.HasDirect && t > 0 {
		rw.PctXfers = optional(100 * float64(r.XfersDirect) / float64(t))
	}
	for _, w := range r.RoundWarmups {
		rw.WarmupMs = append(rw.WarmupMs, float64(w)/1e6)
	}
	rw.UnsteadyRounds = r.UnsteadyRounds
	if r.Latency > 0 {
		rw.LatencyUs = optional(float64(r.Latency) / 1e3)
	}
	return rw
}

// warmups gathers the warm-ups of a table's runs, for the line that says
// how long the points took to reach a steady rate.
type warmups struct {
	taken     []time.Duration
	unsteady  []string // "SIZE RUN (N)" of the points with unsteady rounds
	nUnsteady int
}

// add counts the rounds of one point; the UCX anchor's warm-up is its own.
func (w *warmups) add(size int, pt measure.Point, r measure.Result) {
	if pt.TransportName() == "ucx" {
		return
	}
	w.taken = append(w.taken, r.RoundWarmups...)
	if r.UnsteadyRounds > 0 {
		w.nUnsteady += r.UnsteadyRounds
		w.unsteady = append(w.unsteady, fmt.Sprintf("%s %s (%d)", measure.SizeName(size), pt.Run, r.UnsteadyRounds))
	}
}

// line says how the warm-ups went: their range and median, and the points
// whose rate did not settle before max.
func (w *warmups) line(max time.Duration) string {
	if len(w.taken) == 0 {
		return ""
	}
	ts := slices.Clone(w.taken)
	slices.Sort(ts)
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/1e6) }
	l := fmt.Sprintf("warm-up: each point ran until its rate held steady (three 10 ms slices within 10%% of one another): %s-%s, median %s, over %d runs",
		ms(ts[0]), ms(ts[len(ts)-1]), ms(ts[(len(ts)-1)/2]), len(ts))
	if w.nUnsteady == 0 {
		return l + "; every run reached a steady rate"
	}
	return l + fmt.Sprintf("; %d stopped at %v without a steady rate: %s", w.nUnsteady, max, strings.Join(w.unsteady, ", "))
}

// latRow is one latency measurement: round-trip percentiles in microseconds.
type latRow struct {
	Transport string  `json:"transport"`
	Run       string  `json:"run"`
	Wait      string  `json:"wait"`
	Size      int     `json:"size"`
	Samples   int     `json:"samples"`
	Min       float64 `json:"min_us"`
	P50       float64 `json:"p50_us"`
	P99       float64 `json:"p99_us"`
	P999      float64 `json:"p999_us"`
	Mean      float64 `json:"mean_us"`
}

func makeLatRow(tr, run string, w measure.WaitMode, size int, rts []time.Duration) latRow {
	slices.Sort(rts)
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	pct := func(q float64) float64 {
		if len(rts) == 0 {
			return math.NaN()
		}
		i := int(math.Ceil(q*float64(len(rts)))) - 1
		return us(rts[max(0, min(i, len(rts)-1))])
	}
	var sum time.Duration
	for _, d := range rts {
		sum += d
	}
	r := latRow{Transport: tr, Run: run, Wait: w.String(), Size: size, Samples: len(rts),
		P50: pct(0.50), P99: pct(0.99), P999: pct(0.999)}
	if len(rts) > 0 {
		r.Min, r.Mean = us(rts[0]), us(sum)/float64(len(rts))
	}
	return r
}

// hostInfo describes the machine a report was measured on.
type hostInfo struct {
	Date       string `json:"date"`
	Go         string `json:"go"`
	OS         string `json:"os"`
	Kernel     string `json:"kernel,omitempty"`
	CPU        string `json:"cpu,omitempty"`
	CPUs       int    `json:"cpus"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	Hypervisor bool   `json:"hypervisor"`
	LoadAvg    string `json:"load_average,omitempty"` // 1, 5 and 15 minutes, when the run started
	TCPDefault string `json:"tcp_default_congestion_control"`
	CPUClock   string `json:"cpu_accounting"`
}

func readHost() hostInfo {
	h := hostInfo{
		Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), Go: runtime.Version(),
		OS: runtime.GOOS + "/" + runtime.GOARCH, CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		TCPDefault: measure.SystemCongestion(), CPUClock: measure.CPUAccounting,
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			h.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(l, ":")
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			if k == "model name" && h.CPU == "" {
				h.CPU = v
			}
			if k == "flags" && strings.Contains(" "+v+" ", " hypervisor ") {
				h.Hypervisor = true
			}
		}
	}
	return h
}

// load1 returns the one-minute load average, or 0.
func (h hostInfo) load1() float64 {
	f, _, _ := strings.Cut(h.LoadAvg, " ")
	v, _ := strconv.ParseFloat(f, 64)
	return v
}

func (h hostInfo) String() string {
	vm := ""
	if h.Hypervisor {
		vm = ", virtual machine"
	}
	cpu := h.CPU
	if cpu == "" {
		cpu = "unknown CPU"
	}
	k := ""
	if h.Kernel != "" {
		k = " " + h.Kernel
	}
	load := ""
	if h.LoadAvg != "" {
		load = ", load average " + h.LoadAvg
	}
	return fmt.Sprintf("%d CPUs (%s%s), %s%s, %s, GOMAXPROCS %d, %s%s", h.CPUs, cpu, vm, h.OS, k, h.Go, h.GOMAXPROCS, h.Date, load)
}

// report is the JSON document --json writes.
type report struct {
	Tool      string         `json:"tool"`
	Command   string         `json:"command"`
	Host      hostInfo       `json:"host"`
	Transport string         `json:"transport"`
	About     string         `json:"transport_description"`
	Params    map[string]any `json:"params"`
	Notes     []string       `json:"notes,omitempty"`
	Stream    []row          `json:"stream,omitempty"`
	Latency   []latRow       `json:"latency,omitempty"`
	Targets   *targets       `json:"targets,omitempty"` // sweep only
}

// newReport starts the report of a command that measures on tr: the
// command line, the host, the transport, notes and parameters.
func newReport(e *env, tr measure.Transport, notes []string, params map[string]any) *report {
	return &report{Tool: "exsperf", Command: e.line, Host: readHost(), Transport: tr.Name(), About: tr.Describe(), Notes: notes, Params: params}
}

func writeJSON(path string, stdout io.Writer, r *report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if path == "-" {
		_, err = stdout.Write(b)
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// table renders a markdown table; columns after the first two are right
// aligned.
type table struct {
	head  []string
	align []bool // right-aligned
	rows  [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer) {
	fmt.Fprintf(w, "| %s |\n|", strings.Join(t.head, " | "))
	for i := range t.head {
		if i < len(t.align) && t.align[i] {
			fmt.Fprint(w, "---:|")
		} else {
			fmt.Fprint(w, "---|")
		}
	}
	fmt.Fprintln(w)
	for _, r := range t.rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
	}
}

func num(v *float64, prec int) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, *v)
}

func sig(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	case v <= 0:
		return fmt.Sprintf("%g", v)
	}
	// Three significant digits, without an exponent.
	return fmt.Sprintf("%.*f", 2-int(math.Floor(math.Log10(v))), v)
}
