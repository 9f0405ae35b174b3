package exsnet_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/exsgo/exs/exs"
	"github.com/exsgo/exs/exs/exsnet"
)

// The listener's promises, as nettest.TestListener-style checks: Accept
// after Close, Close during Accept, concurrent Accepts, the address, and
// connections accepted ahead but never taken.

func TestListenerAcceptAfterClose(t *testing.T) {
	ln := listen(t, inprocAddr(t))
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		c, err := ln.Accept()
		if c != nil || !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v, %v; want net.ErrClosed", c, err)
		}
	}
	if err := ln.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second Close: %v, want net.ErrClosed", err)
	}
}

func TestListenerCloseDuringAccept(t *testing.T) {
	ln := listen(t, inprocAddr(t))
	const n = 4
	errc := make(chan error, n)
	for range n {
		go func() {
			_, err := ln.Accept()
			errc <- err
		}()
	}
	time.Sleep(20 * time.Millisecond) // let the Accepts block (a false pass at worst)
	ln.Close()
	for range n {
		select {
		case err := <-errc:
			if !errors.Is(err, net.ErrClosed) {
				t.Fatalf("pending Accept: %v, want net.ErrClosed", err)
			}
		case <-time.After(testTimeout):
			t.Fatal("Close did not end a pending Accept")
		}
	}
}

// TestListenerConcurrentAccept has 8 goroutines accept while 16 dials
// arrive from 16 goroutines: every dial is accepted exactly once, each
// by one Accept, and each pair of ends is one connection.
func TestListenerConcurrentAccept(t *testing.T) {
	for _, tr := range []struct {
		name string
		addr func(testing.TB) string
	}{{"inproc", inprocAddr}, {"shm", shmAddr}} {
		t.Run(tr.name, func(t *testing.T) {
			addr := tr.addr(t)
			ln := listen(t, addr)
			const dials, acceptors = 16, 8
			accepted := make(chan net.Conn, dials)
			var awg sync.WaitGroup
			for range acceptors {
				awg.Add(1)
				go func() {
					defer awg.Done()
					for {
						c, err := ln.Accept()
						if err != nil {
							if !errors.Is(err, net.ErrClosed) {
								t.Errorf("Accept: %v", err)
							}
							return
						}
						accepted <- c
					}
				}()
			}
			var dwg sync.WaitGroup
			clients := make([]*exsnet.Conn, dials)
			for i := range dials {
				dwg.Add(1)
				go func() {
					defer dwg.Done()
					c, err := exsnet.Dial(ctxTimeout(t), addr)
					if err != nil {
						t.Errorf("Dial %d: %v", i, err)
						return
					}
					clients[i] = c
					if _, err := fmt.Fprintf(c, "%02d", i); err != nil {
						t.Errorf("Write %d: %v", i, err)
					}
				}()
			}
			dwg.Wait()
			seen := make(map[string]bool)
			for range dials {
				var c net.Conn
				select {
				case c = <-accepted:
				case <-time.After(testTimeout):
					t.Fatal("a dial was not accepted")
				}
				buf := make([]byte, 2)
				if _, err := io.ReadFull(c, buf); err != nil {
					t.Fatal(err)
				}
				if seen[string(buf)] {
					t.Fatalf("connection %s accepted twice", buf)
				}
				seen[string(buf)] = true
				c.Close()
			}
			ln.Close()
			awg.Wait()
			for _, c := range clients {
				if c != nil {
					c.Close()
				}
			}
		})
	}
}

// TestListenerClosesConnsNotTaken: connections that the listener accepted
// ahead of any Accept call are closed with it, and their peers see them
// reset, as TCP resets the connections of a listening socket's accept
// queue when it closes.
func TestListenerClosesConnsNotTaken(t *testing.T) {
	addr := inprocAddr(t)
	ln := listen(t, addr)
	c, err := exsnet.Dial(ctxTimeout(t), addr) // accepted without an Accept call
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ln.Close()
	c.SetReadDeadline(time.Now().Add(testTimeout))
	n, err := c.Read(make([]byte, 1))
	if n != 0 || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Read from a connection the listener closed: %d, %v; want ECONNRESET", n, err)
	}
}

func TestListenerAddr(t *testing.T) {
	addr := shmAddr(t)
	ln := listen(t, addr)
	if a := ln.Addr(); a.Network() != "exs" || a.String() != addr {
		t.Fatalf("Addr: %s %s, want exs %s", a.Network(), a, addr)
	}
	_, err := exsnet.Listen(addr)
	var oe *net.OpError
	if !errors.Is(err, syscall.EADDRINUSE) || !errors.As(err, &oe) || oe.Op != "listen" || oe.Net != "exs" {
		t.Fatalf("second Listen at %s: %v, want a net.OpError matching EADDRINUSE", addr, err)
	}
}

func TestDialErrors(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		_, err := exsnet.Dial(ctxTimeout(t), inprocAddr(t))
		var oe *net.OpError
		if !errors.Is(err, syscall.ECONNREFUSED) || !errors.As(err, &oe) || oe.Op != "dial" {
			t.Fatalf("Dial with no listener: %v, want a dial net.OpError matching ECONNREFUSED", err)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		// A listening exs socket with no accept posted: the connect
		// waits in its backlog until the context's deadline.
		st, err := exs.NewStack()
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		s, err := st.Socket(exs.SockStream)
		if err != nil {
			t.Fatal(err)
		}
		addr := inprocAddr(t)
		if err := s.Bind(addr); err != nil {
			t.Fatal(err)
		}
		if err := s.Listen(0); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err = exsnet.Dial(ctx, addr)
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) || !errors.Is(err, syscall.ETIMEDOUT) {
			t.Fatalf("Dial past its context's deadline: %v, want a timeout", err)
		}
	})
	t.Run("bad option", func(t *testing.T) {
		_, err := exsnet.Dial(ctxTimeout(t), inprocAddr(t), exsnet.WithReadBuffer(1))
		if !errors.Is(err, exs.ErrInvalid) {
			t.Fatalf("Dial with a read buffer of 1 byte: %v, want ErrInvalid", err)
		}
	})
}
