package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/exsgo/exs/dynproto"
	"github.com/exsgo/exs/exs"
	"github.com/exsgo/exs/verbs/shm"
)

// exs between two processes. The client opens one control connection (an
// exs stream socket, dynamic mode) to the server's address ADDR and keeps
// it for its whole run. Each measurement is a request on it (4-byte
// big-endian length, then JSON, as for TCP) naming the test, the mode and
// the parameters; the server listens on ADDR.N (N counting its
// measurements) with that mode, answers {"addr": "ADDR.N"}, accepts one
// data connection there and runs its side of the test:
//
//   - stream: the client sends, the server receives and times Warmup then
//     Duration from its first byte; then it sends its reply (bytes,
//     interval, its own process CPU time from getrusage over the interval)
//     on the control connection and goes on receiving until the client
//     closes the data connection.
//   - pingpong: the server echoes until the client closes the data
//     connection.
//
// The server serves one control connection at a time; as a child of
// exsperf it exits when that connection (or its stdin) closes.

// exsRequest is a measurement request on the control connection.
type exsRequest struct {
	request
	Mode  string `json:"mode"`
	Sends int    `json:"sends"`
	Recvs int    `json:"recvs"`
	Ring  int    `json:"ring"`
}

// exsReply answers a request: first with the data address, then (stream)
// with the server's figures.
type exsReply struct {
	reply
	Addr string `json:"addr,omitempty"`
}

// exsCtl is a blocking byte stream over an exs socket with its own queue,
// for the control messages.
type exsCtl struct {
	ctx context.Context
	s   *exs.Socket
	q   *exs.Queue
}

// do posts one operation and waits for its event.
func (c *exsCtl) do(post func() error) (exs.Event, error) {
	if err := post(); err != nil {
		return exs.Event{}, err
	}
	ev, err := dequeueOne(c.ctx, c.q)
	if err == nil {
		err = ev.Err
	}
	return ev, err
}

func (c *exsCtl) Write(b []byte) (int, error) {
	if _, err := c.do(func() error { return c.s.Send(c.q, b, nil, 0, nil) }); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (c *exsCtl) Read(b []byte) (int, error) {
	ev, err := c.do(func() error { return c.s.Recv(c.q, b, nil, 0, nil) })
	if err != nil {
		return 0, err
	}
	if ev.N == 0 {
		return 0, io.EOF
	}
	return ev.N, nil
}

// ctlOptions are the options of control connections: small and quiet.
var ctlOptions = []exs.SocketOption{exs.WithMode(exs.ModeDynamic), exs.WithStreamBuffer(64 << 10), exs.WithWaitMode(exs.WaitNotify)}

// exsServer serves measurements over exs on an address.
type exsServer struct {
	st   *exs.Stack
	ln   *exs.Socket
	q    *exs.Queue
	addr string
	prov *shm.Provider
	log  *zap.Logger
	seq  int
}

func listenExs(addr string, log *zap.Logger) (*exsServer, error) {
	prov, err := shm.New()
	if err != nil {
		return nil, err
	}
	st, err := exs.NewStack(exs.WithProvider("shm", prov))
	if err != nil {
		return nil, err
	}
	q, err := st.Qcreate(8)
	if err != nil {
		st.Close()
		return nil, err
	}
	ln, err := st.Socket(exs.SockStream, ctlOptions...)
	if err == nil {
		err = ln.Bind(addr)
	}
	if err == nil {
		err = ln.Listen(0)
	}
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	return &exsServer{st: st, ln: ln, q: q, addr: addr, prov: prov, log: log}, nil
}

// serve handles control connections one at a time until ctx is done or,
// with once, after the first. It closes the stack before returning.
func (s *exsServer) serve(ctx context.Context, once bool) error {
	defer s.st.Close()
	stop := context.AfterFunc(ctx, func() { s.st.Close() })
	defer stop()
	for {
		if err := s.ln.Accept(s.q, nil); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("server: %w", err)
		}
		ev, err := dequeueOne(context.Background(), s.q)
		if err == nil {
			err = ev.Err
		}
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, exs.ErrClosed) {
				return nil
			}
			return fmt.Errorf("server: %w", err)
		}
		s.log.Info("session", zap.String("addr", s.addr))
		if err := s.session(ctx, ev.Accepted); err != nil && ctx.Err() == nil {
			s.log.Warn("session ended", zap.Error(err))
		}
		if once {
			return nil
		}
	}
}

// session serves the requests of one control connection until it ends.
func (s *exsServer) session(ctx context.Context, cs *exs.Socket) error {
	q, err := s.st.Qcreate(4)
	if err != nil {
		return err
	}
	defer s.st.Qdelete(q)
	defer cs.Close(q, nil)
	ctl := &exsCtl{ctx: ctx, s: cs, q: q}
	for {
		var req exsRequest
		if err := readMsg(ctl, &req); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, exs.ErrConnReset) {
				return nil
			}
			return err
		}
		if err := s.measurement(ctx, ctl, req); err != nil {
			return err
		}
	}
}

// measurement serves one request. A bad request is answered with an
// error; an error returned ends the session.
func (s *exsServer) measurement(ctx context.Context, ctl *exsCtl, req exsRequest) error {
	p, w, err := req.params()
	if err != nil {
		return writeMsg(ctl, exsReply{reply: reply{Err: err.Error()}})
	}
	s.seq++
	addr := s.addr + "." + strconv.Itoa(s.seq)
	prov, err := shm.New()
	if err != nil {
		return writeMsg(ctl, exsReply{reply: reply{Err: err.Error()}})
	}
	st, err := exs.NewStack(append(exsSocketOptions(p, w), exs.WithProvider("shm", prov))...)
	if err != nil {
		return writeMsg(ctl, exsReply{reply: reply{Err: err.Error()}})
	}
	defer closeStack(st)
	ls, err := exsListen(st, addr)
	var q *exs.Queue
	if err == nil {
		q, err = exsQueue(st, p)
	}
	if err == nil {
		err = ls.Accept(q, nil)
	}
	if err != nil {
		return writeMsg(ctl, exsReply{reply: reply{Err: err.Error()}})
	}
	if err := writeMsg(ctl, exsReply{Addr: addr}); err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	ev, err := dequeueOne(actx, q)
	cancel()
	if err == nil {
		err = ev.Err
	}
	if err != nil {
		return fmt.Errorf("accepting the data connection: %w", err)
	}
	ls.Close(q, nil)
	e := exsEnd{p: p, st: st, s: ev.Accepted, q: q}
	// The listener's close event is on q: the loops below ignore events
	// that are not theirs only if they are closes, so take it first.
	if _, err := dequeueOne(ctx, q); err != nil {
		return err
	}
	switch req.Test {
	case "stream":
		var m [2]mark
		var ss [2]exs.Stats
		var sent bool
		err := e.receiver(ctx, req.Warmup, req.Duration, func(edge int, bytes int64) bool {
			m[edge-1] = takeMark(bytes, 0)
			ss[edge-1] = e.s.Stats()
			if edge == edgeEnd {
				if os.Getenv(statsEnv) != "" {
					printStats(os.Stderr, fmt.Sprintf("%v %v receiver", p.Mode, p.Size), ss[0], ss[1], prov.Stats())
				}
				r := exsReply{reply: reply{Bytes: m[1].bytes - m[0].bytes, Elapsed: m[1].at.Sub(m[0].at),
					CPUProc: cpuDelta(m[0].proc, m[1].proc), CPUThread: cpuDelta(m[0].thread, m[1].thread)}}
				if err := writeMsg(ctl, r); err != nil {
					return false
				}
				sent = true
			}
			return true
		})
		if !sent {
			if err == nil {
				err = errors.New("the stream ended before the measured interval did")
			}
			return writeMsg(ctl, exsReply{reply: reply{Err: err.Error()}})
		}
		return nil
	case "pingpong":
		var stop atomic.Bool
		defer context.AfterFunc(ctx, func() { stop.Store(true) })()
		return e.echo(&stop, true)
	}
	return nil
}

// params checks a request and returns the pair parameters and wait mode it
// names.
func (req exsRequest) params() (pairParams, waitMode, error) {
	ms, err := parseModes(req.Mode)
	if err != nil || len(ms) != 1 {
		return pairParams{}, 0, fmt.Errorf("bad mode %q", req.Mode)
	}
	if req.Test != "stream" && req.Test != "pingpong" {
		return pairParams{}, 0, fmt.Errorf("unknown test %q", req.Test)
	}
	if req.Size < 1 || req.Size > 64<<20 || req.Sends < 1 || req.Recvs < 1 || req.Sends > 4096 || req.Recvs > 4096 ||
		int64(req.Size)*int64(req.Sends+req.Recvs) > 4<<30 || req.Ring < 1 || req.Ring > exs.MaxStreamBuffer {
		return pairParams{}, 0, fmt.Errorf("bad size %d, sends %d, recvs %d or ring %d", req.Size, req.Sends, req.Recvs, req.Ring)
	}
	w := waitAdaptive
	if req.Wait != "" {
		var ws []waitMode
		if err := (waitsFlag{&ws}).Set(req.Wait); err != nil || len(ws) != 1 {
			return pairParams{}, 0, fmt.Errorf("bad wait mode %q", req.Wait)
		}
		w = ws[0]
	}
	p := pairParams{Mode: ms[0], Size: req.Size, Sends: req.Sends, Recvs: req.Recvs, Ring: req.Ring, Verify: req.Verify, Seed: req.Seed, Wait: w}
	return p, w, nil
}

// exsNetTransport measures exs against an exsperf server at an address of
// a provider that crosses processes.
type exsNetTransport struct {
	name, about string
	addr        string
	prov        *shm.Provider

	mu    sync.Mutex // one measurement at a time
	st    *exs.Stack
	ctl   *exsCtl
	cpuOK bool
	procs int    // GOMAXPROCS while measuring; 0 leaves it alone
	cma   string // what the same-host provider said of cross-memory attach
}

// dialExs opens the control connection to the server at addr.
func dialExs(ctx context.Context, name, about, addr string) (*exsNetTransport, error) {
	prov, err := shm.New()
	if err != nil {
		return nil, err
	}
	t := &exsNetTransport{name: name, about: about, addr: addr, prov: prov}
	st, err := exs.NewStack(exs.WithProvider("shm", t.prov))
	if err != nil {
		return nil, err
	}
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

func (t *exsNetTransport) Name() string     { return t.name }
func (t *exsNetTransport) Describe() string { return t.about }
func (t *exsNetTransport) HasModes() bool   { return true }

// Close closes the control connection, which ends the server's session.
func (t *exsNetTransport) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.st == nil {
		return nil
	}
	err := t.st.Close()
	t.st = nil
	return err
}

// cmaNote says how the same-host provider moved the bytes, once a
// measurement has run.
func (t *exsNetTransport) cmaNote() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cma
}

func (t *exsNetTransport) Open(ctx context.Context, p pairParams) (pair, error) {
	if p.Link != nil {
		return nil, errors.New("no emulated link between processes")
	}
	if p.Wait == 0 {
		p.Wait = waitAdaptive
	}
	return &exsNetPair{t: t, p: p}, nil
}

// exsNetPair is one measurement against the server: the data connection
// lives for one Stream or PingPong.
type exsNetPair struct {
	t *exsNetTransport
	p pairParams
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
	req := exsRequest{request: request{Test: test, Size: p.Size, Warmup: warmup, Duration: d, Wait: p.Wait.String(), Verify: p.Verify, Seed: p.Seed},
		Mode: p.Mode.String(), Sends: p.Sends, Recvs: p.Recvs, Ring: p.Ring}
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
	// A provider per data connection; its statistics are that
	// connection's.
	prov, err := shm.New()
	if err != nil {
		return exsEnd{}, err
	}
	t.prov = prov
	st, err := exs.NewStack(append(exsSocketOptions(p, p.Wait), exs.WithProvider("shm", t.prov))...)
	if err != nil {
		return exsEnd{}, err
	}
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
func (t *exsNetTransport) noteCMA() {
	for _, c := range t.prov.Stats() {
		if c.CMA {
			t.cma = fmt.Sprintf("the same-host provider copies with cross-memory attach (process_vm_writev/readv) or, into the peer's shared memory, with copy(); on the sender's last connection: %d one-sided copies by process_vm_writev/readv, %d by copy() into shared memory, %d ring messages, %d target copies, %d receiver sleeps", c.Direct, c.Shared, c.RingMessages, c.TargetCopies, c.Sleeps)
		} else {
			t.cma = "cross-memory attach refused (" + c.CMAError + "): the same-host provider moves every byte through its shared rings"
		}
	}
}

// setProcs sets GOMAXPROCS to t.procs, if set, and returns the function
// that restores it.
func (t *exsNetTransport) setProcs() func() {
	if t.procs <= 0 {
		return func() {}
	}
	old := runtime.GOMAXPROCS(t.procs)
	return func() { runtime.GOMAXPROCS(old) }
}

func (np *exsNetPair) Stream(ctx context.Context, warmup, d time.Duration) (result, error) {
	t := np.t
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.setProcs()()
	e, err := np.start(ctx, "stream", warmup, d)
	if err != nil {
		return result{}, err
	}
	var stop atomic.Bool
	var sent atomic.Int64
	var wg sync.WaitGroup
	var serr error
	wg.Add(1)
	go func() { // the sender; owner: this function, which stops it below
		defer wg.Done()
		serr = e.sender(&stop, &sent)
	}()
	// The client's interval starts at its own warm-up edge and ends when
	// the server's reply arrives; its CPU time is scaled to the server's
	// interval, which is about as long.
	var m [2]sockMark
	timer := time.NewTimer(warmup)
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
	m[0] = sockMark{time.Now(), 0, sent.Load(), processCPU(), e.s.Stats()}
	var rep exsReply
	rerr := readMsg(t.ctl, &rep)
	m[1] = sockMark{time.Now(), 0, sent.Load(), processCPU(), e.s.Stats()}
	t.noteCMA()
	if os.Getenv(statsEnv) != "" {
		printStats(os.Stderr, fmt.Sprintf("%v %v sender", np.p.Mode, np.p.Size), m[0].stats, m[1].stats, t.prov.Stats())
	}
	stop.Store(true)
	// Closing the stack ends the data connection, the sender's operations
	// and the server's side.
	e.st.Close()
	wg.Wait()
	closeStack(e.st) // frees the buffers, now that the sender has stopped
	switch {
	case rerr != nil:
		return result{}, fmt.Errorf("reading the server's reply: %w", rerr)
	case rep.Err != "":
		return result{}, fmt.Errorf("server: %s", rep.Err)
	case serr != nil:
		return result{}, serr
	}
	r := exsDirect(m[0].stats, m[1].stats)
	r.Bytes, r.Elapsed = rep.Bytes, rep.Elapsed
	r.CPUSend, r.CPURecv, r.CPUTotal = -1, rep.CPUProc, -1
	if span := m[1].at.Sub(m[0].at); span > 0 {
		scale := rep.Elapsed.Seconds() / span.Seconds()
		r.Msgs = int64(float64(m[1].msgs-m[0].msgs) * scale)
		if c := cpuDelta(m[0].cpu, m[1].cpu); c >= 0 {
			r.CPUSend = time.Duration(float64(c) * scale)
		}
	}
	if r.CPUSend >= 0 && r.CPURecv >= 0 {
		r.CPUTotal = r.CPUSend + r.CPURecv
	}
	r.Note = "wait " + np.p.Wait.String()
	return r, nil
}

func (np *exsNetPair) PingPong(ctx context.Context, warmup, d time.Duration, w waitMode) ([]time.Duration, error) {
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

// isExsAddr reports whether addr names exs over a provider that crosses
// processes: "shm:PATH" (or "exs+shm:PATH").
func exsAddr(s string) (string, bool) {
	s = strings.TrimPrefix(s, "exs+")
	if strings.HasPrefix(s, shm.Scheme) && len(s) > len(shm.Scheme) {
		return s, true
	}
	return "", false
}

var _ = dynproto.Dynamic

// peerProcs is GOMAXPROCS in the parent and in the child while an exs-shm
// measurement runs. Each side of the TCP anchor runs on a thread of its
// own; with one P per process each exs side likewise runs on one CPU. With
// Go's default (one P per CPU) the two processes' spinning goroutines
// contend for the two CPUs of a small machine, and the kernel's time
// slices then decide the throughput: 1 MiB indirect-only 18.6-18.8 GB/s
// against 31.7-31.8 with one P (exsperf compare, 2 vCPUs, runs alternated).
const peerProcs = 1

// exsProcTransport measures exs against a child exsperf process (the
// hidden "peer" subcommand) over the same-host provider, on an shm:
// address in a temporary directory. The child exits when its control
// connection or its stdin closes.
type exsProcTransport struct {
	*exsNetTransport
	dir  string
	peer *peerProc
}

// startExsProc starts the child and connects to it.
func startExsProc(ctx context.Context) (_ *exsProcTransport, err error) {
	// A short directory: Unix socket paths have a limit of about 100 bytes.
	dir, err := os.MkdirTemp("", "exsperf")
	if err != nil {
		return nil, fmt.Errorf("starting the peer process: %w", err)
	}
	t := &exsProcTransport{dir: dir}
	defer func() {
		if err != nil {
			err = errors.Join(err, t.Close())
		}
	}()
	addr := shm.Scheme + filepath.Join(dir, "peer")
	var line string
	if t.peer, line, err = startPeer(ctx, "peer", "--listen", addr, "--procs", strconv.Itoa(peerProcs)); err != nil {
		return nil, err
	}
	if strings.TrimSpace(line) != "listening "+addr {
		return nil, fmt.Errorf("the peer process did not start (it said %q)", short(line))
	}
	about := "exs sockets to a child exsperf process over the same-host provider (shm: a socket in a new temporary directory), exs's queue pairs with relaxed write placement; send and recv buffers and stream buffers from Stack.Alloc (the provider's shared memory); GOMAXPROCS " + strconv.Itoa(peerProcs) + " in each process while it measures; CPU per side: RUSAGE_SELF of each process"
	if t.exsNetTransport, err = dialExs(ctx, "exs-shm", about, addr); err != nil {
		return nil, err
	}
	t.procs = peerProcs
	return t, nil
}

// notes says which path the same-host provider used.
func (t *exsProcTransport) notes() []string {
	if n := t.cmaNote(); n != "" {
		return []string{n}
	}
	return nil
}

// Close ends the control connection and the child (it exits when either
// its control connection or its stdin closes; it is killed if it has not
// within peerExitTimeout) and removes the directory. It returns every
// error of these steps.
func (t *exsProcTransport) Close() error {
	var errs []error
	if t.exsNetTransport != nil {
		errs = append(errs, t.exsNetTransport.Close())
	}
	if t.peer != nil {
		errs = append(errs, t.peer.Close())
		t.peer = nil
	}
	if t.dir != "" {
		errs = append(errs, os.RemoveAll(t.dir))
		t.dir = ""
	}
	return errors.Join(errs...)
}

// fallbackTransport is the transport "auto" chose when the first choice
// could not run, with the reason.
type fallbackTransport struct {
	transport
	why string
}

func (f fallbackTransport) notes() []string { return []string{f.why} }

// transportNotes returns what a transport has to say about how it ran.
func transportNotes(t transport) []string {
	if n, ok := t.(interface{ notes() []string }); ok {
		return n.notes()
	}
	return nil
}
