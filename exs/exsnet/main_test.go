package exsnet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/exsgo/exs/exs/exsnet"
	"github.com/exsgo/exs/internal/childproc"
)

// childEnv names what this test binary does when it runs as a child
// process of a test (see child); childArgEnv carries its argument.
const (
	childEnv    = "EXSNET_TEST_CHILD"
	childArgEnv = "EXSNET_TEST_ARG"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(child(role, os.Getenv(childArgEnv)))
	}
	goleak.VerifyTestMain(m)
}

// child runs this binary's part as a child process and returns its exit
// status. It serves until its stdin is closed.
func child(role, arg string) int {
	var addr string
	if err := json.Unmarshal([]byte(arg), &addr); err != nil {
		fmt.Fprintln(os.Stderr, "exsnet child:", err)
		return 1
	}
	var err error
	switch role {
	case "relay":
		err = childRelay(addr)
	case "http":
		err = childHTTP(addr)
	case "sink":
		err = childSink(addr)
	default:
		err = fmt.Errorf("unknown child role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "exsnet child:", err)
		return 1
	}
	return 0
}

// testTimeout bounds every wait of a test.
const testTimeout = 30 * time.Second

var addrSeq atomic.Int64

// inprocAddr returns an in-process address no other test uses.
func inprocAddr(t testing.TB) string {
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	return fmt.Sprintf("inproc:%s-%d", name, addrSeq.Add(1))
}

// tcpAddr returns an address of the provider across hosts on loopback,
// with a port the system chooses.
func tcpAddr(testing.TB) string { return "tcp:127.0.0.1:0" }

// shmAddr returns a same-host address in a directory of its own: a short
// path, since a Unix socket's path is limited to 107 bytes.
func shmAddr(t testing.TB) string {
	dir, err := os.MkdirTemp("", "exsnet")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return "shm:" + dir + "/s"
}

func ctxTimeout(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func listen(t testing.TB, addr string, opts ...exsnet.Option) *exsnet.Listener {
	t.Helper()
	ln, err := exsnet.Listen(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// pair returns the two ends of a connection to a listener at addr: the
// dialed one and the accepted one.
func pair(t testing.TB, ln net.Listener, addr string, opts ...exsnet.Option) (client, server *exsnet.Conn, err error) {
	type accepted struct {
		c   net.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		c, err := ln.Accept()
		ch <- accepted{c, err}
	}()
	client, err = exsnet.Dial(ctxTimeout(t), addr, opts...)
	if err != nil {
		ln.Close()
		<-ch
		return nil, nil, err
	}
	a := <-ch
	if a.err != nil {
		client.Close()
		return nil, nil, a.err
	}
	return client, a.c.(*exsnet.Conn), nil
}

// connPair returns a connected pair over a listener of its own at addr,
// closed at the end of the test.
func connPair(t testing.TB, addr string, opts ...exsnet.Option) (client, server *exsnet.Conn) {
	t.Helper()
	ln := listen(t, addr, opts...)
	client, server, err := pair(t, ln, addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		client.Close()
		server.Close()
	})
	return client, server
}

// startChild starts the child serving at addr and returns once it has
// written its first line ("ready", then what the child says of itself,
// which it returns). The child's stdin is closed at the end of the test,
// and the test waits for it to exit.
func startChild(t testing.TB, role, addr string) string {
	t.Helper()
	b, err := json.Marshal(addr)
	if err != nil {
		t.Fatal(err)
	}
	c := childproc.StartTest(t, childproc.Spec{Env: []string{childEnv + "=" + role, childArgEnv + "=" + string(b)}})
	l, err := c.LineWithin(testTimeout)
	if err != nil {
		t.Fatalf("child %s: %v", role, err)
	}
	rest, found := strings.CutPrefix(l, "ready")
	if !found {
		t.Fatalf("child %s: first line %q, want ready", role, l)
	}
	return strings.TrimSpace(rest)
}

// serveUntilStdinCloses runs serve with a listener at addr, after saying
// "ready", until the parent closes the child's stdin; then it closes the
// listener and waits for serve to return.
func serveUntilStdinCloses(addr string, serve func(ln *exsnet.Listener) error) error {
	ln, err := exsnet.Listen(addr)
	if err != nil {
		return err
	}
	fmt.Println("ready", ln.Addr()) // a port the system chose for tcp:HOST:0
	errc := make(chan error, 1)
	go func() { errc <- serve(ln) }()
	io.Copy(io.Discard, os.Stdin)
	ln.Close()
	return <-errc
}

// childRelay accepts connections in pairs, the first two, then the next
// two, and so on, and copies each one's bytes to the other, passing on
// the end of each direction (CloseWrite) and resets (Close): two ends
// that the parent dials in turn behave as one connection between two
// processes' adapters.
func childRelay(addr string) error {
	return serveUntilStdinCloses(addr, func(ln *exsnet.Listener) error {
		var wg sync.WaitGroup
		defer wg.Wait()
		for {
			a, err := ln.Accept()
			if err != nil {
				return nil
			}
			b, err := ln.Accept()
			if err != nil {
				a.Close()
				return nil
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				relay(a.(*exsnet.Conn), b.(*exsnet.Conn))
			}()
		}
	})
}

func relay(a, b *exsnet.Conn) {
	var wg sync.WaitGroup
	var once sync.Once
	reset := func() {
		once.Do(func() {
			a.Close()
			b.Close()
		})
	}
	half := func(dst, src *exsnet.Conn) {
		defer wg.Done()
		if _, err := io.Copy(dst, src); err != nil {
			reset()
			return
		}
		dst.CloseWrite()
	}
	wg.Add(2)
	go half(a, b)
	go half(b, a)
	wg.Wait()
	reset()
}

// processPipe returns a nettest.MakePipe whose two ends are connections
// to a relay in a child process (childRelay) over the same-host provider.
func processPipe(t *testing.T, addrOf func(testing.TB) string) func() (net.Conn, net.Conn, func(), error) {
	addr := startChild(t, "relay", addrOf(t))
	return func() (net.Conn, net.Conn, func(), error) {
		ctx := ctxTimeout(t)
		c1, err := exsnet.Dial(ctx, addr)
		if err != nil {
			return nil, nil, nil, err
		}
		c2, err := exsnet.Dial(ctx, addr)
		if err != nil {
			c1.Close()
			return nil, nil, nil, err
		}
		return c1, c2, func() { closeBoth(c1, c2) }, nil
	}
}

// closeBoth closes two connections at once, as two programs would.
func closeBoth(c1, c2 net.Conn) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c1.Close()
	}()
	c2.Close()
	wg.Wait()
}

// localPipe returns a nettest.MakePipe over a listener of its own at an
// address from addr, for each pipe.
func localPipe(t *testing.T, addr func(testing.TB) string, opts ...exsnet.Option) func() (net.Conn, net.Conn, func(), error) {
	return func() (net.Conn, net.Conn, func(), error) {
		a := addr(t)
		ln, err := exsnet.Listen(a, opts...)
		if err != nil {
			return nil, nil, nil, err
		}
		// The listener's address: a port the system chose for tcp:HOST:0.
		c1, c2, err := pair(t, ln, ln.Addr().String(), opts...)
		if err != nil {
			ln.Close()
			return nil, nil, nil, err
		}
		return c1, c2, func() {
			closeBoth(c1, c2)
			ln.Close()
		}, nil
	}
}
