package measure

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/exsgo/exs/dynproto"
)

// Engine runs two dynproto engines in one goroutine and carries out
// their actions on process memory: a direct transfer is one copy from a send
// buffer into the advertised recv buffer, an indirect transfer a copy into the
// receiver's stream buffer and, later, a copy out of it. Frames pass between
// the engines in order, at once or through an emulated link (Link).
//
// It measures the protocol's cost and the copies it implies, without threads,
// queues or wake-ups. One thread runs both sides, so the CPU time of each side
// is the process's CPU time split in proportion to the wall time spent in each
// side's code. With an emulated link no data is copied and time is virtual.
type Engine struct{}

func (Engine) Name() string { return "engine" }
func (Engine) Describe() string {
	return "dynproto engines over process memory in one goroutine (direct = 1 copy, indirect = 2 copies; CPU split by time in each side's code)"
}
func (Engine) Close() error { return nil }

func (Engine) Open(ctx context.Context, p Params) (Pair, error) {
	return newMemPair(p)
}

// memPair is two engine ends. Not safe for concurrent use.
type memPair struct {
	p    Params
	a, b *memEnd // a sends, b receives (Stream); both do both (PingPong)
	net  memNet
	vnet *vlink // non-nil with an emulated link
}

// memNet carries frames and completes writes between the ends.
type memNet interface {
	// frame sends f from one end to its peer, after every write that end
	// emitted before.
	frame(from *memEnd, f dynproto.Frame)
	// write notes a write of n bytes from an end; its completion is
	// reported to that end with WriteDone, in order.
	write(from *memEnd, n int)
}

// instantNet delivers frames at once into the peer's inbox. A write
// completes at the start of its end's next turn, after the peer has had a
// turn: a one-sided write completes once its data has reached the peer, and
// the peer makes progress meanwhile. (Completing writes within the same turn
// would let a sender run arbitrarily far ahead of its receiver, using up every
// ADVERT and then sending indirectly before the receiver could post more.)
type instantNet struct{}

func (instantNet) frame(from *memEnd, f dynproto.Frame) { from.peer.inbox.push(f) }
func (instantNet) write(from *memEnd, n int)            { from.writes++ }

// memEnd is one end: an engine, its buffers and its application.
type memEnd struct {
	id    int // index of its outgoing direction on an emulated link
	eng   *dynproto.Engine
	peer  *memEnd
	net   memNet
	copy  bool // move bytes (false with an emulated link: time is virtual)
	ring  []byte
	sbufs [][]byte
	rbufs [][]byte
	size  int

	inbox       frameQueue
	acts, spare []dynproto.Action
	writes      int // writes awaiting WriteDone at the next turn (instantNet)

	// The application.
	keepSends, keepRecvs bool // repost on completion, up to the targets
	sendsWant, recvsWant int
	sendsOut, recvsOut   int
	nextSend, nextRecv   uint64
	waitAll              bool
	sendBytes, sendMsgs  int64
	recvBytes, recvMsgs  int64

	verify           bool
	seed             byte
	sendOff, recvOff uint64

	busy time.Duration // wall time spent in this end's code
}

// errStalled reports a pair in which neither end can make progress: a
// protocol bug, since the application always has work posted.
var errStalled = errors.New("engine pair stalled")

func newMemPair(p Params) (*memPair, error) {
	if p.Size < 1 || p.Sends < 1 || p.Recvs < 1 {
		return nil, fmt.Errorf("size %d, sends %d, recvs %d: all must be positive", p.Size, p.Sends, p.Recvs)
	}
	frames := min(65535, max(8, 4*max(p.Recvs, p.Sends)))
	// The engine is tuned as exs tunes it (exs/conn.go: an ACK every
	// eighth of the stream buffer, indirect transfers of at most an
	// eighth, no ADVERT for a recv under a 32nd).
	cfg := dynproto.Config{
		Mode: p.Mode, Type: dynproto.Stream, RecvBuffer: p.Ring, PeerRecvBuffer: p.Ring, Frames: frames, PeerFrames: frames,
		AckThreshold: p.Ring / 8, MaxIndirect: p.Ring / 8, AdvertMin: p.Ring / 32,
	}
	if p.Mode == dynproto.DirectOnly {
		cfg.RecvBuffer, cfg.PeerRecvBuffer, cfg.AckThreshold = 0, 0, 0
	}
	mp := &memPair{p: p}
	if p.Link != nil {
		mp.vnet = newVlink(*p.Link)
		mp.net = mp.vnet
	} else {
		mp.net = instantNet{}
	}
	var err error
	if mp.a, err = mp.newEnd(cfg, p); err != nil {
		return nil, err
	}
	if mp.b, err = mp.newEnd(cfg, p); err != nil {
		return nil, err
	}
	mp.a.peer, mp.b.peer = mp.b, mp.a
	mp.a.id, mp.b.id = 0, 1
	return mp, nil
}

func (mp *memPair) newEnd(cfg dynproto.Config, p Params) (*memEnd, error) {
	eng, err := dynproto.New(cfg)
	if err != nil {
		return nil, err
	}
	e := &memEnd{eng: eng, net: mp.net, copy: p.Link == nil, size: p.Size, verify: p.Verify && p.Link == nil, seed: byte(p.Seed)}
	if e.copy {
		e.ring = make([]byte, cfg.RecvBuffer)
	}
	return e, nil
}

// alloc gives an end its buffers: n send buffers and m recv buffers.
func (e *memEnd) alloc(n, m int) {
	if !e.copy {
		e.sbufs, e.rbufs = make([][]byte, n), make([][]byte, m)
		return
	}
	e.sbufs, e.rbufs = makeBufs(n, e.size), makeBufs(m, e.size)
	fillPattern(e.ring, 0, 1)
}

// makeBufs allocates n buffers of size bytes and writes every page of them:
// memory never written reads as the kernel's shared zero page, which would
// make copies from it look faster than copies of real data.
func makeBufs(n, size int) [][]byte {
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, size)
		fillPattern(bufs[i], uint64(i*size), 0)
	}
	return bufs
}

func (mp *memPair) Close() error { return nil }

func (e *memEnd) postSend() {
	id := e.nextSend
	e.nextSend++
	if e.verify {
		fillPattern(e.sbufs[id%uint64(len(e.sbufs))], e.sendOff, e.seed)
		e.sendOff += uint64(e.size)
	}
	e.sendsOut++
	e.acts = e.eng.PostSend(e.acts, id, e.size)
}

func (e *memEnd) postRecv() {
	e.recvsOut++
	e.acts = e.eng.PostRecv(e.acts, e.nextRecv, e.size, e.waitAll)
	e.nextRecv++
}

// step is one turn of an end: it completes the writes of its last turn,
// takes the frames waiting in the inbox, copies out of the stream buffer, and
// carries out the resulting actions. It reports whether it did anything.
func (e *memEnd) step() (bool, error) {
	did := e.writes > 0
	var err error
	for ; e.writes > 0; e.writes-- {
		if e.acts, err = e.eng.WriteDone(e.acts); err != nil {
			return did, err
		}
	}
	for f, ok := e.inbox.pop(); ok; f, ok = e.inbox.pop() {
		did = true
		if e.acts, err = e.eng.OnFrame(e.acts, &f); err != nil {
			return did, err
		}
	}
	ran, err := e.run()
	return did || ran, err
}

// run carries out pending actions, completing writes and copying out of the
// stream buffer, until the engine asks for nothing more.
func (e *memEnd) run() (bool, error) {
	did := false
	for {
		if e.eng.CanCopy() {
			e.acts = e.eng.Copy(e.acts)
		}
		if len(e.acts) == 0 {
			return did, nil
		}
		did = true
		for len(e.acts) > 0 {
			acts := e.acts
			e.acts = e.spare[:0]
			for i := range acts {
				if err := e.do(&acts[i]); err != nil {
					return did, err
				}
			}
			clear(acts)
			e.spare = acts[:0]
		}
	}
}

func (e *memEnd) do(a *dynproto.Action) error {
	switch a.Kind {
	case dynproto.WriteDirect:
		if e.copy {
			copy(e.peer.rbufs[a.RKey][a.Addr:], e.sbufs[a.ID%uint64(len(e.sbufs))][a.Off:a.Off+a.Len])
		}
		e.net.write(e, a.Len)
	case dynproto.WriteIndirect:
		if e.copy {
			copy(e.peer.ring[a.RingOff:], e.sbufs[a.ID%uint64(len(e.sbufs))][a.Off:a.Off+a.Len])
		}
		e.net.write(e, a.Len)
	case dynproto.SendFrame:
		f := a.Frame
		if f.Type == dynproto.FrameAdvert {
			// The recv buffer's "key" is its index; its address, the
			// start of the buffer.
			f.RKey, f.Addr = uint32(a.ID%uint64(len(e.rbufs))), 0
		}
		e.net.frame(e, f)
	case dynproto.CopyOut:
		if e.copy {
			copy(e.rbufs[a.ID%uint64(len(e.rbufs))][a.Off:], e.ring[a.RingOff:a.RingOff+a.Len])
		}
	case dynproto.SendDone:
		if a.Err != nil {
			return fmt.Errorf("send %d: %w", a.ID, a.Err)
		}
		e.sendsOut--
		e.sendMsgs++
		e.sendBytes += int64(a.Len)
		if e.keepSends {
			for e.sendsOut < e.sendsWant {
				e.postSend()
			}
		}
	case dynproto.RecvDone:
		if a.Err != nil {
			return fmt.Errorf("recv %d: %w", a.ID, a.Err)
		}
		if a.Len == 0 {
			return fmt.Errorf("recv %d: unexpected end of stream", a.ID)
		}
		if e.verify {
			if off := checkPattern(e.rbufs[a.ID%uint64(len(e.rbufs))][:a.Len], e.recvOff, e.seed); off >= 0 {
				return fmt.Errorf("recv %d: wrong byte at stream offset %d", a.ID, e.recvOff+uint64(off))
			}
			e.recvOff += uint64(a.Len)
		}
		e.recvsOut--
		e.recvMsgs++
		e.recvBytes += int64(a.Len)
		if e.keepRecvs {
			for e.recvsOut < e.recvsWant {
				e.postRecv()
			}
		}
	}
	return nil
}

// snapshot is what Stream reads at the edges of the measured interval.
type snapshot struct {
	at    time.Duration // wall or virtual
	bytes int64
	msgs  int64
	stats dynproto.Stats
	busyA time.Duration
	busyB time.Duration
	cpu   time.Duration
}

func (mp *memPair) snap(at time.Duration) snapshot {
	return snapshot{at: at, bytes: mp.b.recvBytes, msgs: mp.a.sendMsgs, stats: mp.a.eng.Stats(), busyA: mp.a.busy, busyB: mp.b.busy, cpu: processCPU()}
}

func (mp *memPair) result(s0, s1 snapshot) Result {
	r := Result{
		Bytes: s1.bytes - s0.bytes, Msgs: s1.msgs - s0.msgs, Elapsed: s1.at - s0.at, Virtual: mp.vnet != nil,
		HasDirect:     true,
		BytesDirect:   s1.stats.BytesDirect - s0.stats.BytesDirect,
		BytesIndirect: s1.stats.BytesIndirect - s0.stats.BytesIndirect,
		XfersDirect:   s1.stats.TransfersDirect - s0.stats.TransfersDirect,
		XfersIndirect: s1.stats.TransfersIndirect - s0.stats.TransfersIndirect,
		CPUSend:       -1, CPURecv: -1, CPUTotal: -1,
	}
	if mp.vnet == nil && s0.cpu >= 0 && s1.cpu >= 0 {
		r.CPUTotal = s1.cpu - s0.cpu
		ba, bb := s1.busyA-s0.busyA, s1.busyB-s0.busyB
		if ba+bb > 0 {
			r.CPUSend = time.Duration(float64(r.CPUTotal) * float64(ba) / float64(ba+bb))
			r.CPURecv = r.CPUTotal - r.CPUSend
		}
	}
	return r
}

// Stream: end a keeps Sends sends outstanding, end b Recvs recvs.
func (mp *memPair) Stream(ctx context.Context, warmup, d time.Duration) (Result, error) {
	if mp.vnet != nil {
		mp.startStream(false)
		return mp.streamVirtual(ctx, warmup, d)
	}
	if err := mp.startStream(true); err != nil {
		return Result{}, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := time.Now()
	var s0 snapshot
	win := newWindow(warmup, mp.p.MaxWarmup, d)
	for n := 0; ; n++ {
		t3, err := mp.turn()
		if err != nil {
			return Result{}, err
		}
		switch el := t3.Sub(start); win.check(el, mp.b.recvBytes) {
		case edgeStart:
			s0 = mp.snap(el)
		case edgeEnd:
			r := mp.result(s0, mp.snap(el))
			r.Warmup, r.Unsteady = win.start, win.unsteady
			return r, nil
		}
		if n%64 == 0 && ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
	}
}

// startStream gives the ends their buffers and posts the recvs, and with
// sends also the sends.
func (mp *memPair) startStream(sends bool) error {
	a, b := mp.a, mp.b
	a.alloc(mp.p.Buffers(mp.p.Sends), 1)
	b.alloc(1, mp.p.Buffers(mp.p.Recvs))
	a.keepSends, a.sendsWant = true, mp.p.Sends
	b.keepRecvs, b.recvsWant = true, mp.p.Recvs
	// The receiver is ready first, as a server that posts its recvs on
	// accepting: its ADVERTs reach the sender before the first send.
	for range mp.p.Recvs {
		b.postRecv()
	}
	if !sends {
		return nil
	}
	if _, err := b.run(); err != nil {
		return err
	}
	if _, err := a.step(); err != nil {
		return err
	}
	for range mp.p.Sends {
		a.postSend()
	}
	return nil
}

// turn lets the sender and then the receiver take a turn, charging the wall
// time of each to its end, and returns the time at the end.
func (mp *memPair) turn() (time.Time, error) {
	a, b := mp.a, mp.b
	t1 := time.Now()
	didA, err := a.step()
	if err != nil {
		return t1, err
	}
	t2 := time.Now()
	didB, err := b.step()
	if err != nil {
		return t2, err
	}
	t3 := time.Now()
	a.busy += t2.Sub(t1)
	b.busy += t3.Sub(t2)
	if !didA && !didB {
		return t3, fmt.Errorf("%w: sender %+v; receiver %+v", errStalled, a.eng.State(), b.eng.State())
	}
	return t3, nil
}

// streamVirtual runs Stream in emulated time: events happen in time order;
// the application and the engines take no time.
func (mp *memPair) streamVirtual(ctx context.Context, warmup, d time.Duration) (Result, error) {
	v := mp.vnet
	var s0 snapshot
	measuring := false
	// The sender starts when the receiver has posted its recvs, while the
	// ADVERTs are still on their way; or, with AdvertsFirst, once they
	// have all arrived.
	if _, err := mp.b.run(); err != nil {
		return Result{}, err
	}
	for mp.p.AdvertsFirst && mp.p.Mode != dynproto.IndirectOnly && mp.a.eng.State().Adverts < mp.p.Recvs {
		ev, ok := v.next()
		if !ok {
			return Result{}, fmt.Errorf("%w: waiting for the first ADVERTs", errStalled)
		}
		if err := v.apply(ev); err != nil {
			return Result{}, err
		}
	}
	warmup += v.virtual()
	for range mp.p.Sends {
		mp.a.postSend()
	}
	if _, err := mp.a.run(); err != nil {
		return Result{}, err
	}
	for n := 0; ; n++ {
		ev, ok := v.next()
		if !ok {
			return Result{}, fmt.Errorf("%w (emulated link idle): sender %+v; receiver %+v", errStalled, mp.a.eng.State(), mp.b.eng.State())
		}
		now := v.virtual()
		if !measuring && now >= warmup {
			measuring, s0 = true, mp.snap(warmup)
		}
		if now >= warmup+d {
			return mp.result(s0, mp.snap(warmup+d)), nil
		}
		if err := v.apply(ev); err != nil {
			return Result{}, err
		}
		if n%1024 == 0 && ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
	}
}

// PingPong: a sends Size bytes, b receives them all (MSG_WAITALL) and sends
// them back, and so on. One goroutine runs both, so the wait mode is inline.
func (mp *memPair) PingPong(ctx context.Context, warmup, d time.Duration, w WaitMode) ([]time.Duration, error) {
	if mp.vnet != nil {
		return nil, errors.New("ping-pong over an emulated link is not implemented")
	}
	if w != WaitInline {
		return nil, fmt.Errorf("the engine transport runs both sides in one goroutine: wait mode %v does not apply", w)
	}
	if err := mp.startPingPong(); err != nil {
		return nil, err
	}
	return pingLoop(ctx, warmup, d, mp.roundTrip)
}

// startPingPong gives each end one buffer each way and posts a recv at each.
func (mp *memPair) startPingPong() error {
	for _, e := range []*memEnd{mp.a, mp.b} {
		e.alloc(1, 1)
		e.waitAll = true
		e.keepRecvs, e.recvsWant = true, 1
		e.postRecv()
	}
	// Let the first ADVERTs cross.
	if _, err := mp.a.step(); err != nil {
		return err
	}
	_, err := mp.b.step()
	return err
}

// roundTrip moves one message from a to b and one back.
func (mp *memPair) roundTrip() error {
	if err := oneWay(mp.a, mp.b); err != nil {
		return err
	}
	return oneWay(mp.b, mp.a)
}

// oneWay moves a message from src to dst and waits until dst has it and
// src's send is complete.
func oneWay(src, dst *memEnd) error {
	want := dst.recvMsgs + 1
	src.postSend()
	for dst.recvMsgs < want || src.sendsOut > 0 {
		d1, err := src.step()
		if err != nil {
			return err
		}
		d2, err := dst.step()
		if err != nil {
			return err
		}
		if !d1 && !d2 {
			return fmt.Errorf("%w: %+v; %+v", errStalled, src.eng.State(), dst.eng.State())
		}
	}
	return nil
}

// pingLoop calls rt for warmup, then for d, timing each call that starts
// in the measured interval; there is at least one.
func pingLoop(ctx context.Context, warmup, d time.Duration, rt func() error) ([]time.Duration, error) {
	start := time.Now()
	var out []time.Duration
	win := window{warmup: warmup, d: d}
	for n := 0; ; n++ {
		t0 := time.Now()
		e := win.check(t0.Sub(start), int64(n)) // the round trips done: the progress
		if e == edgeEnd {
			return out, nil
		}
		if err := rt(); err != nil {
			return nil, err
		}
		if win.phase == 1 {
			out = append(out, time.Since(t0))
		}
		if n%64 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

// frameQueue is a FIFO of frames whose storage is reused.
type frameQueue struct {
	buf  []dynproto.Frame
	head int
}

func (q *frameQueue) push(f dynproto.Frame) { q.buf = append(q.buf, f) }

func (q *frameQueue) pop() (dynproto.Frame, bool) {
	if q.head == len(q.buf) {
		q.buf, q.head = q.buf[:0], 0
		return dynproto.Frame{}, false
	}
	f := q.buf[q.head]
	q.head++
	return f, true
}

// fillPattern fills b with the stream's bytes from offset off on.
func fillPattern(b []byte, off uint64, seed byte) {
	for i := range b {
		b[i] = patternByte(off+uint64(i), seed)
	}
}

// checkPattern returns the index of the first byte of b that is not the
// stream's byte at its offset, or -1.
func checkPattern(b []byte, off uint64, seed byte) int {
	for i := range b {
		if b[i] != patternByte(off+uint64(i), seed) {
			return i
		}
	}
	return -1
}

func patternByte(x uint64, seed byte) byte {
	return byte(x^x>>8^x>>17^x>>29) ^ seed
}
