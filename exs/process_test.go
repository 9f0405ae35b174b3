package exs_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/exsgo/exs/exs"
	"github.com/exsgo/exs/internal/childproc"
)

// The cross-process tests run the peer in a child process: this test
// binary, run again with peerEnv set, serves on same-host ("shm:")
// addresses until its stdin closes.

// peerEnv holds the directory the child process listens in; peerBehaviourEnv
// says what it does with a connection: "echo" sends every message back,
// "stall" posts no recv at all.
const (
	peerEnv          = "EXS_TEST_SHM_PEER"
	peerBehaviourEnv = "EXS_TEST_SHM_PEER_DOES"
)

var (
	allModes = []exs.Mode{exs.ModeDynamic, exs.ModeDirectOnly, exs.ModeIndirectOnly}
	allTypes = []exs.SockType{exs.SockStream, exs.SockSeqPacket}
)

// peerAddr is the address the child process listens on for typ and mode.
func peerAddr(dir string, typ exs.SockType, mode exs.Mode) string {
	return "shm:" + filepath.Join(dir, typ.String()+"-"+mode.String())
}

// peerProcessMain serves as the child process and exits, if this binary
// was started as one.
func peerProcessMain() {
	dir := os.Getenv(peerEnv)
	if dir == "" {
		return
	}
	if err := servePeer(dir, os.Getenv(peerBehaviourEnv) == "stall"); err != nil {
		fmt.Fprintln(os.Stderr, "exs: peer process:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// servePeer listens on an address per socket type and mode in dir, says
// "ready" on stdout, and serves connections until stdin closes.
func servePeer(dir string, stall bool) error {
	st, err := exs.NewStack()
	if err != nil {
		return err
	}
	q, err := st.Qcreate(64)
	if err != nil {
		st.Close()
		return err
	}
	for _, typ := range allTypes {
		for _, mode := range allModes {
			ln, err := st.Socket(typ, exs.WithMode(mode))
			if err == nil {
				err = ln.Bind(peerAddr(dir, typ, mode))
			}
			if err == nil {
				err = ln.Listen(0)
			}
			if err == nil {
				err = ln.Accept(q, nil)
			}
			if err != nil {
				st.Close()
				return err
			}
		}
	}
	fmt.Println("ready")
	go func() { // ends when stdin closes: then Close ends the loop below
		io.Copy(io.Discard, os.Stdin)
		st.Close()
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	var evs [1]exs.Event
	for {
		if _, err := q.DequeueContext(context.Background(), evs[:], 1); err != nil {
			return nil // the stack is closed
		}
		ev := evs[0]
		if ev.Err != nil || ev.Type != exs.EventAccept {
			continue
		}
		ev.Socket.Accept(q, nil)
		if stall {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := echo(st, ev.Accepted); err != nil && !errors.Is(err, exs.ErrClosed) {
				fmt.Fprintln(os.Stderr, "exs: peer process: echo:", err)
			}
		}()
	}
}

// echo sends every message received on s back, until the end of the
// stream; then it shuts down and closes s.
func echo(st *exs.Stack, s *exs.Socket) error {
	const nbuf = 2
	q, err := st.Qcreate(2*nbuf + 4)
	if err != nil {
		return err
	}
	defer st.Qdelete(q)
	mem := make([]byte, nbuf*maxMsg)
	mh, err := st.Mregister(mem, exs.AccessRead|exs.AccessWrite)
	if err != nil {
		return err
	}
	defer st.Mderegister(mh)
	buf := func(i int) []byte { return mem[i*maxMsg : (i+1)*maxMsg] }
	for i := range nbuf {
		if err := s.Recv(q, buf(i), mh, 0, i); err != nil {
			return err
		}
	}
	var evs [1]exs.Event
	outstanding := nbuf
	ended := false
	for outstanding > 0 {
		if _, err := q.DequeueContext(context.Background(), evs[:], 1); err != nil {
			return err
		}
		ev := evs[0]
		outstanding--
		if ev.Err != nil {
			ended = true
			continue
		}
		i := ev.User.(int)
		switch {
		case ev.Type == exs.EventRecv && ev.N == 0:
			ended = true
		case ev.Type == exs.EventRecv:
			if err := s.Send(q, buf(i)[:ev.N], mh, 0, i); err != nil {
				return err
			}
			outstanding++
		case !ended:
			if err := s.Recv(q, buf(i), mh, 0, i); err != nil {
				return err
			}
			outstanding++
		}
	}
	if err := s.Shutdown(q, -1); err == nil {
		if _, err := q.DequeueContext(context.Background(), evs[:], 1); err != nil {
			return err
		}
	}
	if err := s.Close(q, -1); err != nil {
		return err
	}
	_, err = q.DequeueContext(context.Background(), evs[:], 1)
	return err
}

// peerProcess is a child process serving on shm: addresses in dir.
type peerProcess struct {
	dir string
	*childproc.Child
}

// startPeer starts the child process, which stops at the end of the test.
func startPeer(t *testing.T, stall bool) *peerProcess {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the same-host provider needs Linux")
	}
	// A short directory: Unix socket paths have a limit of about 100 bytes.
	dir, err := os.MkdirTemp("", "exs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	does := "echo"
	if stall {
		does = "stall"
	}
	c := childproc.StartTest(t, childproc.Spec{Env: []string{peerEnv + "=" + dir, peerBehaviourEnv + "=" + does}})
	if line, err := c.LineWithin(testTimeout); err != nil || line != "ready" {
		c.Kill()
		t.Fatalf("peer process said %q: %v", line, err)
	}
	return &peerProcess{dir: dir, Child: c}
}

// dial connects a socket of stack st to the peer's listener for typ and
// mode, with q as the socket's queue.
func (pp *peerProcess) dial(t *testing.T, st *exs.Stack, q *exs.Queue, typ exs.SockType, mode exs.Mode) *exs.Socket {
	t.Helper()
	s, err := st.Socket(typ, exs.WithMode(mode))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Connect(q, peerAddr(pp.dir, typ, mode), "connect"); err != nil {
		t.Fatal(err)
	}
	if ev := waitType(t, q, exs.EventConnect, "connect"); ev.Err != nil {
		t.Fatalf("connect: %v", ev.Err)
	}
	return s
}

// TestProcessEcho streams messages of random sizes (1 B to 4 MiB) to an
// echo server in another process over the same-host provider, with both
// socket types and every mode, and checks every byte that comes back.
func TestProcessEcho(t *testing.T) {
	pp := startPeer(t, false)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for _, typ := range allTypes {
		for _, mode := range allModes {
			t.Run(typ.String()+"/"+mode.String(), func(t *testing.T) {
				leaks := goleak.IgnoreCurrent()
				seed++
				r := rand.New(rand.NewPCG(seed, 7))
				st, err := exs.NewStack()
				if err != nil {
					t.Fatal(err)
				}
				echoOnce(t, pp, st, r, typ, mode)
				if err := st.Close(); err != nil {
					t.Fatal(err)
				}
				goleak.VerifyNone(t, leaks)
			})
		}
	}
}

func echoOnce(t *testing.T, pp *peerProcess, st *exs.Stack, r *rand.Rand, typ exs.SockType, mode exs.Mode) {
	// Messages: log-uniform sizes, one of the largest size, about 6 MiB.
	var sizes []int
	total := 0
	for total < 6<<20 {
		n := logSize(r, 1, maxMsg)
		if len(sizes) == 2 {
			n = maxMsg
		}
		sizes = append(sizes, n)
		total += n
	}
	const sendOut, recvOut = 4, 4
	q := newQueue(t, st, 2*(sendOut+recvOut)+8)
	s := pp.dial(t, st, q, typ, mode)

	// The source holds the stream from offset 0 and one more period, so
	// that the send at stream offset off is src[off%P:][:n].
	period := uint64(len(pattern))
	src := make([]byte, int(period)+maxMsg)
	fillStream(src, 0)
	smh, err := st.Mregister(src, exs.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	// Recv buffers: as large as a message for seqpacket, random sizes for
	// a stream.
	rsize := func() int {
		if typ == exs.SockSeqPacket {
			return maxMsg
		}
		return logSize(r, 1, maxMsg)
	}
	dst := make([]byte, recvOut*maxMsg)
	rmh, err := st.Mregister(dst, exs.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	type sendOp struct{ i int }
	type recvOp struct{ slot, size int }
	var sendOff uint64
	nextSend, sendsDone, sendsOut := 0, 0, 0
	post := func() {
		for sendsOut < sendOut && nextSend < len(sizes) {
			n := sizes[nextSend]
			p := sendOff % period
			if err := s.Send(q, src[p:p+uint64(n)], smh, 0, sendOp{nextSend}); err != nil {
				t.Fatalf("send %d: %v", nextSend, err)
			}
			sendOff += uint64(n)
			nextSend++
			sendsOut++
		}
	}
	recv := func(slot int) {
		n := rsize()
		if err := s.Recv(q, dst[slot*maxMsg:][:n], rmh, 0, recvOp{slot, n}); err != nil {
			t.Fatalf("recv: %v", err)
		}
	}
	for slot := range recvOut {
		recv(slot)
	}
	post()
	var recvOff uint64
	msg := 0
	evs := make([]exs.Event, 8)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for recvOff < uint64(total) || sendsDone < len(sizes) {
		n, err := q.DequeueContext(ctx, evs, 1)
		if err != nil {
			t.Fatalf("dequeue with %d of %d bytes back and %d of %d sends done: %v", recvOff, total, sendsDone, len(sizes), err)
		}
		for _, ev := range evs[:n] {
			if ev.Err != nil {
				t.Fatalf("%v: %v", ev.Type, ev.Err)
			}
			switch op := ev.User.(type) {
			case sendOp:
				if ev.N != sizes[op.i] {
					t.Fatalf("send %d completed with %d bytes, want %d", op.i, ev.N, sizes[op.i])
				}
				sendsDone++
				sendsOut--
				post()
			case recvOp:
				if ev.N == 0 {
					t.Fatalf("end of stream after %d of %d bytes", recvOff, total)
				}
				if typ == exs.SockSeqPacket && ev.N != sizes[msg] {
					t.Fatalf("message %d of %d bytes came back with %d", msg, sizes[msg], ev.N)
				}
				b := dst[op.slot*maxMsg:][:ev.N]
				if i := checkStream(b, recvOff); i >= 0 {
					t.Fatalf("wrong byte at stream offset %d (message %d)", recvOff+uint64(i), msg)
				}
				recvOff += uint64(ev.N)
				msg++
				recv(op.slot)
			}
		}
	}
	if recvOff != uint64(total) {
		t.Fatalf("%d bytes came back, sent %d", recvOff, total)
	}
	// An orderly end: shut down, see the peer's end of stream, close.
	if err := s.Shutdown(q, "shutdown"); err != nil {
		t.Fatal(err)
	}
	got := map[exs.EventType]int{}
	var seen []string
	for got[exs.EventShutdown] == 0 || got[exs.EventRecv] < recvOut {
		var evs [1]exs.Event
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := q.DequeueContext(ctx, evs[:], 1)
		cancel()
		if err != nil {
			t.Fatalf("after shutdown, events %q: %v; %+v", seen, err, s.Stats())
		}
		ev := evs[0]
		got[ev.Type]++
		seen = append(seen, fmt.Sprintf("%v %d %v", ev.Type, ev.N, ev.Err))
		if ev.Err != nil || ev.Type == exs.EventRecv && ev.N != 0 {
			t.Fatalf("after shutdown: %v of %d bytes: %v (events %q)", ev.Type, ev.N, ev.Err, seen)
		}
	}
	if err := s.Close(q, "close"); err != nil {
		t.Fatal(err)
	}
	if ev := waitType(t, q, exs.EventClose, "close"); ev.Err != nil {
		t.Fatal(ev.Err)
	}
	t.Logf("%d messages, %d bytes echoed; %+v", len(sizes), total, s.Stats().Stats)
}

// TestProcessPeerKilled kills the peer process while operations are
// posted: sends that wait for the peer's recvs or its stream buffer, recvs
// that nothing will fill. Each completes with an error matching
// ECONNRESET, nothing hangs, and no goroutine is left.
func TestProcessPeerKilled(t *testing.T) {
	leaks := goleak.IgnoreCurrent()
	pp := startPeer(t, true)
	st, err := exs.NewStack()
	if err != nil {
		t.Fatal(err)
	}
	q := newQueue(t, st, 64)
	mem := make([]byte, maxMsg)
	mh, err := st.Mregister(mem, exs.AccessRead|exs.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	posted := 0
	var socks []*exs.Socket
	for _, mode := range allModes {
		socks = append(socks, pp.dial(t, st, q, exs.SockStream, mode))
	}
	for _, s := range socks {
		if err := s.Recv(q, mem[:64], mh, 0, "recv"); err != nil {
			t.Fatal(err)
		}
		posted++
		// 3 MiB more than the peer's stream buffer: some sends stay
		// outstanding whatever the mode.
		for range 4 {
			if err := s.Send(q, mem[:1<<20], mh, 0, "send"); err != nil {
				t.Fatal(err)
			}
			posted++
		}
	}
	// Kill the peer once the sockets whose bytes can move (the peer
	// posts no recv: those with a stream buffer) have filled it.
	for _, s := range socks {
		if s.Mode() != exs.ModeDirectOnly {
			waitUntil(t, "the stream buffer fills", func() bool { return s.Stats().CreditStalls > 0 })
		}
	}
	if err := pp.Kill(); err != nil {
		t.Fatal(err)
	}
	failed := 0
	for range posted {
		ev := wait(t, q)
		switch {
		case ev.Err == nil && ev.Type == exs.EventSend:
			// Written into the peer's stream buffer before it died.
		case ev.Err == nil:
			t.Errorf("%v completed without an error", ev.Type)
		case !errors.Is(ev.Err, syscall.ECONNRESET) || !errors.Is(ev.Err, exs.ErrConnReset):
			t.Errorf("%v: %v, want ECONNRESET", ev.Type, ev.Err)
		default:
			failed++
		}
	}
	if want := 2 * len(allModes); failed < want {
		t.Errorf("%d operations failed with ECONNRESET, want at least %d", failed, want)
	}
	// Operations posted now fail too, and Close completes.
	for _, s := range socks {
		if err := s.Recv(q, mem[:64], mh, 0, "late"); err == nil {
			if ev := waitType(t, q, exs.EventRecv, "late"); !errors.Is(ev.Err, syscall.ECONNRESET) {
				t.Errorf("recv after the reset: %v, want ECONNRESET", ev.Err)
			}
		}
		if err := s.Close(q, "close"); err != nil {
			t.Fatal(err)
		}
		waitType(t, q, exs.EventClose, "close")
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	<-pp.Exited()
	if st := pp.ProcessState(); st == nil || st.Success() {
		t.Errorf("the killed peer exited cleanly")
	}
	goleak.VerifyNone(t, leaks)
}
