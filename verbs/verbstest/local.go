package verbstest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// NewLocalPeer returns a Peer that lives in the test process: it opens its
// own verbs.Device over p and listens at listenAddr. Use it for providers
// whose two ends can share a process (in-process, and also TCP or shared
// memory within one process). Close stops its goroutines and closes its
// device; it does not close p.
func NewLocalPeer(p verbs.Provider, listenAddr string) Peer {
	ctx, cancel := context.WithCancel(context.Background())
	return &localPeer{p: p, addr: listenAddr, ctx: ctx, cancel: cancel}
}

type localPeer struct {
	p      verbs.Provider
	addr   string
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	dev    *verbs.Device
	ln     *verbs.Listener
	result chan served
}

type served struct {
	qp      PeerQP
	private []byte
	err     error
}

func (lp *localPeer) device() (*verbs.Device, error) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if lp.dev == nil {
		d, err := verbs.Open(lp.p)
		if err != nil {
			return nil, err
		}
		lp.dev = d
	}
	return lp.dev, nil
}

func (lp *localPeer) Listen(ctx context.Context) (string, error) {
	d, err := lp.device()
	if err != nil {
		return "", err
	}
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if lp.ln != nil {
		return lp.ln.Addr(), nil
	}
	ln, err := d.Listen(lp.addr)
	if err != nil {
		return "", err
	}
	lp.ln = ln
	return ln.Addr(), nil
}

func (lp *localPeer) Serve(a Answer) error {
	lp.mu.Lock()
	ln, d := lp.ln, lp.dev
	if ln == nil {
		lp.mu.Unlock()
		return errors.New("verbstest: Serve before Listen")
	}
	ch := make(chan served, 1)
	lp.result = ch
	lp.mu.Unlock()
	lp.wg.Add(1)
	go func() {
		defer lp.wg.Done()
		ch <- lp.serve(d, ln, a)
	}()
	return nil
}

func (lp *localPeer) serve(d *verbs.Device, ln *verbs.Listener, a Answer) served {
	req, err := ln.Accept(lp.ctx)
	if err != nil {
		return served{err: err}
	}
	priv := append([]byte(nil), req.PrivateData()...)
	if a.Reject {
		return served{private: priv, err: req.Reject(a.PrivateData)}
	}
	q, err := newLocalQP(d, a.QP)
	if err != nil {
		req.Reject(nil)
		return served{private: priv, err: err}
	}
	if err := req.Accept(q.qp, a.PrivateData); err != nil {
		q.Close()
		return served{private: priv, err: err}
	}
	return served{qp: q, private: priv}
}

func (lp *localPeer) Served(ctx context.Context) (PeerQP, []byte, error) {
	lp.mu.Lock()
	ch := lp.result
	lp.mu.Unlock()
	if ch == nil {
		return nil, nil, errors.New("verbstest: Served without Serve")
	}
	select {
	case r := <-ch:
		return r.qp, r.private, r.err
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

func (lp *localPeer) Connect(ctx context.Context, addr string, spec QPSpec, private []byte) (PeerQP, []byte, error) {
	d, err := lp.device()
	if err != nil {
		return nil, nil, err
	}
	q, err := newLocalQP(d, spec)
	if err != nil {
		return nil, nil, err
	}
	reply, err := q.qp.Connect(ctx, addr, private)
	if err != nil {
		q.Close()
		return nil, nil, err
	}
	return q, reply, nil
}

func (lp *localPeer) Close() error {
	lp.cancel()
	lp.wg.Wait()
	lp.mu.Lock()
	d := lp.dev
	lp.mu.Unlock()
	if d != nil {
		return d.Close()
	}
	return nil
}

// localQP is a queue pair with its own protection domain and completion
// queue, in this process. The suite uses it for its local side as well as
// for NewLocalPeer.
type localQP struct {
	dev *verbs.Device
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP

	mu      sync.Mutex
	pending []verbs.WC            // polled but not yet returned
	allocd  map[*localMR]struct{} // regions from a RegionAllocator
}

// RegionAllocator is an optional ability of a provider given to the suite
// (Env.Provider) or to NewLocalPeer (and so to PeerProcessMain): the
// regions of its queue pairs (PeerQP.Register, guards included) then come
// from AllocRegion rather than the Go heap, and go back with FreeRegion
// when their queue pair is closed (the suite may read a region after
// deregistering it). A provider with an
// allocator of its own (memory it maps in both processes, say) runs the
// suite over that memory by offering this.
type RegionAllocator interface {
	AllocRegion(n int) ([]byte, error)
	FreeRegion(b []byte) error
}

func newLocalQP(d *verbs.Device, spec QPSpec) (*localQP, error) {
	pd, err := d.AllocPD()
	if err != nil {
		return nil, err
	}
	depth := spec.CQDepth
	if depth == 0 {
		depth = 256
	}
	cq, err := d.CreateCQ(depth, verbs.CQOptions{})
	if err != nil {
		return nil, err
	}
	qp, err := pd.CreateQP(verbs.QPConfig{
		SendCQ: cq, RecvCQ: cq,
		SendDepth: spec.SendDepth, RecvDepth: spec.RecvDepth,
		RNR:                   spec.RNR,
		RelaxedWritePlacement: spec.RelaxedWritePlacement,
	})
	if err != nil {
		cq.Close()
		return nil, err
	}
	return &localQP{dev: d, pd: pd, cq: cq, qp: qp}, nil
}

func (q *localQP) Register(size int, access mreg.Access) (PeerMR, error) {
	return q.register(size, access)
}

func (q *localQP) register(size int, access mreg.Access) (*localMR, error) {
	ra, _ := q.dev.Provider().(RegionAllocator)
	var buf []byte
	if ra != nil {
		var err error
		if buf, err = ra.AllocRegion(Guard + size + Guard); err != nil {
			return nil, err
		}
	} else {
		buf = make([]byte, Guard+size+Guard)
	}
	for i := range buf {
		buf[i] = GuardByte
	}
	region := buf[Guard : Guard+size]
	for i := range region {
		region[i] = FillByte
	}
	mr, err := q.pd.RegisterMR(region, access)
	if err != nil {
		if ra != nil {
			ra.FreeRegion(buf)
		}
		return nil, err
	}
	m := &localMR{buf: buf, mr: mr}
	if ra != nil {
		m.ra = ra
		q.mu.Lock()
		if q.allocd == nil {
			q.allocd = make(map[*localMR]struct{})
		}
		q.allocd[m] = struct{}{}
		q.mu.Unlock()
	}
	return m, nil
}

func sgl(in []PeerSGE) []verbs.SGE {
	out := make([]verbs.SGE, len(in))
	for i, s := range in {
		out[i] = verbs.SGE{Addr: s.MR.Addr() + uint64(s.Off), Len: uint32(s.Len), LKey: s.MR.LKey()}
		if s.Key != 0 {
			out[i].LKey = s.Key
		}
	}
	return out
}

func (q *localQP) PostRecv(wrID uint64, list []PeerSGE) error {
	return q.qp.PostRecv(verbs.RecvWR{WRID: wrID, SGL: sgl(list)})
}

func (q *localQP) PostSend(wr PeerSendWR) error {
	var flags verbs.SendFlags
	if wr.Signaled {
		flags = verbs.Signaled
	}
	return q.qp.PostSend(verbs.SendWR{
		WRID: wr.WRID, Opcode: wr.Opcode, Flags: flags, Imm: wr.Imm,
		SGL: sgl(wr.SGL), RemoteAddr: wr.RemoteAddr, RKey: wr.RKey,
	})
}

func (q *localQP) Poll(ctx context.Context, n int) ([]verbs.WC, error) {
	var out []verbs.WC
	buf := make([]verbs.WC, 64)
	for {
		k := q.cq.Poll(buf)
		out = append(out, buf[:k]...)
		if len(out) >= n {
			return out, nil
		}
		want := min(n-len(out), len(buf))
		k, err := q.cq.Wait(ctx, buf, want)
		out = append(out, buf[:k]...)
		if len(out) >= n {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("verbstest: polled %d of %d completions: %w", len(out), n, err)
		}
	}
}

func (q *localQP) State() verbs.State { return q.qp.State() }

func (q *localQP) WaitError(ctx context.Context) error {
	select {
	case <-q.qp.Done():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("verbstest: queue pair in %v, not Error: %w", q.qp.State(), ctx.Err())
	}
}

func (q *localQP) Disconnect() error { return q.qp.Disconnect() }

// Close destroys the queue pair and its completion queue.
func (q *localQP) Close() error {
	err := q.qp.Close()
	q.cq.Close()
	q.mu.Lock()
	allocd := q.allocd
	q.allocd = nil
	q.mu.Unlock()
	for m := range allocd {
		m.mr.Deregister()
		m.ra.FreeRegion(m.buf)
	}
	return err
}

// localMR is a region with guards.
type localMR struct {
	buf []byte // guard, region, guard
	mr  *verbs.MR
	ra  RegionAllocator // where buf came from (freed when the queue pair closes), or nil
}

func (m *localMR) Addr() uint64   { return m.mr.Addr() }
func (m *localMR) Len() int       { return m.mr.Len() }
func (m *localMR) RKey() mreg.Key { return m.mr.RKey() }
func (m *localMR) LKey() mreg.Key { return m.mr.LKey() }

func (m *localMR) Read() ([]byte, error) { return append([]byte(nil), m.buf...), nil }

func (m *localMR) Write(off int, p []byte) error {
	if off < 0 || off+len(p) > m.mr.Len() {
		return errors.New("verbstest: write outside the region")
	}
	copy(m.buf[Guard+off:], p)
	return nil
}

func (m *localMR) Deregister() error { return m.mr.Deregister() }

// sge returns the local SGE for [off, off+n) of m.
func (m *localMR) sge(off, n int) verbs.SGE { return m.mr.SGE(off, n) }

// region returns the region's bytes (without guards).
func (m *localMR) region() []byte { return m.buf[Guard : len(m.buf)-Guard] }
