package measure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/exsgo/exs/exs"
	"github.com/exsgo/exs/verbs/shm"
	"github.com/exsgo/exs/verbs/tcp"
	"go.uber.org/zap"
)

// exs between two processes. The client opens one control connection (an
// exs stream socket, dynamic mode) to the server's address ADDR and keeps
// it for its whole run. Each measurement is a request on it (4-byte
// big-endian length, then JSON, as for TCP) naming the test, the mode and
// the parameters; the server listens on ADDR.N (N counting its
// measurements; over TCP, ADDR's host on a port the system chooses) with
// that mode, answers with that address, accepts one
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
	Reuse bool   `json:"reuse,omitempty"`
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

// ExsServer serves measurements over exs on an address.
type ExsServer struct {
	st   *exs.Stack
	ln   *exs.Socket
	q    *exs.Queue
	addr string
	prov *shm.Provider
	log  *zap.Logger
	seq  int
}

// ListenExs listens for exsperf clients on addr, an address of the
// same-host provider (shm:PATH) or of the TCP provider (tcp:HOST:PORT; port
// 0 gets one from the system, which Addr reports), logging sessions to log.
func ListenExs(addr string, log *zap.Logger) (*ExsServer, error) {
	st, prov, err := exsStackFor(addr)
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
	return &ExsServer{st: st, ln: ln, q: q, addr: ln.Addr(), prov: prov, log: log}, nil
}

// exsStackFor returns a stack that reaches addr, with the options opts: over
// a same-host provider of its own (returned, for its statistics) for
// shm:PATH, over exs's default TCP provider for tcp:HOST:PORT (nil
// returned).
func exsStackFor(addr string, opts ...exs.StackOption) (*exs.Stack, *shm.Provider, error) {
	if !strings.HasPrefix(addr, shm.Scheme) {
		st, err := exs.NewStack(opts...)
		return st, nil, err
	}
	prov, err := shm.New()
	if err != nil {
		return nil, nil, err
	}
	st, err := exs.NewStack(append(opts, exs.WithProvider("shm", prov))...)
	return st, prov, err
}

// dataAddr is where a server listens for its seq-th data connection:
// ADDR.seq for shm:ADDR, the control connection's host on a port of the
// system's choosing for tcp:HOST:PORT.
func dataAddr(ctl string, seq int) string {
	if hp, ok := strings.CutPrefix(ctl, tcp.Scheme); ok {
		if host, _, err := net.SplitHostPort(hp); err == nil {
			return tcp.Scheme + net.JoinHostPort(host, "0")
		}
	}
	return ctl + "." + strconv.Itoa(seq)
}

// shmStats returns the same-host provider's statistics, none for nil.
func shmStats(p *shm.Provider) []shm.ConnStats {
	if p == nil {
		return nil
	}
	return p.Stats()
}

// Addr is the address the server listens on.
func (s *ExsServer) Addr() string { return s.addr }

// Serve handles control connections one at a time until ctx is done or,
// with once, after the first. It closes the stack before returning.
func (s *ExsServer) Serve(ctx context.Context, once bool) error {
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
func (s *ExsServer) session(ctx context.Context, cs *exs.Socket) error {
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
func (s *ExsServer) measurement(ctx context.Context, ctl *exsCtl, req exsRequest) error {
	p, w, err := req.params()
	if err != nil {
		return writeMsg(ctl, exsReply{reply: reply{Err: err.Error()}})
	}
	s.seq++
	st, prov, err := exsStackFor(s.addr, exsSocketOptions(p, w)...)
	if err != nil {
		return writeMsg(ctl, exsReply{reply: reply{Err: err.Error()}})
	}
	defer closeStack(st)
	ls, err := exsListen(st, dataAddr(s.addr, s.seq))
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
	if err := writeMsg(ctl, exsReply{Addr: ls.Addr()}); err != nil {
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
		win := newWindow(req.Warmup, req.MaxWarmup, req.Duration)
		err := e.receiver(ctx, &win, func(edge int, bytes int64) bool {
			m[edge-1] = takeMark(bytes, 0)
			ss[edge-1] = e.s.Stats()
			if edge == edgeEnd {
				if os.Getenv(statsEnv) != "" {
					printStats(os.Stderr, fmt.Sprintf("%v %v receiver", p.Mode, p.Size), ss[0], ss[1], shmStats(prov))
				}
				r := exsReply{reply: reply{Bytes: m[1].bytes - m[0].bytes, Elapsed: m[1].at.Sub(m[0].at),
					CPUProc: cpuDelta(m[0].proc, m[1].proc), CPUThread: cpuDelta(m[0].thread, m[1].thread)}.warmed(&win)}
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
func (req exsRequest) params() (Params, WaitMode, error) {
	ms, err := ParseModes(req.Mode)
	if err != nil || len(ms) != 1 {
		return Params{}, 0, fmt.Errorf("bad mode %q", req.Mode)
	}
	if req.Test != "stream" && req.Test != "pingpong" {
		return Params{}, 0, fmt.Errorf("unknown test %q", req.Test)
	}
	if req.Size < 1 || req.Size > 64<<20 || req.Sends < 1 || req.Recvs < 1 || req.Sends > 4096 || req.Recvs > 4096 ||
		int64(req.Size)*int64(req.Sends+req.Recvs) > 4<<30 || req.Ring < 1 || req.Ring > exs.MaxStreamBuffer {
		return Params{}, 0, fmt.Errorf("bad size %d, sends %d, recvs %d or ring %d", req.Size, req.Sends, req.Recvs, req.Ring)
	}
	w := WaitAdaptive
	if req.Wait != "" {
		if w, err = ParseWait(req.Wait); err != nil {
			return Params{}, 0, fmt.Errorf("bad wait mode %q", req.Wait)
		}
	}
	p := Params{Mode: ms[0], Size: req.Size, Sends: req.Sends, Recvs: req.Recvs, Ring: req.Ring, Verify: req.Verify, Reuse: req.Reuse, Seed: req.Seed, Wait: w, MaxWarmup: req.MaxWarmup}
	return p, w, nil
}
