package measure

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"
)

// copyAnchor measures the memory-copy limit on the same buffers a stream
// uses: each message is copied from one of sends source buffers into one of
// recvs destination buffers (one copy, as a direct transfer), or through a
// ring of ringBytes in between (two copies, as an indirect transfer). It runs
// on one locked thread, timed by win; its CPU time is that thread's.
func copyAnchor(ctx context.Context, copies, size, sends, recvs, ringBytes int, win window) (Result, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	src, dst := makeBufs(sends, size), makeBufs(recvs, size)
	var ring []byte
	if copies == 2 {
		ring = makeBufs(1, ringBytes)[0]
	}
	var bytes, msgs int64
	var m [2]mark
	pos := 0
	start := time.Now()
	// Copy a batch of messages between clock readings: about 64 KiB.
	batch := max(1, 64<<10/size)
	for i := 0; ; {
		for range batch {
			s, t := src[i%sends], dst[i%recvs]
			if copies == 1 {
				copy(t, s)
			} else {
				for off := 0; off < size; {
					n := copy(ring[pos:], s[off:])
					copy(t[off:], ring[pos:pos+n])
					off += n
					if pos += n; pos == len(ring) {
						pos = 0
					}
				}
			}
			i++
			bytes += int64(size)
			msgs++
		}
		if e := win.check(time.Since(start), bytes); e != edgeNone {
			m[e-1] = takeMark(bytes, msgs)
			if e == edgeEnd {
				break
			}
		}
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
	}
	cpu := cpuDelta(m[0].thread, m[1].thread)
	return Result{
		Bytes: m[1].bytes - m[0].bytes, Msgs: m[1].msgs - m[0].msgs, Elapsed: m[1].at.Sub(m[0].at),
		CPUSend: -1, CPURecv: -1, CPUTotal: cpu, Warmup: win.start, Unsteady: win.unsteady,
	}, nil
}

// crossPiece is the most bytes crossCopyAnchor's producer writes into the
// ring before it publishes them.
const crossPiece = 64 << 10

// crossCopyAnchor measures the two copies of an indirect transfer made, as
// they are between the ends of a connection, on two CPUs: a thread on CPU 0
// copies each message from one of sends source buffers into a ring of
// ringBytes, publishing it in pieces of at most crossPiece bytes, and a
// thread on CPU 1 copies the pieces out into one of recvs destination
// buffers as they are published. On a virtual machine whose vCPUs the
// host places now on nearby cores, now on distant ones, this moves with
// the placement, as the exs runs do, while the one-thread anchors do not.
// Where threads cannot be bound to CPUs (one CPU, another platform), the
// two threads run where the system puts them. The CPU time is the two
// threads'. The consumer times the interval with win.
func crossCopyAnchor(ctx context.Context, size, sends, recvs, ringBytes int, win window) (Result, error) {
	src, dst := makeBufs(sends, size), makeBufs(recvs, size)
	ring := makeBufs(1, ringBytes)[0]
	var pos struct {
		head atomic.Int64 // bytes published by the producer
		_    [56]byte
		tail atomic.Int64 // bytes taken by the consumer
		_    [56]byte
		edge atomic.Int32 // window edges the consumer has passed
		stop atomic.Bool  // the producer is done
	}
	var m [2]mark                // the consumer's marks at the edges
	var prodCPU [2]time.Duration // the producer's thread time at the edges
	// With one CPU the two threads share it: each yields while it waits,
	// instead of spinning until the runtime preempts it.
	yield := runtime.NumCPU() < 2
	consumerDone := make(chan struct{})
	go func() {
		defer close(consumerDone)
		runtime.LockOSThread() // and never unlocked: the bound thread ends with the goroutine
		if runtime.NumCPU() > 1 {
			pinThread(1)
		}
		start := time.Now()
		var t int64
		msg, at := 0, 0
		for n := 0; !pos.stop.Load(); n++ {
			h := pos.head.Load()
			for t < h {
				off := int(t % int64(ringBytes))
				k := min(int(h-t), ringBytes-off, size-at)
				copy(dst[msg%recvs][at:at+k], ring[off:off+k])
				t += int64(k)
				if at += k; at == size {
					msg, at = msg+1, 0
				}
			}
			pos.tail.Store(t)
			if n%64 == 0 || h != t {
				if e := win.check(time.Since(start), t); e != edgeNone {
					m[e-1] = takeMark(t, int64(msg))
					pos.edge.Store(int32(e))
				}
			}
			if h == t && yield {
				runtime.Gosched()
			}
		}
	}()
	producerDone := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if runtime.NumCPU() > 1 {
			pinThread(0)
		}
		var h int64
		seen := int32(0)
		for i := 0; ; i++ {
			s := src[i%sends]
			for at := 0; at < size; {
				if e := pos.edge.Load(); e != seen {
					prodCPU[e-1], seen = threadCPU(), e
					if e == edgeEnd {
						producerDone <- nil
						return
					}
				}
				free := int64(ringBytes) - (h - pos.tail.Load())
				if free == 0 {
					if yield {
						runtime.Gosched()
					}
					continue
				}
				off := int(h % int64(ringBytes))
				k := min(size-at, ringBytes-off, int(free), crossPiece)
				copy(ring[off:off+k], s[at:at+k])
				at += k
				h += int64(k)
				pos.head.Store(h)
			}
			if i%64 == 0 && ctx.Err() != nil {
				producerDone <- ctx.Err()
				return
			}
		}
	}()
	err := <-producerDone
	pos.stop.Store(true)
	<-consumerDone
	if err != nil {
		return Result{}, err
	}
	cpu := time.Duration(-1)
	if c, p := cpuDelta(m[0].thread, m[1].thread), cpuDelta(prodCPU[0], prodCPU[1]); c >= 0 && p >= 0 {
		cpu = c + p
	}
	return Result{
		Bytes: m[1].bytes - m[0].bytes, Msgs: m[1].msgs - m[0].msgs, Elapsed: m[1].at.Sub(m[0].at),
		CPUSend: -1, CPURecv: -1, CPUTotal: cpu, Warmup: win.start, Unsteady: win.unsteady,
	}, nil
}
