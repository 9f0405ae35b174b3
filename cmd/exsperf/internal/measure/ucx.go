package measure

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// UCX as an anchor: ucx_perftest (Debian package ucx-utils), a server and a
// client process of this host over shared memory and cross-memory attach
// (UCX_TLS=posix,cma,self), as exs-shm's two processes are. Each point is
// one pair of ucx_perftest processes: the client runs n iterations after w
// of warm-up and prints its figures as CSV (-v), which the point reads. n
// is chosen so that the timed iterations last about the point's interval,
// from the rate its previous round measured (the first round, from a short
// probe of the rate), and
// w so that the warm-up lasts about the point's warm-up. UCX times its
// iterations itself; the processes' start and UCX's set-up are outside it.

// UCXCommand is the program run as the UCX anchor.
const UCXCommand = "ucx_perftest"

// UCXTLS is the transports UCX may use: shared memory, cross-memory attach
// and, within a process, self.
const UCXTLS = "posix,cma,self"

// The UCX tests measured.
const (
	UCXTagBW  = "tag_bw"     // tag-matched sends and receives, streamed
	UCXPutBW  = "ucp_put_bw" // one-sided puts into the peer's memory, streamed
	UCXTagLat = "tag_lat"    // a tag-matched ping-pong
)

// UCX is the UCX anchor: the ucx_perftest it runs and the rates its points
// measured, to size their next rounds.
type UCX struct {
	path  string
	rates map[string]float64 // iterations per second, by test and size
	// ready bounds the retries of a client whose server is not
	// listening yet.
	ready time.Duration
}

// FindUCX returns the UCX anchor if ucx_perftest is on PATH, or an error
// that says it is absent.
func FindUCX() (*UCX, error) {
	p, err := exec.LookPath(UCXCommand)
	if err != nil {
		return nil, fmt.Errorf("%s not found on PATH (Debian and Ubuntu: apt install ucx-utils)", UCXCommand)
	}
	return &UCX{path: p, rates: make(map[string]float64), ready: 5 * time.Second}, nil
}

// Points are the UCX anchor's points at a size: tag_bw and ucp_put_bw,
// and at 64 B also tag_lat.
func (u *UCX) Points(base Params) []Point {
	tests := []string{UCXTagBW, UCXPutBW}
	if base.Size == 64 {
		tests = append(tests, UCXTagLat)
	}
	var pts []Point
	for _, t := range tests {
		pts = append(pts, Point{Run: UCXRunName(t), Tr: ucxTest{u, t}, Params: base})
	}
	return pts
}

// UCXRunName is the name of the runs of a UCX test.
func UCXRunName(test string) string { return "UCX " + test }

// UCXNote says what the UCX anchor is.
const UCXNote = "UCX: " + UCXCommand + " (a server and a client process) over shared memory and cross-memory attach, UCX_TLS=" + UCXTLS + "; tag_bw streams tag-matched messages, ucp_put_bw one-sided puts into the server's memory (one buffer each side, reused), tag_lat is a ping-pong (one-way latency); its own clock times its iterations, after its own warm-up iterations"

// ucxTest is one UCX test as a Transport.
type ucxTest struct {
	u    *UCX
	test string
}

func (t ucxTest) Name() string { return "ucx" }
func (t ucxTest) Describe() string {
	return UCXCommand + " " + t.test + " with UCX_TLS=" + UCXTLS
}
func (t ucxTest) Close() error { return nil }

func (t ucxTest) Open(_ context.Context, p Params) (Pair, error) {
	return &ucxPair{t: t, p: p}, nil
}

type ucxPair struct {
	t ucxTest
	p Params
}

func (up *ucxPair) Close() error { return nil }

func (up *ucxPair) PingPong(context.Context, time.Duration, time.Duration, WaitMode) ([]time.Duration, error) {
	return nil, errors.New("the UCX anchor reports no round trips of its own; its tag_lat is a stream point")
}

// ucxFigures are the final figures of a ucx_perftest client.
type ucxFigures struct {
	iters float64
	lat   float64 // overall average latency, microseconds (one way for ping-pongs)
	mibps float64 // overall bandwidth, MiB/s (UCX's MB are 2^20 bytes)
}

// Stream runs one pair of ucx_perftest processes for about warmup and d
// (the first round of a test and size after a probe of its rate).
func (up *ucxPair) Stream(ctx context.Context, warmup, d time.Duration) (Result, error) {
	u, test, size := up.t.u, up.t.test, up.p.Size
	key := test + "/" + strconv.Itoa(size)
	rate := u.rates[key]
	if rate == 0 {
		// ucx_perftest runs a number of iterations, not for a time: a
		// guess wrong by a hundred times (a loaded machine, where UCX's
		// polling processes crawl) would run for a hundred intervals. A
		// probe of ucxProbe at the guessed rate measures the rate first.
		n := max(100, int(ucxGuess(test, size)*ucxProbe.Seconds()))
		if _, err := up.round(ctx, n, max(10, n/10), ucxProbe); err != nil {
			return Result{}, err
		}
		rate = u.rates[key]
	}
	return up.round(ctx, max(100, int(rate*d.Seconds())), max(10, int(rate*warmup.Seconds())), warmup+d)
}

// ucxProbe is how long a probe of the UCX anchor's rate lasts at the
// guessed rate.
const ucxProbe = 10 * time.Millisecond

// round runs n iterations after w of warm-up, expected to last about
// expect, and notes the rate they ran at, to size the next round.
func (up *ucxPair) round(ctx context.Context, n, w int, expect time.Duration) (Result, error) {
	u, test, size := up.t.u, up.t.test, up.p.Size
	key := test + "/" + strconv.Itoa(size)
	f, cmd, err := u.run(ctx, test, size, n, w, expect)
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", cmd, err)
	}
	r := Result{Msgs: int64(f.iters), CPUSend: -1, CPURecv: -1, CPUTotal: -1, Note: cmd}
	switch test {
	case UCXTagLat:
		r.Latency = time.Duration(f.lat * 1e3)
		r.Bytes = 2 * int64(f.iters) * int64(size)
		r.Elapsed = time.Duration(2 * f.iters * f.lat * 1e3)
	default:
		r.Bytes = int64(f.iters) * int64(size)
		if f.mibps <= 0 {
			return Result{}, fmt.Errorf("%s: no bandwidth in its output", cmd)
		}
		r.Elapsed = time.Duration(float64(r.Bytes) / (f.mibps * (1 << 20)) * 1e9)
	}
	if r.Elapsed <= 0 {
		return Result{}, fmt.Errorf("%s: no time in its output", cmd)
	}
	u.rates[key] = f.iters / r.Elapsed.Seconds()
	return r, nil
}

// ucxGuess is the iterations per second a probe of test assumes.
func ucxGuess(test string, size int) float64 {
	if test == UCXTagLat {
		return 300e3 // round trips of about 3 us
	}
	return min(5e6, 10e9/float64(size)) // 5 M messages or 10 GB a second
}

// ucxEnv is the environment of the ucx_perftest processes.
func ucxEnv() []string {
	return append(os.Environ(), "UCX_TLS="+UCXTLS, "UCX_WARN_UNUSED_ENV_VARS=n")
}

// run runs a ucx_perftest server and a client of test, n iterations of
// size bytes after w of warm-up, and returns the client's figures and the
// command line that ran them. A client started before its server listens
// is refused a connection and started again, for up to u.ready; a server
// that could not listen (its port taken meanwhile) is started again on
// another port. A run that lasts sixty times expect, and at least 30 s, is
// stopped: a loaded machine can be a hundred times slower than a quiet one
// for UCX's polling processes, and UCX times its own iterations.
func (u *UCX) run(ctx context.Context, test string, size, n, w int, expect time.Duration) (ucxFigures, string, error) {
	var errs []error
	cmd := ""
	for range 3 {
		port, err := freePort()
		if err != nil {
			return ucxFigures{}, UCXCommand, err
		}
		args := []string{"127.0.0.1", "-p", port, "-t", test, "-s", strconv.Itoa(size), "-n", strconv.Itoa(n), "-w", strconv.Itoa(w), "-v"}
		cmd = fmt.Sprintf("UCX_TLS=%s %s -p %s & UCX_TLS=%s %s %s", UCXTLS, UCXCommand, port, UCXTLS, UCXCommand, strings.Join(args, " "))
		f, retry, err := u.runOnce(ctx, port, args, max(30*time.Second, 60*expect))
		if err == nil || !retry {
			return f, cmd, err
		}
		errs = append(errs, err)
	}
	return ucxFigures{}, cmd, errors.Join(errs...)
}

// runOnce runs a server on port and the client with args; retry says that
// the server did not run, so that another port may do.
func (u *UCX) runOnce(ctx context.Context, port string, args []string, limit time.Duration) (f ucxFigures, retry bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	srv := exec.CommandContext(ctx, u.path, "-p", port)
	srv.Env = ucxEnv()
	var srvOut bytes.Buffer
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		return ucxFigures{}, false, fmt.Errorf("starting the server: %w", err)
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Wait() }() // owner: runOnce, which takes srvDone
	f, retry, err = u.client(ctx, args, srvDone, &srvOut)
	if !retry { // the server is not reaped yet
		// After a client that ran the server exits by itself; after one
		// that failed it may wait for a connection for ever.
		grace := 2 * time.Second
		if err != nil {
			grace = 0
		}
		select {
		case <-srvDone:
		case <-time.After(grace):
			srv.Process.Kill()
			<-srvDone
		}
	}
	return f, retry, err
}

// client runs the client with args until it connects to the server, whose
// exit srvDone reports (retry: it exited, and was reaped), or fails
// otherwise.
func (u *UCX) client(ctx context.Context, args []string, srvDone <-chan error, srvOut *bytes.Buffer) (f ucxFigures, retry bool, err error) {
	deadline := time.Now().Add(u.ready)
	for {
		cli := exec.CommandContext(ctx, u.path, args...)
		cli.Env = ucxEnv()
		var out, stderr bytes.Buffer
		cli.Stdout, cli.Stderr = &out, &stderr
		err := cli.Run()
		if err == nil {
			f, err := parseUCX(out.String())
			return f, false, err
		}
		if ctx.Err() != nil {
			return ucxFigures{}, false, ctx.Err()
		}
		select {
		case serr := <-srvDone:
			return ucxFigures{}, true, fmt.Errorf("the server exited (%v): %s", serr, lastLine(srvOut.String()))
		default:
		}
		said := stderr.String() + out.String()
		if !strings.Contains(said, "Connection refused") || time.Now().After(deadline) {
			return ucxFigures{}, false, fmt.Errorf("%v: %s", err, lastLine(said))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// parseUCX reads the final figures of a ucx_perftest client's -v output:
// its last line of eight numbers (iterations, typical, average and overall
// latency in us, average and overall bandwidth in MiB/s, average and
// overall message rate); the progress lines of its threads start with
// "[thread N]".
func parseUCX(out string) (ucxFigures, error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		fs := strings.Split(l, ",")
		if len(fs) != 8 || strings.HasPrefix(l, "[") {
			continue
		}
		var v [8]float64
		ok := true
		for j, s := range fs {
			x, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil {
				ok = false
				break
			}
			v[j] = x
		}
		if ok && v[0] > 0 {
			return ucxFigures{iters: v[0], lat: v[3], mibps: v[5]}, nil
		}
	}
	return ucxFigures{}, fmt.Errorf("no final figures in its output %q", short(lastLine(out)))
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// freePort returns a TCP port of the loopback address that was free a
// moment ago.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}
