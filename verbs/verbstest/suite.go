package verbstest

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// Timeout bounds each test of the suite: its context ends then. The
// watchdog panics, dumping every goroutine, WatchdogGrace later.
const (
	Timeout       = 20 * time.Second
	WatchdogGrace = 10 * time.Second
)

// quiet is how long the suite waits to see that nothing more happens (no
// extra completion, no premature one).
const quiet = 30 * time.Millisecond

// test is one test of the suite.
type test struct {
	name string
	fn   func(x *st)
}

// tests lists the suite, grouped by file.
var tests = concat(cmTests, dataTests, protectionTests, flushTests, limitTests, concurrencyTests)

// relaxedTests run a second time, as Relaxed/name, with the queue pairs of
// both ends created with verbs.QPConfig.RelaxedWritePlacement: the tests
// whose work requests place a WRITE behind a message that consumes a RECV,
// and those that check what the relaxed rules still promise.
var relaxedTests = pick(tests,
	"Data/ZeroLength", "Order/SendAfterWrites", "Order/PeerToLocal", "Order/WritesBehindSends", "RNR/Wait",
	"Protection/Remote",
	"Flush/OnDisconnect", "Flush/OnClose", "Flush/OnPeerDisconnect", "Flush/OnPeerClose",
	"Flush/DeliveredBeforePeerClose", "Flush/DeliveredBeforePeerDisconnect")

// pick returns the tests of list with the given names, in the order of
// names; a name not in list is a bug of the suite, and it panics.
func pick(list []test, names ...string) []test {
	var out []test
	for _, n := range names {
		i := slices.IndexFunc(list, func(tc test) bool { return tc.name == n })
		if i < 0 {
			panic("verbstest: no test " + n)
		}
		out = append(out, list[i])
	}
	return out
}

func concat(lists ...[]test) []test {
	var out []test
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// Run runs the conformance suite, one subtest per behaviour, each with a
// fresh Env from newEnv. The suite closes the Env's Peer when the subtest
// ends; newEnv registers any other cleanup with t.Cleanup.
//
// The tests that depend on verbs.QPConfig.RelaxedWritePlacement run twice:
// as name, with the attribute off, and as Relaxed/name, with it on for the
// queue pairs of both ends, where they check what the relaxed rules still
// promise. A provider passes both, whether it honours the attribute or
// ignores it.
func Run(t *testing.T, newEnv func(t *testing.T) Env) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			runOne(t, newEnv, tc.fn, false)
		})
	}
	for _, tc := range relaxedTests {
		t.Run("Relaxed/"+tc.name, func(t *testing.T) {
			runOne(t, newEnv, tc.fn, true)
		})
	}
}

// st is the state of one test: the testing.T, a context bounded by
// Timeout, the Env and the local device.
type st struct {
	*testing.T
	ctx context.Context
	env Env
	dev *verbs.Device
	wd  *time.Timer // the watchdog
	// relaxed: the test's queue pairs, local and peer, are created with
	// verbs.QPConfig.RelaxedWritePlacement.
	relaxed bool
}

func runOne(t *testing.T, newEnv func(t *testing.T) Env, fn func(x *st), relaxed bool) {
	leaks := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) }) // registered first: runs last

	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	t.Cleanup(cancel)
	name := t.Name()
	wd := time.AfterFunc(Timeout+WatchdogGrace, func() {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		panic(fmt.Sprintf("verbstest: %s still running %v after its deadline; goroutines:\n%s", name, WatchdogGrace, buf))
	})
	t.Cleanup(func() { wd.Stop() })

	env := newEnv(t)
	t.Cleanup(func() {
		if err := env.Peer.Close(); err != nil {
			t.Errorf("Peer.Close: %v", err)
		}
	})
	dev, err := verbs.Open(env.Provider)
	if err != nil {
		t.Fatalf("verbs.Open: %v", err)
	}
	t.Cleanup(func() { dev.Close() })
	fn(&st{T: t, ctx: ctx, env: env, dev: dev, wd: wd, relaxed: relaxed})
}

// run runs fn as a subtest with a deadline of its own, Timeout from now,
// and re-arms the watchdog to match: table tests may take longer in total
// than one deadline.
func (x *st) run(name string, fn func(y *st)) {
	x.Helper()
	x.Run(name, func(t *testing.T) {
		x.wd.Reset(Timeout + WatchdogGrace)
		ctx, cancel := context.WithTimeout(context.Background(), Timeout)
		defer cancel()
		fn(&st{T: t, ctx: ctx, env: x.env, dev: x.dev, wd: x.wd, relaxed: x.relaxed})
	})
}

// local creates a local queue pair (relaxed in a Relaxed test).
func (x *st) local(spec QPSpec) *localQP {
	x.Helper()
	spec.RelaxedWritePlacement = spec.RelaxedWritePlacement || x.relaxed
	q, err := newLocalQP(x.dev, spec)
	if err != nil {
		x.Fatalf("create local queue pair: %v", err)
	}
	return q
}

// pair returns a local queue pair of spec connected to a peer queue pair
// of peerSpec.
func (x *st) pair(spec, peerSpec QPSpec) (*localQP, PeerQP) {
	x.Helper()
	q := x.local(spec)
	p := x.connect(q, peerSpec, nil, nil)
	return q, p
}

// connect connects q to a new peer queue pair (relaxed in a Relaxed
// test), with private data both ways, checking that they arrive.
func (x *st) connect(q *localQP, peerSpec QPSpec, req, rep []byte) PeerQP {
	x.Helper()
	peerSpec.RelaxedWritePlacement = peerSpec.RelaxedWritePlacement || x.relaxed
	addr, err := x.env.Peer.Listen(x.ctx)
	if err != nil {
		x.Fatalf("Peer.Listen: %v", err)
	}
	if err := x.env.Peer.Serve(Answer{PrivateData: rep, QP: peerSpec}); err != nil {
		x.Fatalf("Peer.Serve: %v", err)
	}
	got, err := q.qp.Connect(x.ctx, addr, req)
	if err != nil {
		x.Fatalf("Connect(%s): %v", addr, err)
	}
	p, gotReq, err := x.env.Peer.Served(x.ctx)
	if err != nil {
		x.Fatalf("Peer.Served: %v", err)
	}
	if !bytes.Equal(got, rep) {
		x.Errorf("accept private data: got %d bytes, want %d (%s)", len(got), len(rep), diffBytes(rep, got))
	}
	if !bytes.Equal(gotReq, req) {
		x.Errorf("request private data at the peer: got %d bytes, want %d (%s)", len(gotReq), len(req), diffBytes(req, gotReq))
	}
	if s := q.qp.State(); s != verbs.StateReadyToSend {
		x.Errorf("local state after Connect = %v, want ReadyToSend", s)
	}
	return p
}

// register registers a local region with guards.
func (x *st) register(q *localQP, size int, access mreg.Access) *localMR {
	x.Helper()
	m, err := q.register(size, access)
	if err != nil {
		x.Fatalf("register %d bytes: %v", size, err)
	}
	return m
}

// peerRegister registers a peer region with guards.
func (x *st) peerRegister(p PeerQP, size int, access mreg.Access) PeerMR {
	x.Helper()
	m, err := p.Register(size, access)
	if err != nil {
		x.Fatalf("Peer register %d bytes: %v", size, err)
	}
	return m
}

// post posts send work requests on q, failing the test on error.
func (x *st) post(q *localQP, wrs ...verbs.SendWR) {
	x.Helper()
	for _, wr := range wrs {
		if err := q.qp.PostSend(wr); err != nil {
			x.Fatalf("PostSend(%v, wrid %d): %v", wr.Opcode, wr.WRID, err)
		}
	}
}

// postRecv posts a RECV on q.
func (x *st) postRecv(q *localQP, wrID uint64, sgl ...verbs.SGE) {
	x.Helper()
	if err := q.qp.PostRecv(verbs.RecvWR{WRID: wrID, SGL: sgl}); err != nil {
		x.Fatalf("PostRecv(wrid %d): %v", wrID, err)
	}
}

// peerPost posts send work requests on p.
func (x *st) peerPost(p PeerQP, wrs ...PeerSendWR) {
	x.Helper()
	for _, wr := range wrs {
		if err := p.PostSend(wr); err != nil {
			x.Fatalf("Peer PostSend(%v, wrid %d): %v", wr.Opcode, wr.WRID, err)
		}
	}
}

// peerRecv posts a RECV on p.
func (x *st) peerRecv(p PeerQP, wrID uint64, sgl ...PeerSGE) {
	x.Helper()
	if err := p.PostRecv(wrID, sgl); err != nil {
		x.Fatalf("Peer PostRecv(wrid %d): %v", wrID, err)
	}
}

// poll waits for exactly n completions on q's CQ (and checks, after a
// quiet spell, that no more come when exact is set).
func (x *st) poll(q *localQP, n int) []verbs.WC {
	x.Helper()
	wcs, err := q.Poll(x.ctx, n)
	if err != nil {
		x.Fatalf("local completions: %v (got %v)", err, wcs)
	}
	return wcs
}

// peerPoll waits for n completions on p.
func (x *st) peerPoll(p PeerQP, n int) []verbs.WC {
	x.Helper()
	wcs, err := p.Poll(x.ctx, n)
	if err != nil {
		x.Fatalf("peer completions: %v (got %v)", err, wcs)
	}
	return wcs
}

// noMore checks that no completion arrives on q within the quiet spell.
func (x *st) noMore(q *localQP) {
	x.Helper()
	time.Sleep(quiet)
	var buf [8]verbs.WC
	if n := q.cq.Poll(buf[:]); n > 0 {
		x.Errorf("unexpected completions: %v", buf[:n])
	}
}

// peerNoMore checks that no completion arrives on p within the quiet
// spell.
func (x *st) peerNoMore(p PeerQP) {
	x.Helper()
	time.Sleep(quiet)
	wcs, err := p.Poll(x.ctx, 0)
	if err != nil {
		x.Fatalf("peer poll: %v", err)
	}
	if len(wcs) > 0 {
		x.Errorf("unexpected peer completions: %v", wcs)
	}
}

// waitError waits until the local queue pair is in Error.
func (x *st) waitError(q *localQP) {
	x.Helper()
	if err := q.WaitError(x.ctx); err != nil {
		x.Fatal(err)
	}
	if s := q.qp.State(); s != verbs.StateError {
		x.Errorf("local state = %v, want Error", s)
	}
}

// peerWaitError waits until the peer queue pair is in Error.
func (x *st) peerWaitError(p PeerQP) {
	x.Helper()
	if err := p.WaitError(x.ctx); err != nil {
		x.Fatalf("peer: %v", err)
	}
}

// wantWCs compares completions, ignoring QPNum, with cmp.Diff.
func (x *st) wantWCs(what string, want, got []verbs.WC) {
	x.Helper()
	if diff := cmp.Diff(want, stripQPN(got)); diff != "" {
		x.Errorf("%s completions (-want +got):\n%s", what, diff)
	}
}

// stripQPN returns wcs with QPNum cleared.
func stripQPN(wcs []verbs.WC) []verbs.WC {
	out := make([]verbs.WC, len(wcs))
	for i, wc := range wcs {
		wc.QPNum = 0
		out[i] = wc
	}
	return out
}

// pattern returns n bytes derived from seed, none equal to GuardByte or
// FillByte.
func pattern(seed, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		v := byte(seed*31 + i*7 + 1)
		if v == GuardByte || v == FillByte {
			v ^= 0x01
		}
		b[i] = v
	}
	return b
}

// expectRegion checks a region read with guards: the guards intact and the
// region equal to want.
func (x *st) expectRegion(what string, buf, want []byte) {
	x.Helper()
	if len(buf) != len(want)+2*Guard {
		x.Fatalf("%s: read %d bytes, want %d", what, len(buf), len(want)+2*Guard)
	}
	for i := range Guard {
		if buf[i] != GuardByte || buf[len(buf)-1-i] != GuardByte {
			x.Errorf("%s: guard bytes overwritten", what)
			break
		}
	}
	if got := buf[Guard : len(buf)-Guard]; !bytes.Equal(got, want) {
		x.Errorf("%s: region differs: %s", what, diffBytes(want, got))
	}
}

// fill returns n bytes of FillByte.
func fill(n int) []byte { return bytes.Repeat([]byte{FillByte}, n) }

// diffBytes describes the first difference between want and got.
func diffBytes(want, got []byte) string {
	for i := range min(len(want), len(got)) {
		if want[i] != got[i] {
			return fmt.Sprintf("first difference at byte %d: got %#x, want %#x", i, got[i], want[i])
		}
	}
	if len(want) != len(got) {
		return fmt.Sprintf("lengths differ: got %d, want %d", len(got), len(want))
	}
	return "equal"
}

// readPeer reads a peer region with guards.
func (x *st) readPeer(m PeerMR) []byte {
	x.Helper()
	b, err := m.Read()
	if err != nil {
		x.Fatalf("peer region read: %v", err)
	}
	return b
}
