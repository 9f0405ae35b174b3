package exs_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/exsgo/exs/exs"
)

// The stream integrity tests send a random sequence of sends (1 B to 4 MiB,
// log-uniform, so that most are small and a few are large) over a
// connection, with random numbers of outstanding sends and recvs of random
// sizes, registered or not, and check the received bytes one for one
// against the sent stream. EXS_STRESS=n runs each configuration n times
// with n times the bytes.

const maxMsg = 4 << 20

// pattern is the content of the stream: byte k is pattern[k%len(pattern)].
// Its length is not a power of two, so that a misplaced block is seen.
var pattern = func() []byte {
	b := make([]byte, 1<<20+7)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}()

// fillStream fills b with the stream's bytes from offset off.
func fillStream(b []byte, off uint64) {
	for len(b) > 0 {
		p := int(off % uint64(len(pattern)))
		n := copy(b, pattern[p:])
		b = b[n:]
		off += uint64(n)
	}
}

// checkStream reports the first byte of b that differs from the stream
// from offset off, or -1.
func checkStream(b []byte, off uint64) int {
	done := 0
	for done < len(b) {
		p := int((off + uint64(done)) % uint64(len(pattern)))
		n := min(len(b)-done, len(pattern)-p)
		if !bytes.Equal(b[done:done+n], pattern[p:p+n]) {
			for k := range n {
				if b[done+k] != pattern[p+k] {
					return done + k
				}
			}
		}
		done += n
	}
	return -1
}

// logSize returns a size in [lo, hi], log-uniform.
func logSize(r *rand.Rand, lo, hi int) int {
	l := math.Log(float64(lo))
	h := math.Log(float64(hi) + 1)
	n := int(math.Exp(l + r.Float64()*(h-l)))
	return min(max(n, lo), hi)
}

func stressFactor() int {
	n, _ := strconv.Atoi(os.Getenv("EXS_STRESS"))
	return max(n, 1)
}

type streamPlan struct {
	sizes     []int // send sizes
	sendOut   int   // most sends outstanding
	recvOut   int   // most recvs outstanding
	recvMax   int   // largest recv (stream)
	waitAll   bool
	registerP float64 // probability that a buffer is registered
	limits    bool    // the first two stream recvs are of 1 byte and maxMsg
}

// limitsPlan is a plan with a send of 1 byte and one of maxMsg bytes among
// a few random ones, recvs up to maxMsg, and, on a stream, a recv of 1
// byte and one of maxMsg first: the ends of the size range in every run.
func limitsPlan(r *rand.Rand, waitAll bool) streamPlan {
	p := streamPlan{
		sizes:     []int{1, maxMsg},
		sendOut:   1 + r.IntN(8),
		recvOut:   1 + r.IntN(8),
		recvMax:   maxMsg,
		waitAll:   waitAll,
		registerP: r.Float64(),
		limits:    true,
	}
	for range 6 {
		p.sizes = append(p.sizes, logSize(r, 1, maxMsg))
	}
	r.Shuffle(len(p.sizes), func(i, j int) { p.sizes[i], p.sizes[j] = p.sizes[j], p.sizes[i] })
	return p
}

// testSeed returns the seed of the i-th randomized subtest: EXS_SEED if
// set, so that a seed printed in a subtest's name replays that subtest
// (go test -run 'Name/of/subtest' with EXS_SEED=seed), else base+i.
func testSeed(base uint64, i int) uint64 {
	if s := os.Getenv("EXS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err == nil {
			return n
		}
	}
	return base + uint64(i)
}

func newPlan(r *rand.Rand, typ exs.SockType, waitAll bool, budget int) streamPlan {
	p := streamPlan{
		sendOut:   1 + r.IntN(8),
		recvOut:   1 + r.IntN(8),
		recvMax:   logSize(r, 1, maxMsg),
		waitAll:   waitAll,
		registerP: r.Float64(),
	}
	if typ == exs.SockStream {
		// Bound the number of recvs: tiny recvs carry few bytes.
		avg := float64(p.recvMax) / math.Max(1, math.Log(float64(p.recvMax)))
		budget = min(budget, max(4<<10, int(avg*4000)))
	}
	total := 0
	// At least one send near the largest size (if the budget allows), and
	// many small ones.
	for total < budget && len(p.sizes) < 400 {
		n := logSize(r, 1, min(maxMsg, budget))
		if len(p.sizes) == 3 && budget >= maxMsg {
			n = maxMsg - r.IntN(1024)
		}
		if typ == exs.SockSeqPacket && r.IntN(40) == 0 {
			n = 0 // an empty message
		}
		p.sizes = append(p.sizes, n)
		total += n
	}
	return p
}

// TestStreamIntegrity runs, in every mode, socket type and with and
// without MSG_WAITALL, a random plan and a plan with the ends of the size
// range (limitsPlan). Each subtest's seed is in its name; EXS_SEED replays
// it.
func TestStreamIntegrity(t *testing.T) {
	factor := stressFactor()
	base := uint64(time.Now().UnixNano())
	budget := 6 << 20 * factor
	i := 0
	for round := range factor {
		for _, mode := range []exs.Mode{exs.ModeDynamic, exs.ModeDirectOnly, exs.ModeIndirectOnly} {
			for _, typ := range []exs.SockType{exs.SockStream, exs.SockSeqPacket} {
				for _, waitAll := range []bool{false, true} {
					if typ == exs.SockSeqPacket && waitAll {
						continue // a message fills one recv anyway
					}
					for _, limits := range []bool{false, true} {
						s := testSeed(base+uint64(round)*1000003, i)
						i++
						kind := "random"
						if limits {
							kind = "limits"
						}
						name := fmt.Sprintf("%v/%v/waitall=%v/%s/seed=%d", mode, typ, waitAll, kind, s)
						t.Run(name, func(t *testing.T) {
							r := rand.New(rand.NewPCG(s, s>>1|1))
							plan := newPlan(r, typ, waitAll, budget)
							if limits {
								plan = limitsPlan(r, waitAll)
							}
							// A small stream buffer half the time, so that
							// large sends wrap around it many times.
							opts := []exs.SocketOption{exs.WithMode(mode), exs.WithOutstanding(8, 8)}
							if r.IntN(2) == 0 {
								opts = append(opts, exs.WithStreamBuffer(logSize(r, 1024, 256<<10)), exs.WithFrames(1+r.IntN(8)))
							}
							runStream(t, r, typ, plan, opts...)
						})
					}
				}
			}
		}
	}
}

// runStream runs one plan over a new connection and checks it.
func runStream(t *testing.T, r *rand.Rand, typ exs.SockType, plan streamPlan, opts ...exs.SocketOption) {
	p := connect(t, typ, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	qs := newQueue(t, p.st, 16)
	qr := newQueue(t, p.st, 16)
	sendSeed, recvSeed := r.Uint64(), r.Uint64()
	var wg sync.WaitGroup
	var sendErr, recvErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		sendErr = sender(ctx, p, qs, plan, rand.New(rand.NewPCG(sendSeed, 1)))
	}()
	go func() {
		defer wg.Done()
		recvErr = receiver(ctx, p, qr, typ, plan, rand.New(rand.NewPCG(recvSeed, 2)))
	}()
	wg.Wait()
	if sendErr != nil {
		t.Error("sender:", sendErr)
	}
	if recvErr != nil {
		t.Error("receiver:", recvErr)
	}
	cs, ss := p.client.Stats(), p.server.Stats()
	t.Logf("%d sends (%d outstanding), %d recvs outstanding, recv max %d: direct %d B in %d, indirect %d B in %d, adverts %d/%d/%d, stalls %d/%d",
		len(plan.sizes), plan.sendOut, plan.recvOut, plan.recvMax, cs.BytesDirect, cs.TransfersDirect, cs.BytesIndirect, cs.TransfersIndirect,
		ss.AdvertsSent, cs.AdvertsUsed, cs.AdvertsDiscarded, cs.CreditStalls, cs.FrameStalls)
	var want uint64
	for _, n := range plan.sizes {
		want += uint64(n)
	}
	if cs.BytesSent != want || ss.BytesReceived != want {
		t.Errorf("stats: %d bytes sent, %d received, want %d", cs.BytesSent, ss.BytesReceived, want)
	}
}

// bufSlot is one buffer of a sender or receiver, registered or not.
type bufSlot struct {
	buf  []byte
	mh   *exs.MHandle
	busy bool
}

func makeSlots(st *exs.Stack, n int, size int, access exs.Access, r *rand.Rand, registerP float64) ([]bufSlot, error) {
	slots := make([]bufSlot, n)
	for i := range slots {
		slots[i].buf = make([]byte, size)
		if r.Float64() < registerP {
			mh, err := st.Mregister(slots[i].buf, access)
			if err != nil {
				return nil, err
			}
			slots[i].mh = mh
		}
	}
	return slots, nil
}

func freeSlots(st *exs.Stack, slots []bufSlot) error {
	for _, s := range slots {
		if s.mh != nil {
			if err := st.Mderegister(s.mh); err != nil {
				return err
			}
		}
	}
	return nil
}

func sender(ctx context.Context, p *pair, q *exs.Queue, plan streamPlan, r *rand.Rand) error {
	slots, err := makeSlots(p.st, plan.sendOut, maxMsg, exs.AccessRead, r, plan.registerP)
	if err != nil {
		return err
	}
	var off uint64
	next, done, out := 0, 0, 0
	evs := make([]exs.Event, 8)
	for done < len(plan.sizes) {
		for next < len(plan.sizes) && out < plan.sendOut {
			i := 0
			for slots[i].busy {
				i++
			}
			n := plan.sizes[next]
			// Send from a random place in the slot's buffer.
			at := 0
			if n < maxMsg {
				at = r.IntN(maxMsg - n + 1)
			}
			b := slots[i].buf[at : at+n]
			fillStream(b, off)
			if err := p.client.Send(q, b, slots[i].mh, 0, i); err != nil {
				return fmt.Errorf("send %d: %w", next, err)
			}
			slots[i].busy = true
			off += uint64(n)
			next++
			out++
		}
		k, err := q.DequeueContext(ctx, evs, 1)
		if err != nil {
			return fmt.Errorf("after %d of %d sends: %w", done, len(plan.sizes), err)
		}
		for _, ev := range evs[:k] {
			if ev.Type != exs.EventSend || ev.Err != nil {
				return fmt.Errorf("send event %v: %v", ev.Type, ev.Err)
			}
			i := ev.User.(int)
			if want := plan.sizes[done]; ev.N != want {
				return fmt.Errorf("send %d completed with %d bytes, want %d", done, ev.N, want)
			}
			slots[i].busy = false
			done++
			out--
		}
	}
	if err := p.client.Shutdown(q, "shutdown"); err != nil {
		return err
	}
	if k, err := q.DequeueContext(ctx, evs[:1], 1); err != nil || evs[0].Type != exs.EventShutdown || evs[0].Err != nil {
		return fmt.Errorf("shutdown: %d %v %v", k, evs[0].Type, evs[0].Err)
	}
	return freeSlots(p.st, slots)
}

func receiver(ctx context.Context, p *pair, q *exs.Queue, typ exs.SockType, plan streamPlan, r *rand.Rand) error {
	size := plan.recvMax
	if typ == exs.SockSeqPacket {
		size = maxMsg
	}
	slots, err := makeSlots(p.st, plan.recvOut, size, exs.AccessWrite, r, plan.registerP)
	if err != nil {
		return err
	}
	var total uint64
	for _, n := range plan.sizes {
		total += uint64(n)
	}
	type posted struct {
		slot, n int
	}
	var order []posted // recvs posted and not yet completed, oldest first
	nposted := 0       // recvs posted in all
	var off uint64
	msgs := 0
	eof := false
	out := 0
	evs := make([]exs.Event, 8)
	flags := exs.Flags(0)
	if plan.waitAll {
		flags = exs.MsgWaitAll
	}
	for !eof {
		for out < plan.recvOut {
			i := 0
			for slots[i].busy {
				i++
			}
			n := size
			if typ == exs.SockStream {
				n = logSize(r, 1, size)
				if plan.limits && nposted < 2 {
					n = []int{1, maxMsg}[nposted]
				}
			}
			b := slots[i].buf[:n]
			if err := p.server.Recv(q, b, slots[i].mh, flags, i); err != nil {
				return fmt.Errorf("recv: %w", err)
			}
			slots[i].busy = true
			order = append(order, posted{i, n})
			nposted++
			out++
		}
		k, err := q.DequeueContext(ctx, evs, 1)
		if err != nil {
			return fmt.Errorf("after %d of %d bytes: %w", off, total, err)
		}
		for _, ev := range evs[:k] {
			if ev.Type != exs.EventRecv || ev.Err != nil {
				return fmt.Errorf("recv event %v at byte %d: %v", ev.Type, off, ev.Err)
			}
			i := ev.User.(int)
			if i != order[0].slot {
				return fmt.Errorf("recv into slot %d completed before the one into slot %d", i, order[0].slot)
			}
			n := order[0].n
			order = order[1:]
			slots[i].busy = false
			out--
			if eof {
				if ev.N != 0 {
					return fmt.Errorf("recv after the end of the stream got %d bytes", ev.N)
				}
				continue
			}
			switch typ {
			case exs.SockStream:
				if ev.N == 0 {
					eof = true
					break
				}
				if ev.N > n || plan.waitAll && ev.N != n && off+uint64(ev.N) != total {
					return fmt.Errorf("recv of %d (waitall %v) completed with %d bytes at %d of %d", n, plan.waitAll, ev.N, off, total)
				}
			case exs.SockSeqPacket:
				if msgs == len(plan.sizes) {
					if ev.N != 0 {
						return fmt.Errorf("message after the last: %d bytes", ev.N)
					}
					eof = true
					break
				}
				if want := plan.sizes[msgs]; ev.N != want {
					return fmt.Errorf("message %d has %d bytes, want %d", msgs, ev.N, want)
				}
				msgs++
			}
			if d := checkStream(slots[i].buf[:ev.N], off); d >= 0 {
				return fmt.Errorf("byte %d of the stream (byte %d of a %d-byte recv) is wrong", off+uint64(d), d, ev.N)
			}
			off += uint64(ev.N)
			if off > total {
				return fmt.Errorf("received %d bytes, only %d sent", off, total)
			}
		}
	}
	if off != total {
		return fmt.Errorf("end of stream after %d of %d bytes", off, total)
	}
	// Recvs still posted complete at the end of the stream.
	for out > 0 {
		if _, err := q.DequeueContext(ctx, evs[:1], 1); err != nil {
			return err
		}
		if ev := evs[0]; ev.Type != exs.EventRecv || ev.N != 0 || ev.Err != nil {
			return fmt.Errorf("recv after the end: %v %d %v", ev.Type, ev.N, ev.Err)
		}
		out--
	}
	return freeSlots(p.st, slots)
}

// TestStreamTinySendQueue runs the integrity test with send queues of 2 and
// 3 work requests, so that the engine's actions often wait for room.
func TestStreamTinySendQueue(t *testing.T) {
	base := uint64(time.Now().UnixNano())
	i := 0
	for _, depth := range []int{2, 3} {
		for _, mode := range []exs.Mode{exs.ModeDynamic, exs.ModeDirectOnly, exs.ModeIndirectOnly} {
			for _, typ := range []exs.SockType{exs.SockStream, exs.SockSeqPacket} {
				s := testSeed(base, i)
				i++
				t.Run(fmt.Sprintf("depth=%d/%v/%v/seed=%d", depth, mode, typ, s), func(t *testing.T) {
					restore := exs.SetSendDepth(depth)
					defer restore()
					r := rand.New(rand.NewPCG(s, s>>1|1))
					plan := newPlan(r, typ, false, 1<<20)
					runStream(t, r, typ, plan, exs.WithMode(mode), exs.WithOutstanding(8, 8), exs.WithStreamBuffer(16<<10))
				})
			}
		}
	}
}
