package exsnet_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/nettest"

	"github.com/exsgo/exs/exs"
	"github.com/exsgo/exs/exs/exsnet"
)

func TestConnNettest(t *testing.T) {
	t.Run("inproc", func(t *testing.T) { nettest.TestConn(t, localPipe(t, inprocAddr)) })
	t.Run("shm", func(t *testing.T) { nettest.TestConn(t, localPipe(t, shmAddr)) })
	t.Run("tcp", func(t *testing.T) { nettest.TestConn(t, localPipe(t, tcpAddr)) })
	t.Run("process", func(t *testing.T) { nettest.TestConn(t, processPipe(t, shmAddr)) })
	t.Run("tcp-process", func(t *testing.T) { nettest.TestConn(t, processPipe(t, tcpAddr)) })
}

// providers are the addresses the behaviour tests run over.
var providers = []struct {
	name string
	addr func(testing.TB) string
}{{"inproc", inprocAddr}, {"shm", shmAddr}}

// TestReadTimeoutKeepsBytes: a Read whose deadline passes leaves its recvs
// posted, and what they receive goes to the next Read: a stream read with
// random short deadlines, retried after each timeout, arrives whole.
func TestReadTimeoutKeepsBytes(t *testing.T) {
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			seed := rand.Uint64()
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 1))
			c, s := connPair(t, p.addr(t))
			want := randomBytes(t, 2<<20)
			// The writer stops now and then until the reader has read
			// every byte written and seen a Read time out on the quiet
			// connection, so that timeouts happen however fast the
			// transfer runs; between the stops the deadlines are random.
			paused := make(chan int)
			resume := make(chan struct{})
			go func() {
				defer close(paused)
				wrng := rand.New(rand.NewPCG(seed, 2))
				written := 0
				for b := want; len(b) > 0; {
					n := min(len(b), 1+wrng.IntN(64<<10))
					if _, err := c.Write(b[:n]); err != nil {
						t.Errorf("Write: %v", err)
						return
					}
					b, written = b[n:], written+n
					switch wrng.IntN(8) {
					case 0:
						time.Sleep(time.Duration(wrng.IntN(500)) * time.Microsecond)
					case 1:
						paused <- written
						<-resume
					}
				}
				c.CloseWrite()
			}()
			var got []byte
			timeouts := 0
			buf := make([]byte, 96<<10)
			stop := -1 // bytes written before the writer's stop, -1 when it runs
			for {
				if stop < 0 {
					select {
					case w, ok := <-paused:
						if ok {
							stop = w
						}
					default:
					}
				}
				d := time.Duration(rng.IntN(300)) * time.Microsecond
				quiet := stop == len(got) // nothing in flight: this Read must time out
				if quiet {
					d = time.Millisecond
				}
				s.SetReadDeadline(time.Now().Add(d))
				n, err := s.Read(buf[:1+rng.IntN(len(buf)-1)])
				got = append(got, buf[:n]...)
				if err == io.EOF {
					break
				}
				if err != nil {
					if !errors.Is(err, os.ErrDeadlineExceeded) {
						t.Fatalf("Read: %v", err)
					}
					timeouts++
				}
				if quiet {
					if err == nil {
						t.Fatalf("a Read with nothing in flight returned %d bytes", n)
					}
					stop = -1
					resume <- struct{}{}
				}
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("received %d bytes of %d, first difference at %d", len(got), len(want), firstDiff(got, want))
			}
			t.Logf("%d reads timed out", timeouts)
			if timeouts == 0 {
				t.Fatal("no Read timed out: the test tested nothing")
			}
		})
	}
}

// TestCloseWrite: each direction ends on its own; Read returns io.EOF after
// every byte; Write after CloseWrite fails with EPIPE.
func TestCloseWrite(t *testing.T) {
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			c, s := connPair(t, p.addr(t))
			if _, err := c.Write([]byte("request")); err != nil {
				t.Fatal(err)
			}
			if err := c.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
				t.Fatalf("Write after CloseWrite: %v, want EPIPE", err)
			}
			req, err := io.ReadAll(s)
			if err != nil || string(req) != "request" {
				t.Fatalf("server read %q, %v", req, err)
			}
			if n, err := s.Read(make([]byte, 8)); n != 0 || err != io.EOF {
				t.Fatalf("Read after the end: %d, %v; want io.EOF again", n, err)
			}
			if _, err := s.Write([]byte("response")); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			resp, err := io.ReadAll(c)
			if err != nil || string(resp) != "response" {
				t.Fatalf("client read %q, %v", resp, err)
			}
		})
	}
}

// TestCloseUnblocks: Close ends a pending Read and a pending Write at once
// with net.ErrClosed, before it is done lingering, and later calls fail
// the same way.
func TestCloseUnblocks(t *testing.T) {
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			const linger = 300 * time.Millisecond
			c, _ := connPair(t, p.addr(t), exsnet.WithLinger(linger)) // the server never reads
			errc := make(chan error, 2)
			go func() {
				_, err := c.Read(make([]byte, 10))
				errc <- err
			}()
			go func() {
				buf := make([]byte, 1<<20)
				for {
					if _, err := c.Write(buf); err != nil {
						errc <- err
						return
					}
				}
			}()
			time.Sleep(50 * time.Millisecond) // let both block (a false pass at worst)
			start := time.Now()
			closed := make(chan struct{})
			go func() {
				c.Close() // lingers: the bytes written make no progress
				close(closed)
			}()
			for range 2 {
				select {
				case err := <-errc:
					if !errors.Is(err, net.ErrClosed) {
						t.Fatalf("pending call: %v, want net.ErrClosed", err)
					}
				case <-time.After(testTimeout):
					t.Fatal("Close did not end a pending call")
				}
			}
			if took := time.Since(start); took >= linger {
				t.Fatalf("the pending calls returned after %v, not before Close was done lingering (%v)", took, linger)
			}
			<-closed
			if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("Read after Close: %v", err)
			}
			if _, err := c.Write(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("Write after Close: %v", err)
			}
			if err := c.SetDeadline(time.Now()); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("SetDeadline after Close: %v", err)
			}
		})
	}
}

// TestCloseFlushes: Close lets every byte written reach the peer, then the
// end of the stream, while the peer reads them, even slowly and long after
// the write buffer filled.
func TestCloseFlushes(t *testing.T) {
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			c, s := connPair(t, p.addr(t))
			want := randomBytes(t, 8<<20)
			closed := make(chan error, 1)
			go func() {
				if _, err := c.Write(want); err != nil {
					closed <- err
					return
				}
				closed <- c.Close()
			}()
			var got bytes.Buffer
			buf := make([]byte, 256<<10)
			for {
				n, err := s.Read(buf)
				got.Write(buf[:n])
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("Read after %d bytes: %v", got.Len(), err)
				}
				time.Sleep(time.Millisecond)
			}
			if err := <-closed; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Fatalf("received %d bytes of %d", got.Len(), len(want))
			}
		})
	}
}

// TestCloseResets: Close resets the connection when bytes that arrived
// were left unread, or when what it wrote makes no progress for the linger
// time; the peer then reads the bytes that had arrived, then ECONNRESET.
func TestCloseResets(t *testing.T) {
	for _, p := range providers {
		t.Run(p.name+"/unread", func(t *testing.T) {
			c, s := connPair(t, p.addr(t))
			if _, err := s.Write(make([]byte, 100)); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
				t.Fatal(err)
			}
			c.Close()
			s.SetReadDeadline(time.Now().Add(testTimeout))
			if _, err := s.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("peer's Read: %v, want ECONNRESET", err)
			}
		})
		t.Run(p.name+"/linger", func(t *testing.T) {
			const linger = 100 * time.Millisecond
			c, s := connPair(t, p.addr(t), exsnet.WithLinger(linger))
			// The server does not read: the client writes until every
			// buffer on the way is full.
			c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
			var written int64
			buf := make([]byte, 256<<10)
			for {
				n, err := c.Write(buf)
				written += int64(n)
				if err != nil {
					if !errors.Is(err, os.ErrDeadlineExceeded) {
						t.Fatal(err)
					}
					break
				}
			}
			start := time.Now()
			c.Close()
			took := time.Since(start)
			if took < linger || took > testTimeout {
				t.Fatalf("Close took %v, want about the linger time, %v", took, linger)
			}
			got, err := io.Copy(io.Discard, s)
			if !errors.Is(err, syscall.ECONNRESET) || got == 0 || got > written {
				t.Fatalf("peer read %d bytes of %d, then %v; want ECONNRESET", got, written, err)
			}
			t.Logf("wrote %d bytes, %d reached the peer, Close took %v", written, got, took)
		})
	}
}

// TestCopyBetweenConns: io.Copy from one Conn to another goes through
// WriteTo (the receive memory handed to Write) or, with the source's
// WriteTo hidden, ReadFrom (the source read into the send memory); the
// bytes arrive whole either way.
func TestCopyBetweenConns(t *testing.T) {
	for _, via := range []string{"WriteTo", "ReadFrom"} {
		t.Run(via, func(t *testing.T) {
			c1, s1 := connPair(t, inprocAddr(t))
			c2, s2 := connPair(t, shmAddr(t))
			want := randomBytes(t, 4<<20)
			go func() {
				c1.Write(want)
				c1.CloseWrite()
			}()
			copied := make(chan error, 1)
			go func() {
				var err error
				if via == "WriteTo" {
					_, err = s1.WriteTo(c2)
				} else {
					_, err = c2.ReadFrom(struct{ io.Reader }{s1})
				}
				if err == nil {
					err = c2.CloseWrite()
				}
				copied <- err
			}()
			got, err := io.ReadAll(s2)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-copied; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("received %d bytes of %d, first difference at %d", len(got), len(want), firstDiff(got, want))
			}
		})
	}
}

// TestCloseDuringReadFrom: Close does not wait for a ReadFrom blocked in
// its source's Read; the ReadFrom fails once the source returns.
func TestCloseDuringReadFrom(t *testing.T) {
	c, _ := connPair(t, inprocAddr(t))
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := c.ReadFrom(pr)
		done <- err
	}()
	pw.Write([]byte("some bytes")) // ReadFrom is in pr.Read now, or was
	closed := make(chan struct{})
	go func() {
		c.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(testTimeout):
		t.Fatal("Close waited for the source of a ReadFrom")
	}
	// The source returns more: ReadFrom, if it reads it, cannot send it.
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		pw.Write([]byte("more"))
	}()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("ReadFrom: %v, want net.ErrClosed", err)
	}
	pr.Close() // if ReadFrom ended before it read
	<-wrote
}

// TestNoAllocs: in steady state a Write and the Reads that take its bytes
// allocate nothing.
func TestNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, p := range providers {
		for _, size := range []int{100, 64 << 10, 1 << 20} {
			t.Run(fmt.Sprintf("%s/%s", p.name, sizeName(size)), func(t *testing.T) {
				c, s := connPair(t, p.addr(t))
				wbuf, rbuf := make([]byte, size), make([]byte, size)
				round := func() {
					if _, err := c.Write(wbuf); err != nil {
						t.Fatal(err)
					}
					if _, err := io.ReadFull(s, rbuf); err != nil {
						t.Fatal(err)
					}
				}
				for range 10 {
					round()
				}
				if a := testing.AllocsPerRun(50, round); a != 0 {
					t.Fatalf("%v allocations per Write and Reads of %d bytes, want 0", a, size)
				}
			})
		}
	}
}

// TestLargeWritesGoDirect: a large Write goes directly into a recv the
// reader posted and advertised, not through the stream buffer: in rounds
// of one Write of a recv's size and the Reads that take it, after the
// reader's recv is advertised again, every byte goes direct. (When the
// writer runs ahead of the reader's ADVERTs, exs's dynamic mode sends
// through the stream buffer instead; BenchmarkCopy reports the share.)
func TestLargeWritesGoDirect(t *testing.T) {
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			const size = exsnet.DefaultReadBuffer / 4 // one recv
			c, s := connPair(t, p.addr(t))
			wbuf, rbuf := make([]byte, size), make([]byte, size)
			var written uint64
			round := func() {
				adverts := s.Stats().AdvertsSent
				if _, err := c.Write(wbuf); err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(s, rbuf); err != nil {
					t.Fatal(err)
				}
				// The recv posted again is advertised anew, and the
				// ADVERT has reached the writer, before the next Write
				// (over shm it is a message in flight for a while).
				for s.Stats().AdvertsSent == adverts {
					time.Sleep(50 * time.Microsecond)
				}
				for sent := s.Stats().AdvertsSent; c.Stats().AdvertsReceived < sent; {
					time.Sleep(50 * time.Microsecond)
				}
				// The writer's counters are published after its round
				// of work.
				written += size
				for st := c.Stats(); st.BytesDirect+st.BytesIndirect != written; st = c.Stats() {
					time.Sleep(50 * time.Microsecond)
				}
			}
			for range 2 {
				round() // the first Write may come before any ADVERT
			}
			before := c.Stats()
			const rounds = 32
			for range rounds {
				round()
			}
			st := c.Stats()
			direct, indirect := st.BytesDirect-before.BytesDirect, st.BytesIndirect-before.BytesIndirect
			t.Logf("%d bytes direct in %d transfers, %d indirect", direct, st.TransfersDirect-before.TransfersDirect, indirect)
			if indirect != 0 || direct != rounds*size {
				t.Fatalf("%d bytes went direct and %d through the stream buffer, want all %d direct", direct, indirect, rounds*size)
			}
		})
	}
}

// TestErrors: the errors of the calls are net.OpErrors with Net "exs" that
// say what happened, testable with errors.Is and net.Error.
func TestErrors(t *testing.T) {
	type outcome struct {
		Op                  string
		Timeout             bool
		Closed, Deadline    bool
		Reset, Pipe         bool
		Source, Addr, Error bool // set, and Error names the addresses
	}
	tests := []struct {
		name string
		call func(c, s *exsnet.Conn) error
		want outcome
	}{
		{"read past deadline", func(c, s *exsnet.Conn) error {
			c.SetReadDeadline(time.Now().Add(-time.Second))
			_, err := c.Read(make([]byte, 1))
			return err
		}, outcome{Op: "read", Timeout: true, Deadline: true, Source: true, Addr: true, Error: true}},
		{"write past deadline", func(c, s *exsnet.Conn) error {
			c.SetWriteDeadline(time.Now().Add(-time.Second))
			_, err := c.Write(make([]byte, 1))
			return err
		}, outcome{Op: "write", Timeout: true, Deadline: true, Source: true, Addr: true, Error: true}},
		{"write after CloseWrite", func(c, s *exsnet.Conn) error {
			c.CloseWrite()
			_, err := c.Write(make([]byte, 1))
			return err
		}, outcome{Op: "write", Pipe: true, Source: true, Addr: true, Error: true}},
		{"read after the peer's reset", func(c, s *exsnet.Conn) error {
			c.Write(make([]byte, 10))
			s.Read(make([]byte, 1))
			s.Close() // leaving 9 bytes unread: a reset
			_, err := io.Copy(io.Discard, c)
			return err
		}, outcome{Op: "read", Reset: true, Source: true, Addr: true, Error: true}},
		{"read after Close", func(c, s *exsnet.Conn) error {
			c.Close()
			_, err := c.Read(make([]byte, 1))
			return err
		}, outcome{Op: "read", Closed: true, Source: true, Addr: true, Error: true}},
		{"second Close", func(c, s *exsnet.Conn) error {
			c.Close()
			return c.Close()
		}, outcome{Op: "close", Closed: true, Source: true, Addr: true, Error: true}},
	}
	for _, tt := range tests {
		c, s := connPair(t, inprocAddr(t))
		err := tt.call(c, s)
		var oe *net.OpError
		if !errors.As(err, &oe) {
			t.Errorf("%s: %T %v, want a *net.OpError", tt.name, err, err)
			continue
		}
		msg := err.Error()
		got := outcome{
			Op:       oe.Op,
			Timeout:  oe.Timeout(),
			Closed:   errors.Is(err, net.ErrClosed),
			Deadline: errors.Is(err, os.ErrDeadlineExceeded),
			Reset:    errors.Is(err, syscall.ECONNRESET),
			Pipe:     errors.Is(err, syscall.EPIPE),
			Source:   oe.Source != nil && oe.Source.Network() == "exs",
			Addr:     oe.Addr != nil && oe.Addr.Network() == "exs",
			Error:    strings.Contains(msg, c.LocalAddr().String()) && strings.Contains(msg, c.RemoteAddr().String()) && strings.Count(msg, "exs") <= 3,
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: %v (-want +got):\n%s", tt.name, err, diff)
		}
	}
}

// TestAddrs: the two ends of a connection name each other.
func TestAddrs(t *testing.T) {
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			addr := p.addr(t)
			c, s := connPair(t, addr)
			got := []string{c.LocalAddr().Network(), c.RemoteAddr().String(), s.LocalAddr().String(), s.RemoteAddr().String()}
			want := []string{"exs", addr, addr, c.LocalAddr().String()}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("addresses (-want +got):\n%s", diff)
			}
			if c.LocalAddr().String() == "" || c.LocalAddr().String() == addr {
				t.Fatalf("dialing end's address %q", c.LocalAddr())
			}
		})
	}
}

// TestWithStack: connections on a stack of the caller's leave it open.
func TestWithStack(t *testing.T) {
	st, err := exs.NewStack()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	addr := inprocAddr(t)
	ln, err := exsnet.Listen(addr, exsnet.WithStack(st))
	if err != nil {
		t.Fatal(err)
	}
	c, s, err := pair(t, ln, addr, exsnet.WithStack(st))
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("x"))
	c.Close()
	s.Close()
	ln.Close()
	q, err := st.Qcreate(1)
	if err != nil {
		t.Fatalf("the caller's stack after its connections closed: %v", err)
	}
	st.Qdelete(q)
}
