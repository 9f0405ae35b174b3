package usertest

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/exsgo/exs/exs"
)

// The close rule, as a user relies on it: a byte whose send completed is
// never lost because the peer closed. After X closes, Y still receives every
// byte (message) of every send that completed at X, then the end of the
// stream if X's shutdown completed before its close, or ECONNRESET if X
// never shut down; only Y's own Close or Cancel discards what it has not
// received.
//
// X and Y are two programs (two stacks; over the same-host provider, two
// processes). A plan, drawn from a seed, says what each does: X's sends
// (random sizes, empty messages included), whether it shuts down, and when
// it closes (as soon as it has posted everything, after its k-th event,
// after its sends, after its shutdown, or after Y's end of stream when both
// directions carry data); whether Y posts its recvs only after X closed
// (X's bytes then wait in Y's stream buffer) or keeps recvs posted from the
// start (so that X's sends go directly and direct recvs are pending when X
// closes), their sizes, MSG_WAITALL, and Y's own sends.

// closeAt is when X posts its Close.
type closeAt int

const (
	closePosted       closeAt = iota // as soon as it has posted its operations
	closeAfterK                      // after its first AfterK events
	closeSendsDone                   // after every send completed
	closeShutdownDone                // after its shutdown completed
	closePeerEOF                     // after Y's end of stream (both directions)
)

var closeNames = [...]string{"posted", "after-k", "sends-done", "shutdown-done", "peer-eof"}

func (c closeAt) String() string { return closeNames[c] }

// plan is one ending scenario. It is JSON so that a child process can run
// X's part of it.
type plan struct {
	Seed     uint64
	Type     exs.SockType
	Mode     exs.Mode
	Ring     int   // stream buffer of both ends (0: the default)
	Sends    []int // X's sends
	Shutdown bool  // X shuts down after its sends
	Close    closeAt
	AfterK   int
	XRecv    int   // X's recv length (both directions)
	YLate    bool  // Y posts its first recv only once X has closed
	YRecv    int   // Y's recv length
	YWaitAll bool  // Y's recvs are MSG_WAITALL
	YRecvs   int   // recvs Y keeps posted
	YSends   []int // Y's sends; Y shuts down after them (both directions)
}

func (p *plan) String() string {
	return fmt.Sprintf("%v/%v seed=%d close=%v", p.Type, p.Mode, p.Seed, p.Close)
}

// units returns the units (bytes, or messages) of the first k sends of ns.
func (p *plan) units(ns []int, k int) int {
	if p.Type == exs.SockSeqPacket {
		return k
	}
	total := 0
	for _, n := range ns[:k] {
		total += n
	}
	return total
}

// logSize returns a size between lo and hi, uniform in its logarithm.
func logSize(r *rand.Rand, lo, hi int) int {
	for {
		n := 1 << r.IntN(bitsOf(hi)+1)
		n += r.IntN(n)
		if n >= lo && n <= hi {
			return n
		}
	}
}

func bitsOf(n int) int {
	b := 0
	for n > 1 {
		n >>= 1
		b++
	}
	return b
}

// newPlan draws a plan from seed.
func newPlan(seed uint64, typ exs.SockType, mode exs.Mode) plan {
	r := rand.New(rand.NewPCG(seed, uint64(typ)<<8|uint64(mode)))
	p := plan{Seed: seed, Type: typ, Mode: mode}
	p.Ring = []int{0, 64 << 10, 256 << 10}[r.IntN(3)]
	ring := p.Ring
	if ring == 0 {
		ring = exs.DefaultStreamBuffer
	}
	maxMsg := 256 << 10
	if typ == exs.SockSeqPacket {
		maxMsg = 64 << 10
	}
	for range 1 + r.IntN(8) {
		n := logSize(r, 1, maxMsg)
		if typ == exs.SockSeqPacket && r.IntN(5) == 0 {
			n = 0 // an empty message
		}
		p.Sends = append(p.Sends, n)
	}
	if typ == exs.SockSeqPacket {
		p.YRecv = maxMsg // every message fits
	} else {
		p.YRecv = logSize(r, 1, 128<<10)
		if mode == exs.ModeDirectOnly {
			// Every recv costs a round trip in direct-only mode: a stream
			// of a megabyte in 1-byte recvs takes minutes under -race.
			p.YRecv = max(p.YRecv, 4<<10)
		}
		p.YWaitAll = r.IntN(3) == 0
	}
	p.YRecvs = 1 + r.IntN(4)
	p.XRecv = 64 << 10
	p.Shutdown = r.IntN(3) != 0
	switch v := r.IntN(10); {
	case v < 2 && mode != exs.ModeDirectOnly && typ == exs.SockStream:
		// Y is late: X's sends, no more than the stream buffer holds,
		// complete into it before Y posts a recv.
		p.YLate = true
		total := ring/2 + r.IntN(ring/2)
		p.Sends = splitInto(r, total)
		p.Close = closeSendsDone
		if p.Shutdown {
			p.Close = closeShutdownDone
		}
	case v < 4:
		// Both directions; X closes after Y's end of stream.
		p.YSends = []int{logSize(r, 1, maxMsg), logSize(r, 1, maxMsg)}
		p.Shutdown = true
		p.Close = closePeerEOF
	default:
		p.Close = []closeAt{closePosted, closeAfterK, closeSendsDone, closeShutdownDone}[r.IntN(4)]
		if p.Close == closeShutdownDone {
			p.Shutdown = true
		}
		ops := len(p.Sends) // X's events that come whatever Y does
		if p.Shutdown {
			ops++
		}
		p.AfterK = r.IntN(ops + 1)
		if r.IntN(3) == 0 {
			p.YSends = []int{logSize(r, 1, maxMsg)}
		}
	}
	if typ == exs.SockStream {
		// Bound the recvs a plan takes (each is an event, and in
		// direct-only mode a transfer with its round trip): 240 KB into
		// 1-byte recvs took longer than the test's limit under -race.
		total := 0
		for _, n := range p.Sends {
			total += n
		}
		most := 2048
		if mode == exs.ModeDirectOnly {
			most = 256
		}
		p.YRecv = max(p.YRecv, total/most)
	}
	return p
}

// splitInto returns sends of random sizes that add up to total.
func splitInto(r *rand.Rand, total int) []int {
	var ns []int
	lo := max(1, total/12) // at most a dozen sends or so
	for total > 0 {
		n := min(total, logSize(r, lo, max(lo, 256<<10)))
		ns = append(ns, n)
		total -= n
	}
	return ns
}

// The streams' contents: byte k of the stream from end e (stream mode), or
// byte k of message m (seqpacket).
func streamByte(e, k int) byte     { return byte(k*131 + k>>8*17 + e*71 + 7) }
func messageByte(e, m, k int) byte { return byte(m*29 + k*131 + e*71 + 3) }

// fillSends returns the buffers of sends ns from end e.
func fillSends(typ exs.SockType, e int, ns []int) [][]byte {
	bufs := make([][]byte, len(ns))
	off := 0
	for i, n := range ns {
		b := make([]byte, n)
		for k := range b {
			if typ == exs.SockSeqPacket {
				b[k] = messageByte(e, i, k)
			} else {
				b[k] = streamByte(e, off+k)
			}
		}
		bufs[i] = b
		off += n
	}
	return bufs
}

// receiver checks what one end receives: the units in order, then the end.
type receiver struct {
	typ   exs.SockType
	from  int // the sending end
	units int // bytes (stream) or messages received
	eof   bool
	reset bool
	err   error // anything else that went wrong
}

// onRecv takes a recv's event; it reports whether the stream ended.
func (r *receiver) onRecv(ev exs.Event, buf []byte) bool {
	switch {
	case ev.Err != nil:
		if errors.Is(ev.Err, syscall.ECONNRESET) && errors.Is(ev.Err, exs.ErrConnReset) {
			r.reset = true
		} else if r.err == nil {
			r.err = fmt.Errorf("recv failed: %w", ev.Err)
		}
		return true
	case ev.EOF:
		if ev.N != 0 && r.err == nil {
			r.err = fmt.Errorf("recv with EOF carries %d bytes", ev.N)
		}
		r.eof = true
		return true
	case ev.N == 0 && r.typ == exs.SockStream:
		if r.err == nil {
			r.err = errors.New("stream recv of 0 bytes without EOF")
		}
		return true
	}
	for k, c := range buf[:ev.N] {
		var want byte
		if r.typ == exs.SockSeqPacket {
			want = messageByte(r.from, r.units, k)
		} else {
			want = streamByte(r.from, r.units+k)
		}
		if c != want {
			if r.err == nil {
				r.err = fmt.Errorf("unit %d, byte %d: %#x, want %#x", r.units, k, c, want)
			}
			return true
		}
	}
	if r.typ == exs.SockSeqPacket {
		r.units++
	} else {
		r.units += ev.N
	}
	return false
}

// xResult is what X did: its sends that completed (in order), its
// shutdown, and what it received.
type xResult struct {
	SendsOK   int // sends completed without error, in order from the first
	SendErrs  []string
	ShutOK    bool   // its shutdown completed before its close
	Got       int    // units received (both directions)
	GotEOF    bool   // it saw Y's end of stream
	Err       string // anything that went wrong at X
	Closed    bool
	CloseErr  string
	StackErrs string
}

// runX runs X's part of p on socket s: it posts its sends (and its
// shutdown, and recvs when Y sends), waits for its close point, closes and
// takes every event up to EventClose.
func runX(st *exs.Stack, s *exs.Socket, p *plan) xResult {
	var res xResult
	q, err := st.Qcreate(256)
	if err != nil {
		res.Err = err.Error()
		s.Close(q, nil)
		return res
	}
	defer st.Qdelete(q)
	defer func() {
		if !res.Closed && res.Err != "" {
			// Close after a failure, so that Y does not wait for X.
			if s.Close(q, "close") == nil {
				for ev, err := next(q); err == nil && ev.Type != exs.EventClose; ev, err = next(q) {
				}
			}
		}
	}()
	bufs := fillSends(p.Type, 0, p.Sends)
	for i, b := range bufs {
		if err := s.Send(q, b, nil, 0, i); err != nil {
			res.Err = fmt.Sprintf("send %d: %v", i, err)
			return res
		}
	}
	if p.Shutdown {
		if err := s.Shutdown(q, "shutdown"); err != nil {
			res.Err = fmt.Sprintf("shutdown: %v", err)
			return res
		}
	}
	rc := receiver{typ: p.Type, from: 1}
	rbufs := [2][]byte{make([]byte, p.XRecv), make([]byte, p.XRecv)}
	recving := len(p.YSends) > 0
	if recving {
		for i := range rbufs {
			if err := s.Recv(q, rbufs[i], nil, 0, recvTag(i)); err != nil {
				res.Err = fmt.Sprintf("recv: %v", err)
				return res
			}
		}
	}
	sent, shut, events := 0, false, 0
	okPrefix := true
	closed, ended := false, false
	ready := func() bool {
		switch p.Close {
		case closePosted:
			return true
		case closeAfterK:
			return events >= p.AfterK
		case closeSendsDone:
			return sent == len(p.Sends)
		case closeShutdownDone:
			return sent == len(p.Sends) && shut
		}
		return sent == len(p.Sends) && shut && ended
	}
	for {
		if !closed && ready() {
			if err := s.Close(q, "close"); err != nil {
				res.Err = fmt.Sprintf("close: %v", err)
				return res
			}
			closed = true
		}
		ev, err := next(q)
		if err != nil {
			res.Err = fmt.Sprintf("waiting (sent %d, shut %v, events %d, closed %v): %v", sent, shut, events, closed, err)
			return res
		}
		events++
		switch ev.Type {
		case exs.EventSend:
			sent++
			if ev.Err != nil {
				okPrefix = false
				res.SendErrs = append(res.SendErrs, ev.Err.Error())
			} else if okPrefix {
				if ev.N != p.Sends[ev.User.(int)] {
					res.Err = fmt.Sprintf("send %d completed with %d of %d bytes", ev.User, ev.N, p.Sends[ev.User.(int)])
				}
				res.SendsOK++
			}
		case exs.EventShutdown:
			shut = true
			res.ShutOK = ev.Err == nil && !closed
		case exs.EventRecv:
			if ended || closed {
				continue
			}
			i := int(ev.User.(recvTag))
			if rc.onRecv(ev, rbufs[i]) {
				ended = true
				continue
			}
			if err := s.Recv(q, rbufs[i], nil, 0, recvTag(i)); err != nil {
				res.Err = fmt.Sprintf("recv: %v", err)
				return res
			}
		case exs.EventClose:
			res.Closed = true
			if ev.Err != nil {
				res.CloseErr = ev.Err.Error()
			}
			res.Got, res.GotEOF = rc.units, rc.eof
			if rc.err != nil {
				res.Err = rc.err.Error()
			}
			return res
		}
	}
}

// recvTag tells recv events from send events.
type recvTag int

// yResult is what Y did.
type yResult struct {
	recv     receiver
	sendsOK  int
	sendErrs []error
	shutErr  error
	shutDone bool
	err      error
}

// runY runs Y's part of p on socket s: recvs until the end of X's stream
// (after xClosed if Y is late), its own sends and shutdown, then its close.
func runY(st *exs.Stack, s *exs.Socket, p *plan, xClosed <-chan struct{}) yResult {
	var res yResult
	res.recv = receiver{typ: p.Type, from: 0}
	q, err := st.Qcreate(256)
	if err != nil {
		res.err = err
		return res
	}
	defer st.Qdelete(q)
	pending := 0
	ybufs := fillSends(p.Type, 1, p.YSends)
	for i, b := range ybufs {
		if err := s.Send(q, b, nil, 0, i); err != nil {
			res.err = fmt.Errorf("send %d: %w", i, err)
			return res
		}
		pending++
	}
	if len(p.YSends) > 0 {
		if err := s.Shutdown(q, "shutdown"); err != nil {
			res.err = fmt.Errorf("shutdown: %w", err)
			return res
		}
		pending++
	}
	if p.YLate {
		select {
		case <-xClosed:
		case <-time.After(testTimeout):
			res.err = errors.New("X never closed")
			return res
		}
	}
	flags := exs.Flags(0)
	if p.YWaitAll {
		flags = exs.MsgWaitAll
	}
	bufs := make([][]byte, p.YRecvs)
	for i := range bufs {
		bufs[i] = make([]byte, p.YRecv)
		if err := s.Recv(q, bufs[i], nil, flags, recvTag(i)); err != nil {
			res.err = fmt.Errorf("recv: %w", err)
			return res
		}
		pending++
	}
	ended := false
	for pending > 0 {
		ev, err := next(q)
		if err != nil {
			res.err = fmt.Errorf("waiting (received %d units, %d operations pending): %w", res.recv.units, pending, err)
			return res
		}
		pending--
		switch ev.Type {
		case exs.EventSend:
			if ev.Err != nil {
				res.sendErrs = append(res.sendErrs, ev.Err)
			} else {
				res.sendsOK++
			}
		case exs.EventShutdown:
			res.shutDone, res.shutErr = true, ev.Err
		case exs.EventRecv:
			i := int(ev.User.(recvTag))
			if ended {
				continue
			}
			if res.recv.onRecv(ev, bufs[i]) {
				ended = true
				continue
			}
			if err := s.Recv(q, bufs[i], nil, flags, recvTag(i)); err != nil {
				res.err = fmt.Errorf("recv: %w", err)
				return res
			}
			pending++
		}
	}
	if err := s.Close(q, "close"); err != nil {
		res.err = fmt.Errorf("close: %w", err)
		return res
	}
	for {
		ev, err := next(q)
		if err != nil {
			res.err = fmt.Errorf("waiting for the close: %w", err)
			return res
		}
		if ev.Type == exs.EventClose {
			return res
		}
	}
}

// check judges an ending by the close rule.
func check(p *plan, x xResult, y yResult) error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if x.Err != "" {
		add("X: %s", x.Err)
	}
	if y.err != nil {
		add("Y: %v", y.err)
	}
	if y.recv.err != nil {
		add("Y received: %v", y.recv.err)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	total := p.units(p.Sends, len(p.Sends))
	completed := p.units(p.Sends, x.SendsOK)
	r := &y.recv
	switch {
	case r.units < completed:
		add("Y received %d units, but X's completed sends hold %d (lost at X's close)", r.units, completed)
	case r.units > total:
		add("Y received %d units, X sent %d", r.units, total)
	}
	if !r.eof && !r.reset {
		add("Y's recvs never saw the end of X's stream")
	}
	if x.ShutOK && (!r.eof || r.units != total) {
		add("X's shutdown completed before its close: Y must get all %d units and the end of the stream, got %d (eof %v, reset %v)", total, r.units, r.eof, r.reset)
	}
	if !p.Shutdown && r.eof {
		add("X never shut down, but Y saw the end of the stream instead of ECONNRESET")
	}
	if p.Close == closePeerEOF {
		// The orderly end in both directions: nothing fails anywhere.
		if !x.GotEOF || x.Got != p.units(p.YSends, len(p.YSends)) {
			add("X received %d of %d units from Y (eof %v)", x.Got, p.units(p.YSends, len(p.YSends)), x.GotEOF)
		}
		if y.sendsOK != len(p.YSends) || !y.shutDone || y.shutErr != nil {
			add("Y's sends (%d of %d) and shutdown (%v) must complete", y.sendsOK, len(p.YSends), y.shutErr)
		}
		if x.SendsOK != len(p.Sends) || !x.ShutOK {
			add("X's sends (%d of %d) and shutdown (ok %v) must complete", x.SendsOK, len(p.Sends), x.ShutOK)
		}
	}
	for _, e := range y.sendErrs {
		if !errors.Is(e, syscall.ECONNRESET) {
			add("Y's send failed with %v, want ECONNRESET", e)
		}
	}
	if y.shutErr != nil && !errors.Is(y.shutErr, syscall.ECONNRESET) {
		add("Y's shutdown failed with %v, want ECONNRESET", y.shutErr)
	}
	if !x.Closed || x.CloseErr != "" {
		add("X's close: done %v, %s", x.Closed, x.CloseErr)
	}
	return errors.Join(errs...)
}

// seeds returns n seeds, or the one in EXS_SEED.
func seeds(t *testing.T, n int) []uint64 {
	if s := os.Getenv("EXS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("EXS_SEED: %v", err)
		}
		return []uint64{v}
	}
	base := uint64(time.Now().UnixNano())
	out := make([]uint64, n)
	for i := range out {
		out[i] = base + uint64(i)
	}
	return out
}

var (
	allTypes = []exs.SockType{exs.SockStream, exs.SockSeqPacket}
	allModes = []exs.Mode{exs.ModeDynamic, exs.ModeDirectOnly, exs.ModeIndirectOnly}
)

// TestEndingInProcess runs random endings between two stacks of this
// process, over the in-process provider and over TCP on loopback (fewer
// seeds: each ending there is a real connection). A failing subtest's name
// carries its seed; EXS_SEED=<seed> replays it: go test -run
// 'TestEndingInProcess/<provider>/<type>/<mode>' with EXS_SEED set.
func TestEndingInProcess(t *testing.T) {
	for _, pv := range []struct {
		name string
		addr func(testing.TB) string
		n    int
	}{{"inproc", inprocAddr, 12}, {"tcp", tcpAddr, 4}} {
		n := pv.n
		if testing.Short() {
			n = min(n, 3)
		}
		for _, typ := range allTypes {
			for _, mode := range allModes {
				for _, seed := range seeds(t, n) {
					p := newPlan(seed, typ, mode)
					t.Run(fmt.Sprintf("%s/%v/%v/seed=%d", pv.name, typ, mode, seed), func(t *testing.T) {
						t.Parallel()
						endingInProcess(t, &p, pv.addr)
					})
				}
			}
		}
	}
}

func endingInProcess(t *testing.T, p *plan, addrOf func(testing.TB) string) {
	opts := []exs.StackOption{exs.WithMode(p.Mode)}
	if p.Ring != 0 {
		opts = append(opts, exs.WithStreamBuffer(p.Ring))
	}
	sx, sy := newStack(t, opts...), newStack(t, opts...)
	qy := newQueue(t, sy, 8)
	addr := addrOf(t)
	ln := listen(t, sy, qy, p.Type, addr)
	if err := ln.Accept(qy, "accept"); err != nil {
		t.Fatal(err)
	}
	qx := newQueue(t, sx, 8)
	x, err := sx.Socket(p.Type)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Connect(qx, addr, "connect"); err != nil {
		t.Fatal(err)
	}
	if ev := wait(t, qx, exs.EventConnect, "connect"); ev.Err != nil {
		t.Fatal(ev.Err)
	}
	acc := wait(t, qy, exs.EventAccept, "accept")
	if acc.Err != nil {
		t.Fatal(acc.Err)
	}
	xClosed := make(chan struct{})
	xres := make(chan xResult, 1)
	go func() {
		r := runX(sx, x, p)
		close(xClosed)
		xres <- r
	}()
	yr := runY(sy, acc.Accepted, p, xClosed)
	xr := <-xres
	if err := check(p, xr, yr); err != nil {
		t.Errorf("%v: %+v\nX: %+v\nY received %d units (eof %v, reset %v), sends ok %d, shutdown %v/%v\n%v",
			p, *p, xr, yr.recv.units, yr.recv.eof, yr.recv.reset, yr.sendsOK, yr.shutDone, yr.shutErr, err)
	}
}

// TestEndingBetweenProcesses runs random endings between this process (Y)
// and a child process (X) over the same-host provider and over TCP on
// loopback.
func TestEndingBetweenProcesses(t *testing.T) {
	for _, pv := range []struct {
		name string
		addr func(testing.TB) string
		n    int
	}{{"shm", shmAddr, 2}, {"tcp", tcpAddr, 1}} {
		n := pv.n
		if testing.Short() {
			n = 1
		}
		for _, typ := range allTypes {
			for _, mode := range allModes {
				for _, seed := range seeds(t, n) {
					p := newPlan(seed, typ, mode)
					t.Run(fmt.Sprintf("%s/%v/%v/seed=%d", pv.name, typ, mode, seed), func(t *testing.T) {
						endingBetweenProcesses(t, &p, pv.addr)
					})
				}
			}
		}
	}
}

// endingArg is the child's argument: where to connect, and the plan.
type endingArg struct {
	Addr string
	Plan plan
}

func endingBetweenProcesses(t *testing.T, p *plan, addrOf func(testing.TB) string) {
	opts := []exs.StackOption{exs.WithMode(p.Mode)}
	if p.Ring != 0 {
		opts = append(opts, exs.WithStreamBuffer(p.Ring))
	}
	sy := newStack(t, opts...)
	qy := newQueue(t, sy, 8)
	addr := addrOf(t)
	ln := listen(t, sy, qy, p.Type, addr)
	if err := ln.Accept(qy, "accept"); err != nil {
		t.Fatal(err)
	}
	c, line := startChild(t, "ending", endingArg{Addr: addr, Plan: *p})
	if line != "connected" {
		t.Fatalf("child: %s", line)
	}
	acc := wait(t, qy, exs.EventAccept, "accept")
	if acc.Err != nil {
		t.Fatal(acc.Err)
	}
	xClosed := make(chan struct{})
	xres := make(chan xResult, 1)
	go func() {
		var r xResult
		line, err := c.line()
		if err == nil {
			err = json.Unmarshal([]byte(line), &r)
		}
		if err != nil {
			r.Err = fmt.Sprintf("child's report: %v (%q)", err, line)
		}
		close(xClosed)
		xres <- r
	}()
	yr := runY(sy, acc.Accepted, p, xClosed)
	xr := <-xres
	if err := check(p, xr, yr); err != nil {
		t.Errorf("%v: %+v\nX: %+v\nY received %d units (eof %v, reset %v), sends ok %d, shutdown %v/%v\n%v",
			p, *p, xr, yr.recv.units, yr.recv.eof, yr.recv.reset, yr.sendsOK, yr.shutDone, yr.shutErr, err)
	}
}

// childEnding is X in a child process: it connects, runs X's part, reports
// its result as one JSON line, and exits once its stdin closes.
func childEnding(arg string) error {
	var a endingArg
	if err := json.Unmarshal([]byte(arg), &a); err != nil {
		return err
	}
	p := &a.Plan
	opts := []exs.StackOption{exs.WithMode(p.Mode)}
	if p.Ring != 0 {
		opts = append(opts, exs.WithStreamBuffer(p.Ring))
	}
	st, err := exs.NewStack(opts...)
	if err != nil {
		return err
	}
	defer st.Close()
	_, s, err := childConnect(st, p.Type, a.Addr)
	if err != nil {
		return err
	}
	fmt.Println("connected")
	res := runX(st, s, p)
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	waitStdinClosed()
	return nil
}
