package measure

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/exsgo/exs/exs"
	"github.com/exsgo/exs/verbs/shm"
	"github.com/exsgo/exs/verbs/tcp"
)

// ExsClient measures exs against an exsperf server at an address of
// a provider that crosses processes.
type ExsClient struct {
	name, about string
	addr        string
	prov        *shm.Provider

	mu    sync.Mutex // one measurement at a time
	st    *exs.Stack
	ctl   *exsCtl
	procs int    // GOMAXPROCS while measuring; 0 leaves it alone
	cma   string // what the same-host provider said of cross-memory attach
}

// DialExs returns the transport that measures exs against an exsperf server
// at addr, an address of the same-host or the TCP provider ("exs-net"): it opens the
// control connection, which Close closes.
func DialExs(ctx context.Context, addr string) (*ExsClient, error) {
	return dialExs(ctx, "exs-net", "exs sockets to an exsperf server at "+addr+" (CPU per side: RUSAGE_SELF of each process)", addr)
}

// dialExs opens the control connection to the server at addr.
func dialExs(ctx context.Context, name, about, addr string) (*ExsClient, error) {
	st, prov, err := exsStackFor(addr)
	if err != nil {
		return nil, err
	}
	t := &ExsClient{name: name, about: about, addr: addr, prov: prov}
	q, err := st.Qcreate(4)
	var s *exs.Socket
	if err == nil {
		s, err = st.Socket(exs.SockStream, ctlOptions...)
	}
	if err == nil {
		err = s.Connect(q, addr, nil)
	}
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var ev exs.Event
		ev, err = dequeueOne(cctx, q)
		cancel()
		if err == nil {
			err = ev.Err
		}
	}
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("connecting to the server at %s: %w", addr, err)
	}
	t.st, t.ctl = st, &exsCtl{ctx: context.Background(), s: s, q: q}
	return t, nil
}

func (t *ExsClient) Name() string     { return t.name }
func (t *ExsClient) Describe() string { return t.about }

// Close closes the control connection, which ends the server's session.
func (t *ExsClient) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.st == nil {
		return nil
	}
	err := t.st.Close()
	t.st = nil
	return err
}

// CMANote says how the same-host provider moved the bytes, once a
// measurement has run.
func (t *ExsClient) CMANote() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cma
}

func (t *ExsClient) Open(ctx context.Context, p Params) (Pair, error) {
	if p.Link != nil {
		return nil, errors.New("no emulated link between processes")
	}
	if p.Wait == 0 {
		p.Wait = WaitAdaptive
	}
	return &exsNetPair{t: t, p: p}, nil
}

// exsNetPair is one measurement against the server: the data connection
// lives for one Stream or PingPong.
type exsNetPair struct {
	t *ExsClient
	p Params
}

func (np *exsNetPair) Close() error { return nil }

// start sends the request, connects the data socket on a stack of its own
// and returns its end.
func (np *exsNetPair) start(ctx context.Context, test string, warmup, d time.Duration) (exsEnd, error) {
	t, p := np.t, np.p
	if t.st == nil {
		return exsEnd{}, errors.New("transport closed")
	}
	t.ctl.ctx = ctx
	req := exsRequest{request: request{Test: test, Size: p.Size, Warmup: warmup, MaxWarmup: p.MaxWarmup, Duration: d, Wait: p.Wait.String(), Verify: p.Verify, Seed: p.Seed},
		Mode: p.Mode.String(), Sends: p.Sends, Recvs: p.Recvs, Ring: p.Ring, Reuse: p.Reuse}
	if err := writeMsg(t.ctl, req); err != nil {
		return exsEnd{}, err
	}
	var rep exsReply
	if err := readMsg(t.ctl, &rep); err != nil {
		return exsEnd{}, err
	}
	if rep.Err != "" {
		return exsEnd{}, fmt.Errorf("server: %s", rep.Err)
	}
	// Over shm: a provider per data connection; its statistics are that
	// connection's.
	st, prov, err := exsStackFor(t.addr, exsSocketOptions(p, p.Wait)...)
	if err != nil {
		return exsEnd{}, err
	}
	t.prov = prov
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	e, err := exsDial(cctx, st, rep.Addr, p)
	if err != nil {
		st.Close()
		return exsEnd{}, err
	}
	return e, nil
}

// noteCMA records what the same-host provider says of the connections it
// has now.
func (t *ExsClient) noteCMA() {
	for _, c := range shmStats(t.prov) {
		if c.CMA {
			t.cma = fmt.Sprintf("the same-host provider copies with cross-memory attach (process_vm_writev/readv) or, into the peer's shared memory, with copy(); on the sender's last connection: %d one-sided copies by process_vm_writev/readv, %d by copy() into shared memory, %d ring messages, %d target copies, %d receiver sleeps", c.Direct, c.Shared, c.RingMessages, c.TargetCopies, c.Sleeps)
		} else {
			t.cma = "cross-memory attach refused (" + c.CMAError + "): the same-host provider moves every byte through its shared rings"
		}
	}
}

// setProcs sets GOMAXPROCS to t.procs, if set, and returns the function
// that restores it.
func (t *ExsClient) setProcs() func() {
	if t.procs <= 0 {
		return func() {}
	}
	old := runtime.GOMAXPROCS(t.procs)
	return func() { runtime.GOMAXPROCS(old) }
}

func (np *exsNetPair) Stream(ctx context.Context, warmup, d time.Duration) (Result, error) {
	t := np.t
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.setProcs()()
	e, err := np.start(ctx, "stream", warmup, d)
	if err != nil {
		return Result{}, err
	}
	snd := e.goSend()
	// The client's interval starts at its own warm-up edge and ends when
	// the server's reply arrives; its CPU time is scaled to the server's
	// interval, which is about as long.
	var m [2]sockMark
	timer := time.NewTimer(warmup)
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
	m[0] = sockMark{time.Now(), 0, snd.sent.Load(), processCPU(), e.s.Stats()}
	var rep exsReply
	rerr := readMsg(t.ctl, &rep)
	m[1] = sockMark{time.Now(), 0, snd.sent.Load(), processCPU(), e.s.Stats()}
	t.noteCMA()
	if os.Getenv(statsEnv) != "" {
		printStats(os.Stderr, fmt.Sprintf("%v %v sender", np.p.Mode, np.p.Size), m[0].stats, m[1].stats, shmStats(t.prov))
	}
	// Closing the stack ends the data connection, the sender's operations
	// and the server's side.
	serr := snd.end(e.st)
	closeStack(e.st) // frees the buffers, now that the sender has stopped
	switch {
	case rerr != nil:
		return Result{}, fmt.Errorf("reading the server's reply: %w", rerr)
	case rep.Err != "":
		return Result{}, fmt.Errorf("server: %s", rep.Err)
	case serr != nil:
		return Result{}, serr
	}
	r := exsDirect(m[0].stats, m[1].stats)
	r.Bytes, r.Elapsed = rep.Bytes, rep.Elapsed
	r.CPUSend, r.CPURecv, r.CPUTotal = -1, rep.CPUProc, -1
	r.addClient(m[1].at.Sub(m[0].at), m[1].msgs-m[0].msgs, cpuDelta(m[0].cpu, m[1].cpu))
	r.Note = "wait " + np.p.Wait.String()
	r.Warmup, r.Unsteady = rep.Warmed, rep.Unsteady
	return r, nil
}

func (np *exsNetPair) PingPong(ctx context.Context, warmup, d time.Duration, w WaitMode) ([]time.Duration, error) {
	if w != np.p.Wait {
		return nil, fmt.Errorf("pair opened for wait mode %v, not %v", np.p.Wait, w)
	}
	t := np.t
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.setProcs()()
	e, err := np.start(ctx, "pingpong", warmup, d)
	if err != nil {
		return nil, err
	}
	rts, err := e.ping(ctx, warmup, d)
	t.noteCMA()
	return rts, errors.Join(err, closeStack(e.st))
}

// ExsAddr returns the address of exs over a provider that crosses
// processes that s names, "shm:PATH" (or "exs+shm:PATH") or
// "exs+tcp:HOST:PORT" (exs over the TCP provider; plain "tcp:" is the TCP
// anchor's), and whether it names one.
func ExsAddr(s string) (string, bool) {
	if hp, ok := strings.CutPrefix(s, "exs+"+tcp.Scheme); ok && hp != "" {
		return tcp.Scheme + hp, true
	}
	s = strings.TrimPrefix(s, "exs+")
	if strings.HasPrefix(s, shm.Scheme) && len(s) > len(shm.Scheme) {
		return s, true
	}
	return "", false
}

// peerProcs is GOMAXPROCS in the parent and in the child while an exs-shm
// measurement runs. Each side of the TCP anchor runs on a thread of its
// own; with one P per process each exs side likewise runs on one CPU. With
// Go's default (one P per CPU) the two processes' spinning goroutines
// contend for the two CPUs of a small machine, and the kernel's time
// slices then decide the throughput: 1 MiB indirect-only 18.6-18.8 GB/s
// against 31.7-31.8 with one P (exsperf compare, 2 vCPUs, runs alternated).
const peerProcs = 1

// procsEnv, set to a number, replaces peerProcs for a run: 0 keeps Go's
// default GOMAXPROCS in both processes.
const procsEnv = "EXSPERF_PROCS"

// measureProcs is GOMAXPROCS in each process of an exs-shm or exs-tcp
// measurement: peerProcs, or what procsEnv says.
func measureProcs() int {
	if v, err := strconv.Atoi(os.Getenv(procsEnv)); err == nil && v >= 0 {
		return v
	}
	return peerProcs
}

// procsAbout describes GOMAXPROCS n (0: Go's default) in a transport's
// description.
func procsAbout(n int) string {
	if n == 0 {
		return "Go's default GOMAXPROCS in each process (" + procsEnv + "=0)"
	}
	return "GOMAXPROCS " + strconv.Itoa(n) + " in each process while it measures"
}

// exsProcTransport measures exs against a child exsperf process (the
// hidden "peer" subcommand) over the same-host provider, on an shm:
// address in a temporary directory. The child exits when its control
// connection or its stdin closes.
type exsProcTransport struct {
	*ExsClient
	dir     string
	peer    *peerProc
	cleanup func() error // after the child has gone (nil: none)
}

// startExsProc starts the child and connects to it.
func startExsProc(ctx context.Context) (_ *exsProcTransport, err error) {
	// A short directory: Unix socket paths have a limit of about 100 bytes.
	dir, err := os.MkdirTemp("", "exsperf")
	if err != nil {
		return nil, fmt.Errorf("starting the peer process: %w", err)
	}
	t := &exsProcTransport{dir: dir}
	addr := shm.Scheme + filepath.Join(dir, "peer")
	about := "exs sockets to a child exsperf process over the same-host provider (shm: a socket in a new temporary directory), exs's queue pairs with relaxed write placement; send and recv buffers and stream buffers from Stack.Alloc (the provider's shared memory); " + procsAbout(measureProcs()) + "; CPU per side: RUSAGE_SELF of each process"
	if err := t.start(ctx, "exs-shm", about, addr, nil); err != nil {
		return nil, err
	}
	return t, nil
}

// start starts the child with the command line via (nil: none), listening
// on addr ("exs+" taken off) and connects to the address it announces;
// after a failure it closes t.
func (t *exsProcTransport) start(ctx context.Context, name, about, addr string, via []string) (err error) {
	defer func() {
		if err != nil {
			err = errors.Join(err, t.Close())
		}
	}()
	var line string
	if t.peer, line, err = startPeerVia(ctx, via, "peer", "--listen", addr, "--procs", strconv.Itoa(measureProcs())); err != nil {
		return err
	}
	want, _ := ExsAddr(addr)
	got, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if !ok || (!strings.HasSuffix(want, ":0") && got != want) {
		return fmt.Errorf("the peer process did not start (it said %q)", short(line))
	}
	if t.ExsClient, err = dialExs(ctx, name, about, got); err != nil {
		return err
	}
	t.procs = measureProcs()
	return nil
}

// notes says which path the same-host provider used.
func (t *exsProcTransport) notes() []string {
	if n := t.CMANote(); n != "" {
		return []string{n}
	}
	return nil
}

// Close ends the control connection and the child (it exits when either
// its control connection or its stdin closes; it is killed if it has not
// within peerExitTimeout), removes the directory and runs the cleanup. It
// returns every error of these steps.
func (t *exsProcTransport) Close() error {
	var errs []error
	if t.ExsClient != nil {
		errs = append(errs, t.ExsClient.Close())
	}
	if t.peer != nil {
		errs = append(errs, t.peer.Close())
		t.peer = nil
	}
	if t.dir != "" {
		errs = append(errs, os.RemoveAll(t.dir))
		t.dir = ""
	}
	if t.cleanup != nil {
		errs = append(errs, t.cleanup())
		t.cleanup = nil
	}
	return errors.Join(errs...)
}
