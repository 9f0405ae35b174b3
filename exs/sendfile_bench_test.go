//go:build linux

package exs_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/exsgo/exs/exs"
)

// BenchmarkSendfile sends a 64 MiB file (in the page cache) to a peer
// that keeps two 4 MiB recvs posted, over the in-process and the
// same-host providers, in one run: with Sendfile, and read-then-send (the
// whole file read into registered memory with ReadAt, then one Send from
// it), the program's way without Sendfile. One iteration is the whole
// file received; compare the two subtests' MB/s.
func BenchmarkSendfile(b *testing.B) {
	const size, recvSize = 64 << 20, 4 << 20
	path := filepath.Join(b.TempDir(), "f")
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 13)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		b.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	for _, pv := range providers {
		for _, how := range []string{"sendfile", "read-then-send"} {
			b.Run(pv.name+"/"+how, func(b *testing.B) {
				st := newStack(b)
				p := connectAddr(b, st, exs.SockStream, pv.addr(b))
				q := newQueue(b, st, 16)
				rbuf, err := st.Alloc(2 * recvSize)
				if err != nil {
					b.Fatal(err)
				}
				rmh, err := st.Mregister(rbuf, exs.AccessWrite)
				if err != nil {
					b.Fatal(err)
				}
				var sbuf []byte
				var smh *exs.MHandle
				if how == "read-then-send" {
					if sbuf, err = st.Alloc(size); err != nil {
						b.Fatal(err)
					}
					if smh, err = st.Mregister(sbuf, exs.AccessRead); err != nil {
						b.Fatal(err)
					}
				}
				recv := func(i int) {
					if err := p.server.Recv(q, rbuf[i*recvSize:(i+1)*recvSize], rmh, 0, i); err != nil {
						b.Fatal(err)
					}
				}
				recv(0)
				recv(1)
				evs := make([]exs.Event, 8)
				b.SetBytes(size)
				cpu0 := processCPU()
				for b.Loop() {
					if how == "sendfile" {
						err = p.client.Sendfile(q, f, 0, size, 0, "send")
					} else {
						if _, err := f.ReadAt(sbuf, 0); err != nil {
							b.Fatal(err)
						}
						err = p.client.Send(q, sbuf, smh, 0, "send")
					}
					if err != nil {
						b.Fatal(err)
					}
					received, sent := 0, false
					for received < size || !sent {
						n, err := q.Dequeue(evs, 1, 10*time.Second)
						if err != nil {
							b.Fatal(err)
						}
						for _, ev := range evs[:n] {
							if ev.Err != nil {
								b.Fatalf("%v: %v", ev.Type, ev.Err)
							}
							if ev.Type == exs.EventSend {
								sent = ev.N == size
								continue
							}
							received += ev.N
							recv(ev.User.(int))
						}
					}
				}
				b.StopTimer()
				if cpu1 := processCPU(); cpu0 >= 0 && cpu1 >= 0 {
					b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
				}
			})
		}
	}
}
