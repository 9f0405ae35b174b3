package measure

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// The server/client protocol. A client opens one TCP connection per
// measurement and sends a request (a 4-byte big-endian length, then JSON);
// the connection then carries the test's data:
//
//   - stream: the client writes Size-byte messages; the server reads, and
//     from its first byte on times Warmup, then Duration; at the end it
//     sends its reply (same framing) and keeps reading until the client
//     closes its side on reading the reply.
//   - pingpong: the client sends Size bytes, the server sends them back,
//     until the client closes its side; no reply.
//
// The server handles one connection at a time (as iperf3 does), so that
// measurements do not share the machine.
type request struct {
	Test   string        `json:"test"`
	Size   int           `json:"size"`
	Warmup time.Duration `json:"warmup_ns"`
	// MaxWarmup, above Warmup: warm up until the rate is steady, for at
	// most MaxWarmup (Params.MaxWarmup).
	MaxWarmup time.Duration `json:"warmup_max_ns,omitempty"`
	Duration  time.Duration `json:"duration_ns"`
	Wait      string        `json:"wait,omitempty"`
	Verify    bool          `json:"verify,omitempty"`
	Seed      int64         `json:"seed,omitempty"`
}

type reply struct {
	Err       string        `json:"err,omitempty"`
	Bytes     int64         `json:"bytes"`
	Elapsed   time.Duration `json:"elapsed_ns"`
	CPUProc   time.Duration `json:"cpu_process_ns"` // -1 if unknown
	CPUThread time.Duration `json:"cpu_thread_ns"`
	CC        string        `json:"cc"`
	// The warm-up the server's side took, and whether it stopped at
	// MaxWarmup without a steady rate.
	Warmed   time.Duration `json:"warmup_taken_ns,omitempty"`
	Unsteady bool          `json:"unsteady,omitempty"`
}

// warmed returns the warm-up win took, for a reply.
func (r reply) warmed(win *window) reply {
	r.Warmed, r.Unsteady = win.start, win.unsteady
	return r
}

const maxHeader = 1 << 16

func writeMsg(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	msg := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(b)), uint32(len(b)))
	_, err = w.Write(append(msg, b...))
	return err
}

func readMsg(r io.Reader, v any) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	l := binary.BigEndian.Uint32(n[:])
	if l > maxHeader {
		return fmt.Errorf("control message of %d bytes", l)
	}
	b := make([]byte, l)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// TCPAddr is the address of an exsperf server over plain TCP.
type TCPAddr struct {
	Host string // host:port
}

// DefaultPort is the server's default port (iperf3's).
const DefaultPort = "5201"

// ParseTCPAddr parses "tcp:HOST:PORT", "HOST:PORT" or "HOST": the plain-TCP
// anchor. Addresses of exs over the same-host provider (shm:PATH) are taken
// by ExsAddr before; other exs addresses are refused with a clear message.
func ParseTCPAddr(s string, listen bool) (TCPAddr, error) {
	scheme, rest, found := strings.Cut(s, ":")
	if found {
		provider, isExs := strings.CutPrefix(scheme, "exs+")
		switch {
		case scheme == "tcp":
			s = rest
		case isExs && provider == "inproc", scheme == "inproc":
			return TCPAddr{}, fmt.Errorf("%q: the in-process provider cannot reach another process; run exsperf without server/client to measure it", s)
		case isExs, scheme == "exs", scheme == "shm", scheme == "iwarp":
			return TCPAddr{}, fmt.Errorf("%q: no such exs provider here; use shm:PATH (exs over the same-host provider) or tcp:HOST:PORT (the plain-TCP anchor)", s)
		}
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		if listen || strings.Contains(s, ":") && !strings.HasPrefix(s, "[") {
			return TCPAddr{}, fmt.Errorf("bad address %q (want tcp:HOST:PORT)", s)
		}
		host, port = s, DefaultPort
	}
	if port == "" {
		port = DefaultPort
	}
	a := TCPAddr{Host: net.JoinHostPort(host, port)}
	if _, _, err := net.SplitHostPort(a.Host); err != nil {
		return TCPAddr{}, fmt.Errorf("bad address %q (want tcp:HOST:PORT)", s) // "[", say
	}
	return a, nil
}

// TCPServer accepts measurement connections and serves them one at a time.
type TCPServer struct {
	ln  net.Listener
	log *zap.Logger
	cc  string
}

// ListenTCP listens for exsperf clients on a, setting the congestion
// control cc on the connections it accepts, and logs sessions to log.
func ListenTCP(ctx context.Context, a TCPAddr, cc string, log *zap.Logger) (*TCPServer, error) {
	lc := net.ListenConfig{Control: congestionControl(cc)}
	ln, err := lc.Listen(ctx, "tcp", a.Host)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	return &TCPServer{ln: ln, log: log, cc: cc}, nil
}

// Addr is the address the server listens on, as tcp:HOST:PORT.
func (s *TCPServer) Addr() string { return "tcp:" + s.ln.Addr().String() }

// Serve handles connections until ctx is done (then it returns nil) or, with
// once, after the first. It closes the listener before returning; a session in
// progress is cut short by ctx.
func (s *TCPServer) Serve(ctx context.Context, once bool) error {
	stop := context.AfterFunc(ctx, func() { s.ln.Close() })
	defer stop()
	defer s.ln.Close()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("server: %w", err)
		}
		s.log.Info("session", zap.String("peer", c.RemoteAddr().String()))
		if err := s.session(ctx, c.(*net.TCPConn)); err != nil && ctx.Err() == nil {
			s.log.Warn("session ended", zap.Error(err))
		}
		if once {
			return nil
		}
	}
}

func (s *TCPServer) session(ctx context.Context, c *net.TCPConn) error {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var req request
	if err := readMsg(c, &req); err != nil {
		return err
	}
	c.SetReadDeadline(time.Time{})
	if req.Size < 1 || req.Size > 1<<30 {
		return writeMsg(c, reply{Err: fmt.Sprintf("bad size %d", req.Size)})
	}
	switch req.Test {
	case "stream":
		return s.stream(c, req)
	case "pingpong":
		w := WaitBlock
		if req.Wait == WaitBusy.String() {
			w = WaitBusy
		}
		return echo(c, req.Size, w, func() bool { return ctx.Err() != nil })
	}
	return writeMsg(c, reply{Err: fmt.Sprintf("unknown test %q", req.Test)})
}

// stream is the server's side of a stream test: it reads and measures.
func (s *TCPServer) stream(c *net.TCPConn, req request) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	buf := make([]byte, req.Size)
	var bytes int64
	var start time.Time
	var m [2]mark
	win := newWindow(req.Warmup, req.MaxWarmup, req.Duration)
	for {
		k, err := c.Read(buf)
		if req.Verify && k > 0 {
			if off := checkPattern(buf[:k], uint64(bytes), byte(req.Seed)); off >= 0 {
				return writeMsg(c, reply{Err: fmt.Sprintf("wrong byte at stream offset %d", bytes+int64(off))})
			}
		}
		bytes += int64(k)
		if err != nil {
			if win.phase < 2 {
				return fmt.Errorf("server: stream ended early: %w", err)
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if start.IsZero() {
			start = time.Now()
		}
		switch win.check(time.Since(start), bytes) {
		case edgeStart:
			m[0] = takeMark(bytes, 0)
		case edgeEnd:
			m[1] = takeMark(bytes, 0)
			r := reply{Bytes: m[1].bytes - m[0].bytes, Elapsed: m[1].at.Sub(m[0].at),
				CPUProc: cpuDelta(m[0].proc, m[1].proc), CPUThread: cpuDelta(m[0].thread, m[1].thread), CC: connCongestion(c)}.warmed(&win)
			if err := writeMsg(c, r); err != nil {
				return err
			}
		}
	}
}

// NewTCPClient returns the transport that measures plain TCP against an
// exsperf server at a ("tcp-net").
func NewTCPClient(a TCPAddr) Transport {
	return &netTransport{name: "tcp-net", about: "plain Go TCP to an exsperf server at " + a.Host + " (CPU per side: RUSAGE_SELF of each process)", addr: a}
}

// addClient sets the client's side of a result whose bytes and interval
// are the server's: the client counted msgs sends and used cpu (or -1) over
// its own span of about the same interval (0 if it has none), both scaled to
// the server's interval; and the total CPU time, if both sides' are known.
func (r *Result) addClient(span time.Duration, msgs int64, cpu time.Duration) {
	if span > 0 {
		scale := r.Elapsed.Seconds() / span.Seconds()
		r.Msgs = int64(float64(msgs) * scale)
		if cpu >= 0 {
			r.CPUSend = time.Duration(float64(cpu) * scale)
		}
	}
	if r.CPUSend >= 0 && r.CPURecv >= 0 {
		r.CPUTotal = r.CPUSend + r.CPURecv
	}
}

// netTransport measures against an exsperf server (plain TCP) at an address.
type netTransport struct {
	name  string
	about string
	addr  TCPAddr
}

func (t *netTransport) Name() string     { return t.name }
func (t *netTransport) Describe() string { return t.about }
func (t *netTransport) Close() error     { return nil }

func (t *netTransport) Open(ctx context.Context, p Params) (Pair, error) {
	d := net.Dialer{Control: congestionControl(p.CC), Timeout: 10 * time.Second}
	c, err := d.DialContext(ctx, "tcp", t.addr.Host)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.name, err)
	}
	return &netPair{c: c.(*net.TCPConn), p: p}, nil
}

// netPair is one measurement connection to a server; this side is the
// sender (Stream) and the pinger (PingPong).
type netPair struct {
	c *net.TCPConn
	p Params
}

func (np *netPair) Close() error { return np.c.Close() }

func (np *netPair) Stream(ctx context.Context, warmup, d time.Duration) (Result, error) {
	stop := context.AfterFunc(ctx, func() { np.c.Close() })
	defer stop()
	req := request{Test: "stream", Size: np.p.Size, Warmup: warmup, MaxWarmup: np.p.MaxWarmup, Duration: d, Verify: np.p.Verify, Seed: np.p.Seed}
	if err := writeMsg(np.c, req); err != nil {
		return Result{}, err
	}
	var got atomic.Bool
	var rep reply
	var rerr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rerr = readMsg(np.c, &rep)
		got.Store(true)
	}()
	runtime.LockOSThread()
	bufs := makeBufs(np.p.Sends, np.p.Size)
	var m [2]mark
	// The client's interval starts at its own warm-up edge and ends when
	// the server's reply arrives; its CPU time is scaled to the server's
	// interval, which is about as long.
	win := window{warmup: warmup, d: d}
	var msgs int64
	start := time.Now()
	var werr error
	for i := 0; !got.Load(); i++ {
		b := bufs[i%len(bufs)]
		if np.p.Verify {
			fillPattern(b, uint64(i)*uint64(len(b)), byte(np.p.Seed))
		}
		if _, err := np.c.Write(b); err != nil {
			werr = err
			break
		}
		msgs++
		if win.phase == 0 && win.check(time.Since(start), 0) == edgeStart {
			m[0] = takeMark(0, msgs)
		}
	}
	m[1] = takeMark(0, msgs)
	runtime.UnlockOSThread()
	np.c.CloseWrite()
	wg.Wait()
	if rerr != nil {
		return Result{}, fmt.Errorf("reading the server's reply: %w (write: %v)", rerr, werr)
	}
	if rep.Err != "" {
		return Result{}, fmt.Errorf("server: %s", rep.Err)
	}
	// Wait for the server to drain and close, so that the next
	// measurement does not overlap this one.
	np.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	io.Copy(io.Discard, np.c)
	r := Result{Bytes: rep.Bytes, Elapsed: rep.Elapsed, CPUSend: -1, CPURecv: rep.CPUProc, CPUTotal: -1,
		Note: "congestion control " + rep.CC, Warmup: rep.Warmed, Unsteady: rep.Unsteady}
	span := m[1].at.Sub(m[0].at)
	if win.phase != 1 {
		span = 0 // the interval never started
	}
	r.addClient(span, m[1].msgs-m[0].msgs, cpuDelta(m[0].proc, m[1].proc))
	return r, nil
}

func (np *netPair) PingPong(ctx context.Context, warmup, d time.Duration, w WaitMode) ([]time.Duration, error) {
	if w != WaitBlock && w != WaitBusy {
		return nil, fmt.Errorf("wait mode %v does not apply to TCP", w)
	}
	stop := context.AfterFunc(ctx, func() { np.c.Close() })
	defer stop()
	if err := writeMsg(np.c, request{Test: "pingpong", Size: np.p.Size, Wait: w.String()}); err != nil {
		return nil, err
	}
	rts, err := pingClient(ctx, np.c, np.p.Size, w, warmup, d)
	np.c.CloseWrite()
	np.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	io.Copy(io.Discard, np.c)
	return rts, err
}

// procTransport measures against a child exsperf process it starts (the
// hidden "peer" subcommand), over plain TCP on loopback. An exs provider
// that crosses processes is added by having the child listen on it too.
type procTransport struct {
	netTransport
	peer *peerProc
}

func newProcTransport(scheme string) (*procTransport, error) {
	return &procTransport{netTransport: netTransport{
		name:  scheme + "-proc",
		about: "plain Go TCP over loopback to a child exsperf process (CPU per side: RUSAGE_SELF of each process)",
	}}, nil
}

func (t *procTransport) Open(ctx context.Context, p Params) (Pair, error) {
	if t.peer == nil {
		if err := t.start(ctx, p.CC); err != nil {
			return nil, err
		}
	}
	return t.netTransport.Open(ctx, p)
}

// start re-executes this binary as "exsperf peer" and reads the address it
// listens on. The child exits when its stdin closes.
func (t *procTransport) start(ctx context.Context, cc string) error {
	p, line, err := startPeer(ctx, "peer", "--cc", cc)
	if err != nil {
		return err
	}
	a, err := ParseTCPAddr(strings.TrimSpace(strings.TrimPrefix(line, "listening ")), true)
	if err != nil {
		return errors.Join(fmt.Errorf("the peer process said %q: %w", short(line), err), p.Close())
	}
	t.addr, t.peer = a, p
	return nil
}

// Close ends the child: it closes its stdin, then kills it if it has not
// exited within peerExitTimeout.
func (t *procTransport) Close() error {
	if t.peer == nil {
		return nil
	}
	err := t.peer.Close()
	t.peer = nil
	return err
}
