package main

import (
	"context"
	"runtime"
	"time"
)

// copyAnchor measures the memory-copy limit on the same buffers a stream
// uses: each message is copied from one of sends source buffers into one of
// recvs destination buffers (one copy, as a direct transfer), or through a
// ring of ringBytes in between (two copies, as an indirect transfer). It runs
// on one locked thread; its CPU time is that thread's.
func copyAnchor(ctx context.Context, copies, size, sends, recvs, ringBytes int, warmup, d time.Duration) (result, error) {
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
	win := window{warmup: warmup, d: d}
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
		if e := win.check(time.Since(start)); e != edgeNone {
			m[e-1] = takeMark(bytes, msgs)
			if e == edgeEnd {
				break
			}
		}
		if ctx.Err() != nil {
			return result{}, ctx.Err()
		}
	}
	cpu := cpuDelta(m[0].thread, m[1].thread)
	return result{
		Bytes: m[1].bytes - m[0].bytes, Msgs: m[1].msgs - m[0].msgs, Elapsed: m[1].at.Sub(m[0].at),
		CPUSend: -1, CPURecv: -1, CPUTotal: cpu,
	}, nil
}
