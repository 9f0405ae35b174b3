package measure

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
)

// The benchmarks behind exsperf's figures, so that `go test -bench` catches
// regressions without running the tool. Compare within one run: the anchors
// (BenchmarkCopy, BenchmarkTCPStream) are measured beside the engine.

var benchSizes = []int{64, 4 << 10, 64 << 10, 1 << 20}

func benchName(parts ...any) string {
	var s []string
	for _, p := range parts {
		if n, ok := p.(int); ok {
			p = strings.ReplaceAll(SizeName(n), " ", "")
		}
		s = append(s, fmt.Sprint(p))
	}
	return strings.Join(s, "/")
}

// BenchmarkStream streams through the engine pair (exsperf engine), 16 sends
// and 32 recvs outstanding; one iteration is one message received.
func BenchmarkStream(b *testing.B) {
	for _, m := range Modes {
		for _, size := range benchSizes {
			b.Run(benchName(m, size), func(b *testing.B) {
				mp, err := newMemPair(Params{Mode: m, Size: size, Sends: 16, Recvs: 32, Ring: 4 << 20})
				if err != nil {
					b.Fatal(err)
				}
				if err := mp.startStream(true); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(size))
				b.ReportAllocs()
				target := mp.b.recvBytes
				for b.Loop() {
					for target += int64(size); mp.b.recvBytes < target; {
						if _, err := mp.turn(); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}

// BenchmarkPingPong bounces a message through the engine pair (exsperf lat);
// one iteration is one round trip.
func BenchmarkPingPong(b *testing.B) {
	for _, m := range Modes {
		for _, size := range []int{64, 4 << 10} {
			b.Run(benchName(m, size), func(b *testing.B) {
				mp, err := newMemPair(Params{Mode: m, Size: size, Sends: 1, Recvs: 1, Ring: 4 << 20})
				if err != nil {
					b.Fatal(err)
				}
				if err := mp.startPingPong(); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					if err := mp.roundTrip(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkCopy is the memory-copy anchor on a stream's buffers: 16 send and
// 32 recv buffers, copied once or twice through a 4 MiB ring.
func BenchmarkCopy(b *testing.B) {
	for _, copies := range []int{1, 2} {
		for _, size := range benchSizes {
			b.Run(benchName(fmt.Sprintf("x%d", copies), size), func(b *testing.B) {
				src, dst, ring := makeBufs(16, size), makeBufs(32, size), makeBufs(1, 4<<20)[0]
				b.SetBytes(int64(size))
				i, pos := 0, 0
				for b.Loop() {
					s, t := src[i%len(src)], dst[i%len(dst)]
					i++
					if copies == 1 {
						copy(t, s)
						continue
					}
					for off := 0; off < size; {
						n := copy(ring[pos:], s[off:])
						copy(t[off:], ring[pos:pos+n])
						off += n
						if pos += n; pos == len(ring) {
							pos = 0
						}
					}
				}
			})
		}
	}
}

// BenchmarkTCPStream is the TCP anchor: a writer goroutine and the
// benchmark reading over loopback with the system's congestion control; one
// iteration is one message read.
func BenchmarkTCPStream(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(benchName(size), func(b *testing.B) {
			pr, err := (&tcpTransport{}).Open(context.Background(), Params{Size: size, Sends: 16})
			if err != nil {
				b.Fatal(err)
			}
			tp := pr.(*tcpPair)
			done := make(chan struct{})
			go func() {
				defer close(done)
				buf := makeBufs(1, size)[0]
				for {
					if _, err := tp.w.Write(buf); err != nil {
						return
					}
				}
			}()
			buf := make([]byte, size)
			b.SetBytes(int64(size))
			for b.Loop() {
				if _, err := io.ReadFull(tp.r, buf); err != nil {
					b.Fatal(err)
				}
			}
			tp.Close()
			<-done
		})
	}
}
