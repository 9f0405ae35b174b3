package usertest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exsgo/exs/exs"
)

// Scale and soak: many connections at once, and mixed transfers for a
// fixed time, with what they cost and a check that everything they took
// comes back.

// usage is what a process holds: goroutines, Go heap in use (after a
// collection), resident memory, open descriptors, memory mappings.
type usage struct {
	Goroutines int
	Heap       uint64 // bytes of heap in use
	RSS        uint64 // bytes
	FDs, Maps  int
	Threads    int // the process's OS threads
}

// ownMaps is the mappings but the threads' stacks and guard pages: the Go
// runtime keeps every OS thread it started (with cgo each has a stack and a
// guard page of its own), and a goroutine blocked in a system call (the
// same-host provider's receiver asleep on its futex) holds one.
func (u usage) ownMaps() int { return u.Maps - 2*u.Threads }

func measure() usage {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	u := usage{Goroutines: runtime.NumGoroutine(), Heap: ms.HeapInuse, FDs: -1, Maps: -1}
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		u.FDs = len(ents)
	}
	if b, err := os.ReadFile("/proc/self/maps"); err == nil {
		u.Maps = bytes.Count(b, []byte("\n"))
	}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
				kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				u.RSS = kb << 10
			}
			if v, ok := strings.CutPrefix(sc.Text(), "Threads:"); ok {
				u.Threads, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
	}
	return u
}

// perConn describes what n connections added to a process.
func perConn(before, open usage, n int) string {
	return fmt.Sprintf("%.2f goroutines, %.1f KiB of heap, %.1f KiB resident, %.2f descriptors, %.2f mappings (%.2f but threads' stacks), %.2f threads per connection",
		float64(open.Goroutines-before.Goroutines)/float64(n),
		(float64(open.Heap)-float64(before.Heap))/1024/float64(n),
		(float64(open.RSS)-float64(before.RSS))/1024/float64(n),
		float64(open.FDs-before.FDs)/float64(n),
		float64(open.Maps-before.Maps)/float64(n),
		float64(open.ownMaps()-before.ownMaps())/float64(n),
		float64(open.Threads-before.Threads)/float64(n))
}

// backToBase waits a few seconds for the goroutines and descriptors to
// come back to before, and the mappings but the threads' stacks to within
// slack of it, and reports what it found.
func backToBase(before usage, slack int) (usage, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		u := measure()
		if u.Goroutines <= before.Goroutines && u.FDs <= before.FDs && (raceEnabled || u.ownMaps() <= before.ownMaps()+slack) {
			return u, nil
		}
		if time.Now().After(deadline) {
			return u, fmt.Errorf("not back: %+v, before %+v", u, before)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// connections returns how many connections the scale tests open:
// EXS_CONNS, or 1,000.
func connections(t *testing.T) int {
	n := 100 // .ci/run's scale step sets 1,000
	if s := os.Getenv("EXS_CONNS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("EXS_CONNS: %q", s)
		}
		n = v
	}
	return n
}

// openEcho sets up n connections from client to the listening socket ln
// of server, each carrying one 64-byte message both ways, and returns the
// two ends of each. The server's sockets come from accepts posted as they
// complete (WithOutstanding bounds them).
func openEcho(ctx context.Context, server, client *exs.Stack, ln *exs.Socket, addr string, n int) (srv, cli []*exs.Socket, err error) {
	sq, err := server.Qcreate(4096)
	if err != nil {
		return nil, nil, err
	}
	defer server.Qdelete(sq)
	cq, err := client.Qcreate(4096)
	if err != nil {
		return nil, nil, err
	}
	defer client.Qdelete(cq)
	errc := make(chan error, 1)
	go func() { errc <- serveEcho(ctx, sq, ln, n, &srv) }()
	cli = make([]*exs.Socket, n)
	if err := echoClients(ctx, client, cq, addr, cli); err != nil {
		return nil, nil, err
	}
	if err := <-errc; err != nil {
		return nil, nil, err
	}
	return srv, cli, nil
}

// serveEcho accepts n connections on ln and echoes one 64-byte message on
// each; the accepted sockets go to *out.
func serveEcho(ctx context.Context, q *exs.Queue, ln *exs.Socket, n int, out *[]*exs.Socket) error {
	const accepts = 32
	posted := 0
	for ; posted < min(accepts, n); posted++ {
		if err := ln.Accept(q, "accept"); err != nil {
			return err
		}
	}
	bufs := map[*exs.Socket][]byte{}
	done := 0
	var evs [64]exs.Event
	for done < n {
		k, err := q.DequeueContext(ctx, evs[:], 1)
		if err != nil {
			return fmt.Errorf("server (%d accepted, %d echoed): %w", len(bufs), done, err)
		}
		for _, ev := range evs[:k] {
			if ev.Err != nil {
				return fmt.Errorf("server %v: %w", ev.Type, ev.Err)
			}
			switch ev.Type {
			case exs.EventAccept:
				s := ev.Accepted
				*out = append(*out, s)
				b := make([]byte, 64)
				bufs[s] = b
				if err := s.Recv(q, b, nil, exs.MsgWaitAll, "recv"); err != nil {
					return err
				}
				if posted < n {
					if err := ln.Accept(q, "accept"); err != nil {
						return err
					}
					posted++
				}
			case exs.EventRecv:
				if err := ev.Socket.Send(q, bufs[ev.Socket], nil, 0, "send"); err != nil {
					return err
				}
			case exs.EventSend:
				done++
			}
		}
	}
	return nil
}

// connectWindow is how many connects echoClients keeps in flight: the
// in-process provider refuses a request that finds 128 others waiting
// for its listener (inproc.Backlog), whatever the listening socket's
// backlog, so a burst of connects is paced.
const connectWindow = 64

// scaleConnectTimeout is the connects' time limit in the scale tests. They
// measure what connections cost, not how fast they come up: on a loaded
// machine (load average 21 on two CPUs) a connect over the same-host
// provider, one of 64 in flight, each end mapping the peer's arenas, was
// not accepted within the default 5 s.
const scaleConnectTimeout = time.Minute

// echoClients connects len(cli) sockets of st to addr, connectWindow at a
// time, sends a message on each and takes its echo.
func echoClients(ctx context.Context, st *exs.Stack, q *exs.Queue, addr string, cli []*exs.Socket) error {
	next := 0
	connect := func() error {
		s, err := st.Socket(exs.SockStream, exs.WithConnectTimeout(scaleConnectTimeout))
		if err != nil {
			return err
		}
		cli[next] = s
		if err := s.Connect(q, addr, next); err != nil {
			return err
		}
		next++
		return nil
	}
	for next < min(connectWindow, len(cli)) {
		if err := connect(); err != nil {
			return err
		}
	}
	done := 0
	var evs [64]exs.Event
	for done < len(cli) {
		k, err := q.DequeueContext(ctx, evs[:], 1)
		if err != nil {
			return fmt.Errorf("client (%d echoed): %w", done, err)
		}
		for _, ev := range evs[:k] {
			if ev.Err != nil {
				return fmt.Errorf("client %v %v: %w", ev.Type, ev.User, ev.Err)
			}
			i := ev.User.(int)
			switch ev.Type {
			case exs.EventConnect:
				b := bytes.Repeat([]byte{byte(i)}, 64)
				if err := cli[i].Send(q, b, nil, 0, i); err != nil {
					return err
				}
				if err := cli[i].Recv(q, make([]byte, 64), nil, exs.MsgWaitAll, i); err != nil {
					return err
				}
				if next < len(cli) {
					if err := connect(); err != nil {
						return err
					}
				}
			case exs.EventRecv:
				done++
			}
		}
	}
	return nil
}

// closeAll closes sockets and waits for their EventClose.
func closeAll(ctx context.Context, st *exs.Stack, socks []*exs.Socket) error {
	q, err := st.Qcreate(len(socks) + 1)
	if err != nil {
		return err
	}
	defer st.Qdelete(q)
	for _, s := range socks {
		if err := s.Close(q, nil); err != nil {
			return err
		}
	}
	var evs [64]exs.Event
	for left := len(socks); left > 0; {
		k, err := q.DequeueContext(ctx, evs[:], 1)
		if err != nil {
			return err
		}
		for _, ev := range evs[:k] {
			if ev.Type == exs.EventClose {
				left--
			}
		}
	}
	return nil
}

// TestManyConnections opens 100 connections (EXS_CONNS; 1,000 in .ci/run's
// scale step) at once between two stacks of this process, over the
// in-process provider and over the TCP provider on loopback, with the
// default options but a connect time limit of a minute, each carrying a
// message both ways while all are up; it reports what a connection costs
// and checks that closing them gives everything back.
func TestManyConnections(t *testing.T) {
	for _, tc := range []struct {
		name string
		addr func(testing.TB) string
	}{{"inproc", inprocAddr}, {"tcp", func(testing.TB) string { return "tcp:127.0.0.1:0" }}} {
		t.Run(tc.name, func(t *testing.T) { manyConnections(t, tc.addr(t)) })
	}
}

func manyConnections(t *testing.T, addr string) {
	n := connections(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before := measure()
	server, err := exs.NewStack()
	if err != nil {
		t.Fatal(err)
	}
	client, err := exs.NewStack()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := server.Socket(exs.SockStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := ln.Bind(addr); err != nil {
		t.Fatal(err)
	}
	if err := ln.Listen(n); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	srv, cli, err := openEcho(ctx, server, client, ln, ln.Addr(), n)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	open := measure()
	t.Logf("%d connections up and echoing in %v: %+v, before %+v", n, took.Round(time.Millisecond), open, before)
	t.Logf("both ends in one process: %s", perConn(before, open, n))
	if err := closeAll(ctx, client, cli); err != nil {
		t.Fatal(err)
	}
	if err := closeAll(ctx, server, append(srv, ln)); err != nil {
		t.Fatal(err)
	}
	client.Close()
	server.Close()
	after, err := backToBase(before, 40)
	if err != nil {
		t.Error(err)
	}
	t.Logf("after closing: %+v", after)
}

// scaleArg is the argument of the child of TestManyConnectionsBetweenProcesses.
type scaleArg struct {
	Addr string
	N    int
}

// scaleReport is what the child reports: its usage before, with every
// connection up, and after closing them.
type scaleReport struct {
	Phase  string
	Before usage
	Now    usage
	Took   time.Duration
	Err    string
}

// TestManyConnectionsBetweenProcesses opens 20 connections (EXS_SHM_CONNS;
// 200 in .ci/run's scale step) at once over the same-host provider, from a
// child process to this one, each carrying a message both ways; each process reports what a
// connection costs it, and both check that closing gives everything back.
//
// Not 1,000: each connection end maps every arena of the peer's stack that
// holds a region registered for remote write, and exs takes every stream
// buffer from the provider's allocator, so n connections between two
// stacks make about n mappings per connection in each process (n² in all):
// 1,000 would pass the kernel's limit of 65,530 mappings per process
// (vm.max_map_count). See docs/reliability.md.
func TestManyConnectionsBetweenProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	n := 20 // .ci/run's scale step sets 200
	if s := os.Getenv("EXS_SHM_CONNS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("EXS_SHM_CONNS: %q", s)
		}
		n = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	addr := shmAddr(t)
	// The child waits for a line on its stdin before it connects, so that
	// the level before counts the child's pipes and their reader.
	c, line := startChild(t, "scale", scaleArg{Addr: addr, N: n})
	if line != "ready" {
		t.Fatalf("child: %s", line)
	}
	before := measure()
	server, err := exs.NewStack()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := server.Socket(exs.SockStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := ln.Bind(addr); err != nil {
		t.Fatal(err)
	}
	if err := ln.Listen(n); err != nil {
		t.Fatal(err)
	}
	q, err := server.Qcreate(4096)
	if err != nil {
		t.Fatal(err)
	}
	var srv []*exs.Socket
	errc := make(chan error, 1)
	go func() { errc <- serveEcho(ctx, q, ln, n, &srv) }()
	if _, err := fmt.Fprintln(c.stdin, "go"); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	var rep scaleReport
	readReport := func() {
		line, err := c.line()
		if err == nil {
			err = json.Unmarshal([]byte(line), &rep)
		}
		if err == nil && rep.Err != "" {
			err = errors.New(rep.Err)
		}
		if err != nil {
			t.Fatalf("child's report: %v", err)
		}
	}
	readReport()
	open := measure()
	t.Logf("%d connections between two processes up and echoing in %v", n, rep.Took.Round(time.Millisecond))
	t.Logf("the listening process: %s", perConn(before, open, n))
	t.Logf("the connecting process: %s", perConn(rep.Before, rep.Now, n))
	// End in order: shut down here, the child closes at the end of the
	// stream, then we close.
	for _, s := range srv {
		if err := s.Shutdown(q, "shutdown"); err != nil {
			t.Fatal(err)
		}
	}
	readReport()
	if rep.Phase != "closed" {
		t.Fatalf("child's report: %+v", rep)
	}
	t.Logf("the connecting process after closing: %+v, before %+v", rep.Now, rep.Before)
	if err := closeAll(ctx, server, append(srv, ln)); err != nil {
		t.Fatal(err)
	}
	server.Close()
	after, err := backToBase(before, 40)
	if err != nil {
		t.Error(err)
	}
	t.Logf("the listening process after closing: %+v, before %+v", after, before)
}

// childScale is the connecting process of TestManyConnectionsBetweenProcesses.
func childScale(arg string) error {
	var a scaleArg
	if err := json.Unmarshal([]byte(arg), &a); err != nil {
		return err
	}
	report := func(r scaleReport) {
		b, _ := json.Marshal(r)
		fmt.Println(string(b))
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	before := measure()
	st, err := exs.NewStack()
	if err != nil {
		return err
	}
	start := time.Now()
	q, err := st.Qcreate(4096)
	if err != nil {
		return err
	}
	cli := make([]*exs.Socket, a.N)
	if err := echoClients(ctx, st, q, a.Addr, cli); err != nil {
		report(scaleReport{Err: err.Error()})
		return err
	}
	report(scaleReport{Phase: "open", Before: before, Now: measure(), Took: time.Since(start)})
	// Wait for the end of each stream, then close.
	for i, s := range cli {
		if err := s.Recv(q, make([]byte, 1), nil, 0, i); err != nil {
			return err
		}
	}
	var evs [64]exs.Event
	for left := a.N; left > 0; {
		k, err := q.DequeueContext(ctx, evs[:], 1)
		if err != nil {
			return err
		}
		for _, ev := range evs[:k] {
			if ev.Type == exs.EventRecv {
				if !ev.EOF {
					return fmt.Errorf("recv at the end: %d bytes, %v", ev.N, ev.Err)
				}
				left--
			}
		}
	}
	st.Qdelete(q)
	if err := closeAll(ctx, st, cli); err != nil {
		return err
	}
	st.Close()
	after, err := backToBase(before, 40)
	r := scaleReport{Phase: "closed", Before: before, Now: after}
	if err != nil {
		r.Err = err.Error()
	}
	report(r)
	waitStdinClosed()
	return nil
}

// soakTime is how long TestSoak runs: EXS_SOAK (a duration), or 3 s.
func soakTime(t *testing.T) time.Duration {
	if s := os.Getenv("EXS_SOAK"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("EXS_SOAK: %v", err)
		}
		return d
	}
	return 3 * time.Second
}

// TestSoak runs mixed transfers for a fixed time (EXS_SOAK, 3 s by
// default): eight long-lived connections carrying a stream of random sends
// both ways, and four workers that each open a connection of a random
// type, mode and stream buffer, move a few random transfers both ways,
// end it in order and start again; every byte is checked. A quarter of
// them (two long-lived, one worker) go over the TCP provider on loopback,
// the rest over the in-process provider. It then checks
// that the goroutines, open descriptors, mappings and heap came back to
// their level after a warm-up round.
func TestSoak(t *testing.T) {
	d := soakTime(t)
	ctx, cancel := context.WithTimeout(context.Background(), d+2*time.Minute)
	defer cancel()
	// A warm-up round sets the levels: the runtime's heap and threads grow
	// to the workload first.
	soakRound(ctx, t, 0, d/10+100*time.Millisecond)
	if t.Failed() {
		return
	}
	before := measure()
	start := time.Now()
	stats := soakRound(ctx, t, 1, d)
	after, err := backToBase(before, 40)
	if err != nil {
		t.Error(err)
	}
	heapLimit := before.Heap + max(before.Heap/5, 4<<20)
	if after.Heap > heapLimit {
		t.Errorf("heap in use %d bytes after the soak, %d before", after.Heap, before.Heap)
	}
	t.Logf("%v of mixed transfers: %s; before %+v, after %+v", time.Since(start).Round(time.Millisecond), stats, before, after)
}

// soakStats counts a soak round.
type soakStats struct {
	conns, bytes, transfers int64
	mu                      sync.Mutex
}

func (s *soakStats) add(conns, bytes, transfers int64) {
	s.mu.Lock()
	s.conns += conns
	s.bytes += bytes
	s.transfers += transfers
	s.mu.Unlock()
}

func (s *soakStats) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("%d connections, %d sends, %.1f MB checked", s.conns, s.transfers, float64(s.bytes)/1e6)
}

// soakRound runs one round of the soak for d and closes everything it
// opened.
func soakRound(ctx context.Context, t *testing.T, round int, d time.Duration) *soakStats {
	var stats soakStats
	server, err := exs.NewStack()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	client, err := exs.NewStack()
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	var mu sync.Mutex
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if !t.Failed() {
			t.Errorf("soak round %d: %v", round, err)
		}
	}
	seq := 0
	newAddr := func(overTCP bool) string {
		if overTCP {
			return "tcp:127.0.0.1:0"
		}
		mu.Lock()
		defer mu.Unlock()
		seq++
		return fmt.Sprintf("%s-r%d-%d", inprocAddr(t), round, seq)
	}
	for w := range 12 {
		long := w < 8       // the first eight keep one connection the whole round
		overTCP := w%4 == 3 // three, two of them long, over the TCP provider
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(round), uint64(w)))
			for k := 0; time.Now().Before(end) || k == 0; k++ {
				if err := soakConn(ctx, server, client, newAddr(overTCP), r, long, end, &stats); err != nil {
					fail(err)
					return
				}
				if long {
					return
				}
			}
		})
	}
	wg.Wait()
	return &stats
}

// soakConn opens one connection and moves transfers both ways, checked
// byte for byte: a few, or, if long, until end; then ends it in order.
func soakConn(ctx context.Context, server, client *exs.Stack, addr string, r *rand.Rand, long bool, end time.Time, stats *soakStats) error {
	typ := pick(r, exs.SockStream, exs.SockSeqPacket)
	opts := []exs.SocketOption{
		exs.WithMode(pick(r, exs.ModeDynamic, exs.ModeDirectOnly, exs.ModeIndirectOnly)),
		exs.WithStreamBuffer(pick(r, 16<<10, 256<<10, exs.DefaultStreamBuffer)),
	}
	ln, err := server.Socket(typ, opts...)
	if err != nil {
		return err
	}
	if err := ln.Bind(addr); err != nil {
		return err
	}
	if err := ln.Listen(0); err != nil {
		return err
	}
	qs, _ := server.Qcreate(64)
	defer server.Qdelete(qs)
	qc, _ := client.Qcreate(64)
	defer client.Qdelete(qc)
	if err := ln.Accept(qs, nil); err != nil {
		return err
	}
	c, err := client.Socket(typ, opts...)
	if err != nil {
		return err
	}
	if err := c.Connect(qc, ln.Addr(), nil); err != nil {
		return err
	}
	ev, err := dequeue(ctx, qs)
	if err != nil || ev.Err != nil {
		return fmt.Errorf("accept: %v %v", err, ev.Err)
	}
	s := ev.Accepted
	if err := ln.Close(qs, nil); err != nil {
		return err
	}
	if ev, err := dequeue(ctx, qs); err != nil || ev.Type != exs.EventClose {
		return fmt.Errorf("listener close: %v %v", err, ev.Type)
	}
	if ev, err := dequeue(ctx, qc); err != nil || ev.Err != nil {
		return fmt.Errorf("connect: %v %v", err, ev.Err)
	}
	stats.add(1, 0, 0)
	// Both directions at once, each its own sender and receiver.
	rounds := 1 + r.IntN(6)
	sizes := [2][]int{}
	for dir := range 2 {
		for k := 0; k < rounds; k++ {
			n := logSize(r, 1, 256<<10)
			if typ == exs.SockSeqPacket {
				n = logSize(r, 0, 64<<10)
			}
			sizes[dir] = append(sizes[dir], n)
		}
	}
	errc := make(chan error, 2)
	go func() { errc <- soakPipe(ctx, client, c, server, s, sizes[0], typ, long, end, stats) }()
	go func() { errc <- soakPipe(ctx, server, s, client, c, sizes[1], typ, long, end, stats) }()
	err = errors.Join(<-errc, <-errc)
	for _, x := range []struct {
		st *exs.Stack
		s  *exs.Socket
	}{{client, c}, {server, s}} {
		if cerr := closeAll(ctx, x.st, []*exs.Socket{x.s}); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}

func dequeue(ctx context.Context, q *exs.Queue) (exs.Event, error) {
	var evs [1]exs.Event
	_, err := q.DequeueContext(ctx, evs[:], 1)
	return evs[0], err
}

// soakPipe sends sizes (cycling through them until end if long) from
// socket from to socket to, then shuts down; to receives and checks every
// unit until the end of the stream.
func soakPipe(ctx context.Context, fromSt *exs.Stack, from *exs.Socket, toSt *exs.Stack, to *exs.Socket, sizes []int, typ exs.SockType, long bool, end time.Time, stats *soakStats) error {
	qf, err := fromSt.Qcreate(8)
	if err != nil {
		return err
	}
	defer fromSt.Qdelete(qf)
	qt, err := toSt.Qcreate(8)
	if err != nil {
		return err
	}
	defer toSt.Qdelete(qt)
	key := rand.Uint64()
	recvErr := make(chan error, 1)
	go func() {
		buf := make([]byte, 64<<10)
		units, msgs := 0, 0
		for {
			if err := to.Recv(qt, buf, nil, 0, nil); err != nil {
				recvErr <- err
				return
			}
			ev, err := dequeue(ctx, qt)
			if err == nil {
				err = ev.Err
			}
			if err != nil {
				recvErr <- fmt.Errorf("recv after %d units: %w", units, err)
				return
			}
			if ev.EOF {
				recvErr <- nil
				return
			}
			msg, off := -1, units
			if typ == exs.SockSeqPacket {
				msg, off = msgs, 0
			}
			if j := checkUnits(buf[:ev.N], key, msg, off); j >= 0 {
				recvErr <- fmt.Errorf("byte %d of a recv at %d is wrong", j, units)
				return
			}
			units += ev.N
			msgs++
		}
	}()
	units := 0
	for k := 0; ; k++ {
		if k >= len(sizes) && (!long || time.Now().After(end)) {
			break
		}
		n := sizes[k%len(sizes)]
		b := make([]byte, n)
		if typ == exs.SockSeqPacket {
			fillUnits(b, key, k, 0)
		} else {
			fillUnits(b, key, -1, units)
		}
		if err := from.Send(qf, b, nil, 0, nil); err != nil {
			return err
		}
		ev, err := dequeue(ctx, qf)
		if err == nil {
			err = ev.Err
		}
		if err != nil {
			return fmt.Errorf("send %d: %w", k, err)
		}
		units += n
		stats.add(0, int64(n), 1)
	}
	if err := from.Shutdown(qf, nil); err != nil {
		return err
	}
	if ev, err := dequeue(ctx, qf); err != nil || ev.Err != nil {
		return fmt.Errorf("shutdown: %v %v", err, ev.Err)
	}
	return <-recvErr
}
