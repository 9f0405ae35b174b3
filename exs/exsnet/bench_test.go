package exsnet_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/exsgo/exs/exs/exsnet"
)

// benchSizes are the sizes of BenchmarkCopy's Writes.
var benchSizes = []int{64 << 10, 1 << 20}

// transports are the connections BenchmarkCopy compares, in one process:
// the adapter over each exs provider, and the anchors of the same run,
// TCP over loopback and a Unix socket.
var transports = []struct {
	name string
	pair func(b *testing.B) (net.Conn, net.Conn)
}{
	{"exs-inproc", func(b *testing.B) (net.Conn, net.Conn) { return exsPair(b, inprocAddr(b)) }},
	{"exs-shm", func(b *testing.B) (net.Conn, net.Conn) { return exsPair(b, shmAddr(b)) }},
	{"tcp", func(b *testing.B) (net.Conn, net.Conn) { return netPair(b, "tcp", "127.0.0.1:0") }},
	{"unix", func(b *testing.B) (net.Conn, net.Conn) {
		return netPair(b, "unix", filepath.Join(b.TempDir(), "s"))
	}},
}

func exsPair(b *testing.B, addr string) (net.Conn, net.Conn) {
	c1, c2 := connPair(b, addr)
	return c1, c2
}

func netPair(b *testing.B, network, addr string) (net.Conn, net.Conn) {
	ln, err := net.Listen(network, addr)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			b.Error(err)
		}
		ch <- c
	}()
	c1, err := net.Dial(network, ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	c2 := <-ch
	if c2 == nil {
		b.FailNow()
	}
	b.Cleanup(func() {
		c1.Close()
		c2.Close()
	})
	return c1, c2
}

// discard is io.Discard without its ReadFrom, so that io.Copy into it
// takes the source's WriteTo, or reads with its own 32 KiB buffer.
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// receive takes what arrives on c until the end of the stream, as the
// receiver recv says ("copy": io.Copy into discard; "read": Reads into a
// buffer of size bytes), and returns the count.
func receive(c net.Conn, recv string, size int) (int64, error) {
	if recv == "copy" {
		return io.Copy(discard{}, c)
	}
	buf := make([]byte, size)
	var total int64
	for {
		n, err := c.Read(buf)
		total += int64(n)
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// BenchmarkCopy measures the throughput of one connection in one
// process: one operation is one Write of size bytes at one end, received
// at the other by io.Copy (receiver "copy": into a writer without
// ReadFrom, so that the adapter's WriteTo hands over its receive memory,
// and TCP and Unix sockets are read with io.Copy's 32 KiB buffer) or by
// Reads into a buffer of size bytes (receiver "read": each transport's
// plain Read). The time runs until the receiver has every byte;
// allocations count both ends. For the adapter, %direct is the share of
// the bytes the engine sent directly into the reader's recvs.
func BenchmarkCopy(b *testing.B) {
	for _, size := range benchSizes {
		for _, recv := range []string{"copy", "read"} {
			for _, tr := range transports {
				b.Run(fmt.Sprintf("%s/%s/%s", sizeName(size), recv, tr.name), func(b *testing.B) {
					c1, c2 := tr.pair(b)
					type result struct {
						n   int64
						err error
					}
					done := make(chan result, 1)
					go func() {
						n, err := receive(c2, recv, size)
						done <- result{n, err}
					}()
					benchWrites(b, c1, size, func() (int64, error) {
						r := <-done
						return r.n, r.err
					})
				})
			}
		}
	}
}

// benchWrites writes b.N times size bytes on c, ends the stream, and
// checks the count of bytes the receiver reports.
func benchWrites(b *testing.B, c net.Conn, size int, received func() (int64, error)) {
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = byte(i)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		b.Fatal(err)
	}
	n, err := received()
	b.StopTimer()
	if want := int64(b.N) * int64(size); err != nil || n != want {
		b.Fatalf("received %d bytes of %d: %v", n, want, err)
	}
	if ec, ok := c.(*exsnet.Conn); ok {
		st := ec.Stats()
		if total := st.BytesDirect + st.BytesIndirect; total > 0 {
			b.ReportMetric(100*float64(st.BytesDirect)/float64(total), "%direct")
		}
	}
}

// BenchmarkCopyProcess is BenchmarkCopy with the receiver in a child
// process (childSink), over the same-host provider, a Unix socket and
// TCP over loopback.
func BenchmarkCopyProcess(b *testing.B) {
	addr := shmAddr(b)
	fields := strings.Fields(startChild(b, "sink", addr))
	if len(fields) != 2 {
		b.Fatalf("child said %q, want its Unix and TCP addresses", fields)
	}
	dials := []struct {
		name string
		dial func() (net.Conn, error)
	}{
		{"exs-shm", func() (net.Conn, error) { return exsnet.Dial(ctxTimeout(b), addr) }},
		{"tcp", func() (net.Conn, error) { return net.Dial("tcp", fields[1]) }},
		{"unix", func() (net.Conn, error) { return net.Dial("unix", fields[0]) }},
	}
	for _, size := range benchSizes {
		for _, recv := range []string{"copy", "read"} {
			for _, d := range dials {
				b.Run(fmt.Sprintf("%s/%s/%s", sizeName(size), recv, d.name), func(b *testing.B) {
					c, err := d.dial()
					if err != nil {
						b.Fatal(err)
					}
					defer c.Close()
					hdr := make([]byte, 5)
					hdr[0] = recv[0]
					binary.LittleEndian.PutUint32(hdr[1:], uint32(size))
					if _, err := c.Write(hdr); err != nil {
						b.Fatal(err)
					}
					benchWrites(b, c, size, func() (int64, error) {
						var count [8]byte
						if _, err := io.ReadFull(c, count[:]); err != nil {
							return 0, err
						}
						return int64(binary.LittleEndian.Uint64(count[:])) - int64(len(hdr)), nil
					})
				})
			}
		}
	}
}

// childSink receives connections at addr, at a Unix socket beside it and
// on TCP over loopback, and says "ready UNIXPATH TCPADDR". Each
// connection's first byte names its receiver ('c' for io.Copy, 'r' for
// Reads), the next four the Reads' buffer size; the child receives to the
// end of the stream and answers with the count of bytes it took, header
// included.
func childSink(addr string) error {
	uln, err := net.Listen("unix", filepath.Join(filepath.Dir(strings.TrimPrefix(addr, "shm:")), "u"))
	if err != nil {
		return err
	}
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		uln.Close()
		return err
	}
	eln, err := exsnet.Listen(addr)
	if err != nil {
		uln.Close()
		tln.Close()
		return err
	}
	fmt.Println("ready", uln.Addr(), tln.Addr())
	var wg sync.WaitGroup
	errc := make(chan error, 3)
	for _, ln := range []net.Listener{eln, uln, tln} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					if !errors.Is(err, net.ErrClosed) {
						errc <- err
					}
					return
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := sinkConn(c); err != nil {
						errc <- err
					}
				}()
			}
		}()
	}
	io.Copy(io.Discard, os.Stdin)
	eln.Close()
	uln.Close()
	tln.Close()
	wg.Wait()
	close(errc)
	return <-errc
}

func sinkConn(c net.Conn) error {
	defer c.Close()
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(c, hdr); err != nil {
		return err
	}
	recv := "read"
	if hdr[0] == 'c' {
		recv = "copy"
	}
	n, err := receive(c, recv, int(binary.LittleEndian.Uint32(hdr[1:])))
	if err != nil {
		return err
	}
	var count [8]byte
	binary.LittleEndian.PutUint64(count[:], uint64(n)+uint64(len(hdr)))
	_, err = c.Write(count[:])
	return err
}
