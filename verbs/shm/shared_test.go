//go:build linux

package shm_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/shm"
	"github.com/exsgo/exs/verbs/verbstest"
)

// TestAllocFree checks the shared allocator's bookkeeping: page-aligned
// zeroed memory, Free refused while registered and for foreign or freed
// memory.
func TestAllocFree(t *testing.T) {
	p := newProvider()
	if _, err := p.Alloc(0); !errors.Is(err, mreg.ErrInvalid) {
		t.Errorf("Alloc(0) = %v, want mreg.ErrInvalid", err)
	}
	b, err := p.Alloc(5000)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 5000 || addrOf(b)%uint64(os.Getpagesize()) != 0 || bytes.Count(b, []byte{0}) != len(b) {
		t.Fatalf("Alloc(5000): len %d, address %#x, want 5000 zeroed page-aligned bytes", len(b), addrOf(b))
	}
	dev, err := verbs.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	mr, err := pd.RegisterMR(b[100:200], mreg.LocalWrite|mreg.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Free(b); !errors.Is(err, mreg.ErrBusy) {
		t.Errorf("Free of registered memory = %v, want mreg.ErrBusy", err)
	}
	if err := p.Free(b[1:]); !errors.Is(err, mreg.ErrInvalid) {
		t.Errorf("Free of a slice not at the start = %v, want mreg.ErrInvalid", err)
	}
	if err := p.Free(make([]byte, 10)); !errors.Is(err, mreg.ErrInvalid) {
		t.Errorf("Free of heap memory = %v, want mreg.ErrInvalid", err)
	}
	if err := mr.Deregister(); err != nil {
		t.Fatal(err)
	}
	if err := p.Free(b); err != nil {
		t.Errorf("Free: %v", err)
	}
	if err := p.Free(b); !errors.Is(err, mreg.ErrInvalid) {
		t.Errorf("second Free = %v, want mreg.ErrInvalid", err)
	}
}

// TestConformanceShared runs the suite in one process with the regions of
// both sides from the shared allocator: with the defaults, and without
// cross-memory attach (where the plain copy into a mapped arena is the
// only path that bypasses the ring).
func TestConformanceShared(t *testing.T) {
	for _, mode := range []string{"shared", "shared-nocma"} {
		t.Run(mode, func(t *testing.T) {
			verbstest.Run(t, func(t *testing.T) verbstest.Env {
				dir := sockDir(t)
				return verbstest.Env{
					Provider:   modeProvider(mode),
					Peer:       verbstest.NewLocalPeer(modeProvider(mode), "shm:"+dir+"/peer"),
					ListenAddr: "shm:" + dir + "/local",
				}
			})
		})
	}
}

// sharedConn is a local queue pair connected to a queue pair of a peer
// process whose regions come from its shared allocator.
type sharedConn struct {
	p   *shm.Provider
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
	pq  verbstest.PeerQP
	pp  *verbstest.ProcessPeer
	src []byte
	mr  *verbs.MR
}

// newSharedConn connects a queue pair (with RelaxedWritePlacement if
// relaxed) to one in a peer process, in the given test mode.
func newSharedConn(t *testing.T, mode string, srcLen int, relaxed bool) *sharedConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), verbstest.Timeout)
	defer cancel()
	dir := sockDir(t)
	pp := verbstest.StartPeerProcess(t, "shm:"+dir+"/peer", modeEnv+"="+mode)
	p := newProvider(modeOptions(mode)...)
	dev, err := verbs.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	addr, err := pp.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := pp.Serve(verbstest.Answer{}); err != nil {
		t.Fatal(err)
	}
	pd, _ := dev.AllocPD()
	cq, err := dev.CreateCQ(256, verbs.CQOptions{})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, SendDepth: 64, SignalAll: true, RelaxedWritePlacement: relaxed})
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
	src := make([]byte, srcLen)
	for i := range src {
		src[i] = byte(i*7 + 1)
	}
	mr, err := pd.RegisterMR(src, mreg.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	return &sharedConn{p: p, pd: pd, cq: cq, qp: qp, pq: pq, pp: pp, src: src, mr: mr}
}

// waitArenas waits until the connection has mapped n of the peer's arenas.
func (c *sharedConn) waitArenas(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(verbstest.Timeout)
	for {
		st := c.p.Stats()
		if len(st) == 1 && st[0].PeerArenas >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Stats = %+v, want %d peer arenas mapped", st, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func (c *sharedConn) shared() uint64 {
	var n uint64
	for _, s := range c.p.Stats() {
		n += s.Shared
	}
	return n
}

// do posts one signaled work request and returns its completion.
func (c *sharedConn) do(t *testing.T, wr verbs.SendWR) verbs.WC {
	t.Helper()
	if err := c.qp.PostSend(wr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), verbstest.Timeout)
	defer cancel()
	wcs := make([]verbs.WC, 1)
	if _, err := c.cq.Wait(ctx, wcs, 1); err != nil {
		t.Fatal(err)
	}
	return wcs[0]
}

// TestSharedWrite writes into a peer process's memory from the shared
// allocator: the bytes land where they should (checked byte for byte, the
// guards around untouched), by a plain copy; READs come back the same way;
// a forged key and an out-of-bounds address are refused without a byte
// written.
func TestSharedWrite(t *testing.T) {
	leaks := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) })
	const size = 1 << 20
	for _, mode := range []string{"shared", "shared-nocma"} {
		t.Run(mode, func(t *testing.T) {
			c := newSharedConn(t, mode, size, false)
			target, err := c.pq.Register(size, mreg.LocalWrite|mreg.RemoteWrite|mreg.RemoteRead)
			if err != nil {
				t.Fatal(err)
			}
			c.waitArenas(t, 1)
			want, err := target.Read()
			if err != nil {
				t.Fatal(err)
			}
			// The second WRITE of the whole region goes into memory the
			// first one left in the cache: it is copied through the cache
			// (bigcopy.Recent), the first with non-temporal stores.
			for k, w := range []struct{ off, n int }{{0, 64}, {size - 64, 64}, {4095, 5000}, {0, size}, {12345, 1}, {0, size}} {
				for i := w.off; i < w.off+w.n; i++ {
					c.src[i] += byte(k + 1) // new bytes each time
				}
				wc := c.do(t, verbs.SendWR{Opcode: verbs.OpWrite, SGL: []verbs.SGE{c.mr.SGE(w.off, w.n)},
					RKey: target.RKey(), RemoteAddr: target.Addr() + uint64(w.off)})
				if wc.Status != verbs.StatusSuccess {
					t.Fatalf("WRITE %d bytes at %d: %v", w.n, w.off, wc.Status)
				}
				copy(want[verbstest.Guard+w.off:], c.src[w.off:w.off+w.n])
				got, err := target.Read()
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("after WRITE %d bytes at %d: region and guards differ from the expected bytes", w.n, w.off)
				}
			}
			if n := c.shared(); n != 6 {
				t.Errorf("Shared = %d, want 6 (every WRITE a plain copy)", n)
			}
			// A READ of the region back into the (cleared) source.
			clear(c.src)
			wc := c.do(t, verbs.SendWR{Opcode: verbs.OpRead, SGL: []verbs.SGE{c.mr.SGE(0, size)},
				RKey: target.RKey(), RemoteAddr: target.Addr()})
			if wc.Status != verbs.StatusSuccess || !bytes.Equal(c.src, want[verbstest.Guard:verbstest.Guard+size]) {
				t.Fatalf("READ: %v, bytes equal %v", wc.Status, bytes.Equal(c.src, want[verbstest.Guard:verbstest.Guard+size]))
			}
			if n := c.shared(); n != 7 {
				t.Errorf("Shared = %d, want 7", n)
			}
		})
	}
	violations := []struct {
		name string
		wr   func(target verbstest.PeerMR, mr *verbs.MR) verbs.SendWR
	}{
		{"ForgedKey", func(target verbstest.PeerMR, mr *verbs.MR) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.OpWrite, SGL: []verbs.SGE{mr.SGE(0, 64)},
				RKey: target.RKey() ^ (mreg.MaxRegions + 1), RemoteAddr: target.Addr()}
		}},
		{"LocalKey", func(target verbstest.PeerMR, mr *verbs.MR) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.OpWrite, SGL: []verbs.SGE{mr.SGE(0, 64)},
				RKey: target.LKey(), RemoteAddr: target.Addr()}
		}},
		{"PastEnd", func(target verbstest.PeerMR, mr *verbs.MR) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.OpWrite, SGL: []verbs.SGE{mr.SGE(0, 64)},
				RKey: target.RKey(), RemoteAddr: target.Addr() + uint64(target.Len()) - 32}
		}},
		{"BeforeStart", func(target verbstest.PeerMR, mr *verbs.MR) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.OpWrite, SGL: []verbs.SGE{mr.SGE(0, 16)},
				RKey: target.RKey(), RemoteAddr: target.Addr() - 8}
		}},
		{"LargePastEnd", func(target verbstest.PeerMR, mr *verbs.MR) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.OpWrite, SGL: []verbs.SGE{mr.SGE(0, 64<<10)},
				RKey: target.RKey(), RemoteAddr: target.Addr() + 1}
		}},
	}
	for _, v := range violations {
		t.Run(v.name, func(t *testing.T) {
			c := newSharedConn(t, "shared", 64<<10, false)
			target, err := c.pq.Register(64<<10, mreg.LocalWrite|mreg.RemoteWrite)
			if err != nil {
				t.Fatal(err)
			}
			c.waitArenas(t, 1)
			before, _ := target.Read()
			wc := c.do(t, v.wr(target, c.mr))
			if wc.Status != verbs.StatusRemoteAccessError {
				t.Errorf("status %v, want %v", wc.Status, verbs.StatusRemoteAccessError)
			}
			after, _ := target.Read()
			if !bytes.Equal(before, after) {
				t.Error("a refused WRITE changed the peer's memory")
			}
			if n := c.shared(); n != 0 {
				t.Errorf("Shared = %d after a refused WRITE", n)
			}
		})
	}
}

// TestSharedDeregister deregisters a region of the peer's shared memory
// while this side writes into it without pause: deregistration succeeds,
// later WRITEs are refused, and no byte changes after it returned.
func TestSharedDeregister(t *testing.T) {
	leaks := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) })
	const size = 1 << 20
	c := newSharedConn(t, "shared", size, false)
	target, err := c.pq.Register(size, mreg.LocalWrite|mreg.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	c.waitArenas(t, 1)
	var wg sync.WaitGroup
	var ok, failed int
	wg.Add(1)
	go func() {
		defer wg.Done()
		wcs := make([]verbs.WC, 1)
		ctx, cancel := context.WithTimeout(context.Background(), verbstest.Timeout)
		defer cancel()
		for i := 0; ; i++ {
			c.src[0] = byte(i) // every WRITE differs
			if err := c.qp.PostSend(verbs.SendWR{Opcode: verbs.OpWrite, SGL: []verbs.SGE{c.mr.SGE(0, size)},
				RKey: target.RKey(), RemoteAddr: target.Addr()}); err != nil {
				return
			}
			if _, err := c.cq.Wait(ctx, wcs, 1); err != nil {
				return
			}
			if wcs[0].Status != verbs.StatusSuccess {
				failed++
				return
			}
			ok++
		}
	}()
	time.Sleep(50 * time.Millisecond)
	if err := target.Deregister(); err != nil {
		t.Fatalf("deregister while the peer writes: %v", err)
	}
	snap, _ := target.Read()
	wg.Wait()
	after, _ := target.Read()
	if !bytes.Equal(snap, after) {
		t.Error("the region changed after its deregistration returned")
	}
	if ok == 0 || failed != 1 {
		t.Errorf("%d WRITEs succeeded, %d failed; want some, then one failure", ok, failed)
	}
	if c.shared() == 0 && len(c.p.Stats()) > 0 {
		t.Error("no WRITE was a plain copy")
	}
	t.Logf("%d WRITEs of 1 MiB before the deregistration", ok)
}

// TestRelaxedWrite posts a SEND that the peer holds for want of a RECV,
// then a WRITE into the peer's shared memory: on a queue pair with
// RelaxedWritePlacement the WRITE is a plain copy at once, its bytes in
// place before the SEND is delivered; completions still come in order once
// a RECV is posted.
func TestRelaxedWrite(t *testing.T) {
	leaks := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) })
	const size = 64 << 10
	c := newSharedConn(t, "shared", size, true)
	target, err := c.pq.Register(size, mreg.LocalWrite|mreg.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	rbuf, err := c.pq.Register(64, mreg.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	c.waitArenas(t, 1)
	if err := c.qp.PostSend(verbs.SendWR{WRID: 1, Opcode: verbs.OpSend, SGL: []verbs.SGE{c.mr.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := c.qp.PostSend(verbs.SendWR{WRID: 2, Opcode: verbs.OpWrite, SGL: []verbs.SGE{c.mr.SGE(0, size)},
		RKey: target.RKey(), RemoteAddr: target.Addr()}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(verbstest.Timeout)
	for {
		got, err := target.Read()
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(got[verbstest.Guard:verbstest.Guard+size], c.src) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the WRITE behind a held SEND was not placed")
		}
		time.Sleep(time.Millisecond)
	}
	if n := c.shared(); n != 1 {
		t.Errorf("Shared = %d, want 1 (the WRITE a plain copy)", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), verbstest.Timeout)
	defer cancel()
	wcs := make([]verbs.WC, 2)
	if n := c.cq.Poll(wcs); n != 0 {
		t.Fatalf("%d completions before the SEND was delivered: %+v", n, wcs[:n])
	}
	if err := c.pq.PostRecv(7, []verbstest.PeerSGE{{MR: rbuf, Len: 64}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.cq.Wait(ctx, wcs, 2); err != nil {
		t.Fatal(err)
	}
	if wcs[0].WRID != 1 || wcs[0].Status != verbs.StatusSuccess || wcs[1].WRID != 2 || wcs[1].Status != verbs.StatusSuccess {
		t.Fatalf("completions %+v, want the SEND then the WRITE, both successful", wcs)
	}
}
