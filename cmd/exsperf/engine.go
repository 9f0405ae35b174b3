package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/exsgo/exs/dynproto"
)

// memPair runs a sending and a receiving protocol engine in one goroutine and
// carries out their actions on process memory: a direct transfer is one copy
// into a recv buffer, an indirect transfer a copy into the stream buffer and,
// later, a copy out of it. Frames are delivered in order.
type memPair struct {
	tx, rx   *dynproto.Engine
	src      []byte
	recvBufs [][]byte
	ring     []byte
	toRx     fifo
	toTx     fifo
	txActs   []dynproto.Action
	rxActs   []dynproto.Action
	writes   int
	sent     int64
	sendsOut int
	nextSend uint64
	nextRecv uint64
	sends    int
	recvs    int
}

type fifo struct {
	buf  []dynproto.Frame
	head int
}

func (q *fifo) push(f dynproto.Frame) { q.buf = append(q.buf, f) }
func (q *fifo) pop() (dynproto.Frame, bool) {
	if q.head == len(q.buf) {
		q.buf, q.head = q.buf[:0], 0
		return dynproto.Frame{}, false
	}
	f := q.buf[q.head]
	q.head++
	return f, true
}

func newMemPair(mode dynproto.Mode, size, ring, sends, recvs int) (*memPair, error) {
	cfg := dynproto.Config{Mode: mode, Type: dynproto.Stream, RecvBuffer: ring, PeerRecvBuffer: ring, Frames: 4 * recvs, PeerFrames: 4 * recvs}
	if mode == dynproto.DirectOnly {
		cfg.RecvBuffer, cfg.PeerRecvBuffer = 0, 0
	}
	tx, err := dynproto.New(cfg)
	if err != nil {
		return nil, err
	}
	rx, err := dynproto.New(cfg)
	if err != nil {
		return nil, err
	}
	p := &memPair{tx: tx, rx: rx, src: make([]byte, size), ring: make([]byte, ring), sends: sends, recvs: recvs}
	p.recvBufs = make([][]byte, recvs)
	for i := range p.recvBufs {
		p.recvBufs[i] = make([]byte, size)
	}
	for range recvs {
		p.rxActs = p.rx.PostRecv(p.rxActs, p.nextRecv, size, false)
		p.nextRecv++
	}
	p.runRx()
	return p, nil
}

// step does one round: the sender takes the receiver's frames and tops up
// its sends, then the receiver takes the sender's frames and reposts recvs.
func (p *memPair) step() error {
	var err error
	for f, ok := p.toTx.pop(); ok; f, ok = p.toTx.pop() {
		if p.txActs, err = p.tx.OnFrame(p.txActs, &f); err != nil {
			return err
		}
	}
	for p.sendsOut < p.sends {
		p.txActs = p.tx.PostSend(p.txActs, p.nextSend, len(p.src))
		p.nextSend++
		p.sendsOut++
	}
	if err := p.runTx(); err != nil {
		return err
	}
	for f, ok := p.toRx.pop(); ok; f, ok = p.toRx.pop() {
		if p.rxActs, err = p.rx.OnFrame(p.rxActs, &f); err != nil {
			return err
		}
		p.rxActs = p.rx.Copy(p.rxActs)
	}
	p.runRx()
	return nil
}

func (p *memPair) runRx() {
	for len(p.rxActs) > 0 {
		acts := p.rxActs
		p.rxActs = nil
		for _, a := range acts {
			switch a.Kind {
			case dynproto.SendFrame:
				f := a.Frame
				if f.Type == dynproto.FrameAdvert {
					f.RKey = uint32(a.ID % uint64(p.recvs))
				}
				p.toTx.push(f)
			case dynproto.CopyOut:
				copy(p.recvBufs[a.ID%uint64(p.recvs)][a.Off:], p.ring[a.RingOff:a.RingOff+a.Len])
			case dynproto.RecvDone:
				p.rxActs = p.rx.PostRecv(p.rxActs, p.nextRecv, len(p.src), false)
				p.nextRecv++
			}
		}
		if len(p.rxActs) == 0 {
			p.rxActs = acts[:0]
		}
	}
}

func (p *memPair) runTx() error {
	var err error
	for len(p.txActs) > 0 {
		acts := p.txActs
		p.txActs = nil
		for _, a := range acts {
			switch a.Kind {
			case dynproto.WriteDirect:
				copy(p.recvBufs[a.RKey][a.Addr:], p.src[a.Off:a.Off+a.Len])
				p.writes++
			case dynproto.WriteIndirect:
				copy(p.ring[a.RingOff:], p.src[a.Off:a.Off+a.Len])
				p.writes++
			case dynproto.SendFrame:
				p.toRx.push(a.Frame)
			case dynproto.SendDone:
				p.sendsOut--
				p.sent += int64(a.Len)
			}
		}
		// Writes complete at once in memory.
		for ; p.writes > 0; p.writes-- {
			if p.txActs, err = p.tx.WriteDone(p.txActs); err != nil {
				return err
			}
		}
		if len(p.txActs) == 0 {
			p.txActs = acts[:0]
		}
	}
	return nil
}

// engineTable prints throughput of the protocol engine over process memory for
// each mode and a few message sizes, with a one-copy anchor from the same run.
func engineTable(ctx context.Context, w io.Writer, d time.Duration) error {
	sizes := []int{64, 4 << 10, 64 << 10, 1 << 20}
	modes := []dynproto.Mode{dynproto.DirectOnly, dynproto.IndirectOnly, dynproto.Dynamic}
	fmt.Fprintln(w, "exsperf: protocol engine over process memory (one goroutine; direct = 1 copy, indirect = 2 copies)")
	fmt.Fprintln(w, "outstanding sends 16, recvs 32, stream buffer 4 MiB")
	fmt.Fprintf(w, "\n| size | copy() GB/s | direct-only GB/s | indirect-only GB/s | dynamic GB/s | dynamic %% direct |\n|---:|---:|---:|---:|---:|---:|\n")
	for _, size := range sizes {
		anchor := copyRate(size, d)
		fmt.Fprintf(w, "| %s | %.2f |", sizeName(size), anchor)
		var pct float64
		for _, m := range modes {
			if err := ctx.Err(); err != nil {
				return err
			}
			rate, direct, err := engineRate(m, size, d)
			if err != nil {
				return fmt.Errorf("%v %d: %w", m, size, err)
			}
			fmt.Fprintf(w, " %.2f |", rate)
			pct = direct
		}
		fmt.Fprintf(w, " %.0f |\n", pct)
	}
	return nil
}

func engineRate(m dynproto.Mode, size int, d time.Duration) (gbps, pctDirect float64, err error) {
	p, err := newMemPair(m, size, 4<<20, 16, 32)
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	for time.Since(start) < d {
		for range 16 {
			if err := p.step(); err != nil {
				return 0, 0, err
			}
		}
	}
	el := time.Since(start).Seconds()
	st := p.tx.Stats()
	total := st.BytesDirect + st.BytesIndirect
	if total > 0 {
		pctDirect = 100 * float64(st.BytesDirect) / float64(total)
	}
	return float64(p.sent) / el / 1e9, pctDirect, nil
}

func copyRate(size int, d time.Duration) float64 {
	src, dst := make([]byte, size), make([]byte, size)
	var n int64
	start := time.Now()
	for time.Since(start) < d {
		for range 64 {
			copy(dst, src)
			n += int64(size)
		}
	}
	return float64(n) / time.Since(start).Seconds() / 1e9
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
