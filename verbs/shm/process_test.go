//go:build linux

package shm_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/shm"
	"github.com/exsgo/exs/verbs/verbstest"
)

// modeEnv tells a peer process which provider options to use, so that
// both processes of a test run the same mode.
const modeEnv = "EXS_SHM_TEST_MODE"

// modeOptions returns the options of a test mode.
func modeOptions(mode string) []shm.Option {
	switch mode {
	case "direct":
		return []shm.Option{shm.WithDirectMin(0)}
	case "ring":
		return []shm.Option{shm.WithDirectMin(verbs.MaxMessage + 1)}
	case "nocma":
		return []shm.Option{shm.WithoutCMA(), shm.WithRingSizes(16<<10, 16<<10)}
	case "nocma-default":
		return []shm.Option{shm.WithoutCMA()}
	case "shared-nocma":
		return []shm.Option{shm.WithoutCMA(), shm.WithRingSizes(16<<10, 16<<10)}
	}
	return nil
}

// modeProvider returns the provider of a test mode: in the "shared" modes
// it offers its shared allocator to the suite, whose regions then come
// from Provider.Alloc on both sides.
func modeProvider(mode string) verbs.Provider {
	p := newProvider(modeOptions(mode)...)
	if strings.HasPrefix(mode, "shared") {
		return sharedAlloc{p}
	}
	return p
}

// sharedAlloc offers the provider's shared allocator to the suite
// (verbstest.RegionAllocator).
type sharedAlloc struct{ *shm.Provider }

func (s sharedAlloc) AllocRegion(n int) ([]byte, error) { return s.Alloc(n) }
func (s sharedAlloc) FreeRegion(b []byte) error         { return s.Free(b) }

// TestMain lets this test binary serve as the peer process of the
// cross-process tests.
func TestMain(m *testing.M) {
	shm.SetSleepCap(10 * time.Minute)
	if addr := os.Getenv(receiverEnv); addr != "" {
		os.Exit(receiverMain(addr))
	}
	if spec := os.Getenv(credChildEnv); spec != "" {
		os.Exit(credChildMain(spec))
	}
	verbstest.PeerProcessMain(func() verbs.Provider { return modeProvider(os.Getenv(modeEnv)) })
	os.Exit(m.Run())
}

// processEnv runs the suite's far side in a child process (this test
// binary, run again).
func processEnv(mode string) func(t *testing.T) verbstest.Env {
	return func(t *testing.T) verbstest.Env {
		dir := sockDir(t)
		return verbstest.Env{
			Provider:   modeProvider(mode),
			Peer:       verbstest.StartPeerProcess(t, "shm:"+dir+"/peer", modeEnv+"="+mode),
			ListenAddr: "shm:" + dir + "/local",
		}
	}
}

// allModesEnv, set to 1 (as .ci/run does), makes TestConformanceProcess
// run every mode; without it, it runs the three whose paths between two
// processes the in-process suites do not take (see processModes).
const allModesEnv = "EXS_SHM_ALL_MODES"

// processModes returns the modes of TestConformanceProcess: defaults,
// every WRITE and READ by the initiator with cross-memory attach (its
// checks against the published registrations face the suite's
// violations), and the regions of both sides from the shared allocator
// without cross-memory attach on small rings (the peer's arenas mapped
// from another process, every byte through the rings); with allModesEnv
// also everything through the rings, without cross-memory attach, and the
// shared allocator with cross-memory attach, whose providers' paths the
// in-process suites (TestConformanceRing, TestConformanceNoCMA,
// TestConformanceShared) take in every run.
func processModes() []string {
	if os.Getenv(allModesEnv) == "1" {
		return []string{"default", "direct", "ring", "nocma", "shared", "shared-nocma"}
	}
	return []string{"default", "direct", "shared-nocma"}
}

// TestConformanceProcess runs the suite with the peer in another process,
// in each mode of processModes.
func TestConformanceProcess(t *testing.T) {
	for _, mode := range processModes() {
		t.Run(mode, func(t *testing.T) {
			verbstest.Run(t, processEnv(mode))
		})
	}
}

// TestPeerKilled kills the peer process while transfers of every kind
// are in flight: every work request posted completes, those after the
// death with an error, the queue pair records a reset connection, and no
// goroutine is left.
func TestPeerKilled(t *testing.T) {
	for _, mode := range []string{"default", "direct", "nocma", "shared"} {
		t.Run(mode, func(t *testing.T) {
			peerKilled(t, mode)
		})
	}
}

func peerKilled(t *testing.T, mode string) {
	leaks := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) })
	ctx, cancel := context.WithTimeout(context.Background(), verbstest.Timeout)
	t.Cleanup(cancel)
	dir := sockDir(t)
	pp := verbstest.StartPeerProcess(t, "shm:"+dir+"/peer", modeEnv+"="+mode)
	p := newProvider(modeOptions(mode)...)
	dev, err := verbs.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })

	const depth = 64
	addr, err := pp.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := pp.Serve(verbstest.Answer{QP: verbstest.QPSpec{RecvDepth: 4 * depth, CQDepth: 8 * depth}}); err != nil {
		t.Fatal(err)
	}
	pd, _ := dev.AllocPD()
	cq, err := dev.CreateCQ(4*depth, verbs.CQOptions{})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, SendDepth: depth, SignalAll: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := qp.Connect(ctx, addr, nil); err != nil {
		t.Fatal(err)
	}
	pq, _, err := pp.Served(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const big = 1 << 20
	target, err := pq.Register(big, mreg.LocalWrite|mreg.RemoteWrite|mreg.RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	rbuf, err := pq.Register(64<<10, mreg.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 * depth {
		if err := pq.PostRecv(uint64(i), []verbstest.PeerSGE{{MR: rbuf, Len: 64 << 10}}); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, big)
	src, err := pd.RegisterMR(buf, mreg.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	wrs := []verbs.SendWR{
		{Opcode: verbs.OpWrite, SGL: []verbs.SGE{src.SGE(0, big)}, RKey: target.RKey(), RemoteAddr: target.Addr()},
		{Opcode: verbs.OpSend, SGL: []verbs.SGE{src.SGE(0, 64<<10)}},
		{Opcode: verbs.OpRead, SGL: []verbs.SGE{src.SGE(0, big)}, RKey: target.RKey(), RemoteAddr: target.Addr()},
		{Opcode: verbs.OpWrite, SGL: []verbs.SGE{src.SGE(0, 64)}, RKey: target.RKey(), RemoteAddr: target.Addr()},
		{Opcode: verbs.OpSendWithImm, SGL: []verbs.SGE{src.SGE(0, 100)}, Imm: 7},
	}

	// Post without pause, polling what completes, until the queue pair
	// fails; kill the peer once transfers have been going for a while.
	var (
		mu        sync.Mutex
		posted    int
		completed int
		failedAt  = -1
		badAfter  int
	)
	wcs := make([]verbs.WC, 64)
	poll := func() int {
		n := cq.Poll(wcs)
		mu.Lock()
		defer mu.Unlock()
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.StatusSuccess && failedAt < 0 {
				failedAt = completed
			}
			if failedAt >= 0 && wc.Status == verbs.StatusSuccess {
				badAfter++
			}
			completed++
		}
		return n
	}
	killAt := time.Now().Add(100 * time.Millisecond)
	killed := false
	for i := 0; ; i++ {
		if !killed && time.Now().After(killAt) {
			if err := pp.Kill(); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
		select {
		case <-qp.Done():
		default:
			wr := wrs[i%len(wrs)]
			wr.WRID = uint64(i)
			err := qp.PostSend(wr)
			switch {
			case err == nil:
				mu.Lock()
				posted++
				mu.Unlock()
			case errors.Is(err, verbs.ErrQueueFull):
				poll()
			default:
				t.Fatalf("PostSend: %v", err)
			}
			continue
		}
		break
	}
	if !killed {
		t.Fatal("the queue pair failed before the peer was killed")
	}
	for {
		mu.Lock()
		done := completed == posted
		mu.Unlock()
		if done {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%d of %d work requests completed after the peer's death", completed, posted)
		}
		if poll() == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	t.Logf("%d work requests posted, the first failure was number %d", posted, failedAt)
	if failedAt < 0 {
		// Every work request had completed when the death was noticed
		// (the direct path completes WRITEs and READs in the poster's
		// goroutine): one posted now must fail.
		t.Logf("nothing was outstanding when the peer died: posting one more")
		wr := wrs[0]
		wr.WRID = uint64(posted)
		if err := qp.PostSend(wr); err == nil {
			posted++
			for completed < posted && ctx.Err() == nil {
				if poll() == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		} else {
			failedAt = completed
		}
	}
	if failedAt < 0 || badAfter > 0 {
		t.Errorf("failures start at %d, %d successes after the first failure", failedAt, badAfter)
	}
	if err := qp.Err(); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("Err = %v, want ECONNRESET", err)
	}
	if n := cq.Poll(wcs); n != 0 {
		t.Errorf("%d completions more than posted", n)
	}
	if err := src.Deregister(); err != nil {
		t.Errorf("deregister after the flush: %v", err)
	}
}

// TestStats checks that a connection reports whether it uses cross-memory
// attach, and why not.
func TestStats(t *testing.T) {
	for _, mode := range []string{"default", "nocma"} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), verbstest.Timeout)
			defer cancel()
			dir := sockDir(t)
			a, b := newProvider(modeOptions(mode)...), newProvider(modeOptions(mode)...)
			qa, qb := connectPair(t, ctx, a, b, "shm:"+dir+"/s")
			_ = qb
			st := a.Stats()
			if len(st) != 1 {
				t.Fatalf("Stats: %d connections, want 1", len(st))
			}
			s := st[0]
			if s.QPNum != qa.Num() || s.PeerPID != os.Getpid() {
				t.Errorf("Stats = %+v, want QP %d, pid %d", s, qa.Num(), os.Getpid())
			}
			if mode == "nocma" {
				if s.CMA || !strings.Contains(s.CMAError, "disabled") {
					t.Errorf("Stats = %+v, want CMA refused", s)
				}
			} else if !s.CMA {
				t.Errorf("Stats = %+v, want CMA", s)
			}
		})
	}
}

// connectPair connects a queue pair over provider a to one over b, which
// listens at addr. Cleanups close both devices.
func connectPair(t testing.TB, ctx context.Context, a, b verbs.Provider, addr string) (*verbs.QP, *verbs.QP) {
	t.Helper()
	return connectPairCQ(t, ctx, a, b, addr, verbs.CQOptions{Wait: verbs.WaitBusyPoll})
}

// connectPairCQ is connectPair with CQs that wait as cqOpts says.
func connectPairCQ(t testing.TB, ctx context.Context, a, b verbs.Provider, addr string, cqOpts verbs.CQOptions) (*verbs.QP, *verbs.QP) {
	t.Helper()
	return connectPairQP(t, ctx, a, b, addr, cqOpts, verbs.QPConfig{}, verbs.QPConfig{})
}

// connectPairQP is connectPairCQ with queue pairs configured as cfgA and
// cfgB (their CQs and depths set here).
func connectPairQP(t testing.TB, ctx context.Context, a, b verbs.Provider, addr string, cqOpts verbs.CQOptions, cfgA, cfgB verbs.QPConfig) (*verbs.QP, *verbs.QP) {
	t.Helper()
	da, err := verbs.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close() })
	db, err := verbs.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ln, err := db.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	mk := func(d *verbs.Device, cfg verbs.QPConfig) *verbs.QP {
		pd, _ := d.AllocPD()
		cq, err := d.CreateCQ(1024, cqOpts)
		if err != nil {
			t.Fatal(err)
		}
		cfg.SendCQ, cfg.RecvCQ, cfg.SendDepth, cfg.RecvDepth = cq, cq, 256, 256
		qp, err := pd.CreateQP(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return qp
	}
	qa, qb := mk(da, cfgA), mk(db, cfgB)
	errc := make(chan error, 1)
	go func() {
		r, err := ln.Accept(ctx)
		if err == nil {
			err = r.Accept(qb, nil)
		}
		errc <- err
	}()
	if _, err := qa.Connect(ctx, addr, nil); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	return qa, qb
}
