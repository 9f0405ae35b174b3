package usertest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/exsgo/exs/exs"
)

// childEnv names what this test binary does when it runs as a child
// process of a test (see child); childArgEnv carries its argument.
const (
	childEnv    = "EXS_USERTEST_CHILD"
	childArgEnv = "EXS_USERTEST_ARG"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(child(role, os.Getenv(childArgEnv)))
	}
	goleak.VerifyTestMain(m)
}

// child runs this binary's part as a child process and returns its exit
// status. It reports on stdout, one line per report.
func child(role, arg string) int {
	var err error
	switch role {
	case "ending":
		err = childEnding(arg)
	case "dial":
		err = childDial(arg)
	case "scale":
		err = childScale(arg)
	case "sched":
		err = childSched(arg)
	case "vanishing":
		err = childVanishing(arg)
	case "survivor":
		err = childSurvivor(arg)
	default:
		err = fmt.Errorf("unknown child role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "usertest child:", err)
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

// shmAddr returns a same-host address in a directory of the test's.
func shmAddr(t testing.TB) string {
	return "shm:" + t.TempDir() + "/s"
}

// tcpAddr returns a loopback TCP address with a port nobody listens on:
// one the system gave a listener that is closed at once, so that the tests
// can connect before they listen. (Listening on port 0 takes a port
// too: TestListenPortZero.)
func tcpAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return "tcp:" + ln.Addr().String()
}

// newStack returns a stack that is closed at the end of the test.
func newStack(t testing.TB, opts ...exs.StackOption) *exs.Stack {
	t.Helper()
	st, err := exs.NewStack(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func newQueue(t testing.TB, st *exs.Stack, depth int) *exs.Queue {
	t.Helper()
	q, err := st.Qcreate(depth)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// next dequeues one event, waiting at most testTimeout.
func next(q *exs.Queue) (exs.Event, error) {
	var evs [1]exs.Event
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if _, err := q.DequeueContext(ctx, evs[:], 1); err != nil {
		return exs.Event{}, err
	}
	return evs[0], nil
}

// childConnect is a child process's connection: it creates a queue of st,
// connects a socket of type typ to addr and waits for the connect's event.
func childConnect(st *exs.Stack, typ exs.SockType, addr string) (*exs.Queue, *exs.Socket, error) {
	q, err := st.Qcreate(4)
	if err != nil {
		return nil, nil, err
	}
	s, err := st.Socket(typ)
	if err != nil {
		return nil, nil, err
	}
	if err := s.Connect(q, addr, nil); err != nil {
		return nil, nil, err
	}
	ev, err := next(q)
	if err == nil {
		err = ev.Err
	}
	if err != nil {
		return nil, nil, err
	}
	return q, s, nil
}

// wait dequeues one event and checks its type and user value.
func wait(t testing.TB, q *exs.Queue, typ exs.EventType, user any) exs.Event {
	t.Helper()
	ev, err := next(q)
	if err != nil {
		t.Fatalf("waiting for %v (%v): %v", typ, user, err)
	}
	if ev.Type != typ || ev.User != user {
		t.Fatalf("event %v (user %v, n %d, err %v), want %v (user %v)", ev.Type, ev.User, ev.N, ev.Err, typ, user)
	}
	return ev
}

// listen makes a listening socket of typ at addr with an accept posted.
func listen(t testing.TB, st *exs.Stack, q *exs.Queue, typ exs.SockType, addr string, opts ...exs.SocketOption) *exs.Socket {
	t.Helper()
	ln, err := st.Socket(typ, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := ln.Bind(addr); err != nil {
		t.Fatal(err)
	}
	if err := ln.Listen(0); err != nil {
		t.Fatal(err)
	}
	return ln
}

// childProcess is this test binary run as a child with a role.
type childProcess struct {
	cmd   *exec.Cmd
	lines chan string    // the child's stdout, closed at its end
	stdin io.WriteCloser // the child's stdin, closed at the end of the test
}

// startChild starts the child and returns once it has written its first
// line (its address, or "ready"), which it returns. The child's stdin is
// closed at the end of the test, and the test waits for it to exit.
func startChild(t testing.TB, role string, arg any) (*childProcess, string) {
	t.Helper()
	return startChildVia(t, nil, role, arg)
}

// startChildVia is startChild with the child run by the command via
// ("ip netns exec NS", say), which is given the binary and its arguments.
func startChildVia(t testing.TB, via []string, role string, arg any) (*childProcess, string) {
	t.Helper()
	b, err := json.Marshal(arg)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := append(append([]string(nil), via...), exe, "-test.run=^$")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), childEnv+"="+role, childArgEnv+"="+string(b))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &childProcess{cmd: cmd, lines: make(chan string, 16), stdin: stdin}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan error, 1)
		go func() {
			for range c.lines {
			}
			done <- cmd.Wait()
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("child %s: %v", role, err)
			}
		case <-time.After(testTimeout):
			cmd.Process.Kill()
			<-done
			t.Errorf("child %s did not exit", role)
		}
	})
	line, err := c.line()
	if err != nil {
		t.Fatalf("child %s: %v", role, err)
	}
	return c, line
}

// line reads the child's next line of stdout.
func (c *childProcess) line() (string, error) {
	select {
	case l, ok := <-c.lines:
		if !ok {
			return "", errors.New("child ended its output")
		}
		return l, nil
	case <-time.After(testTimeout):
		return "", errors.New("child wrote nothing for too long")
	}
}

// waitStdinClosed blocks until the parent closes the child's stdin.
func waitStdinClosed() { io.Copy(io.Discard, os.Stdin) }
