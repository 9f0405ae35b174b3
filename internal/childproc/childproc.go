// Package childproc runs this executable again as a child process in a
// role, and talks to it over pipes: the one harness of the tests (and of
// exsperf) that need a peer in another process.
//
// The child learns its role from its environment (Spec.Env) or arguments
// (Spec.Args): a TestMain looks for it before m.Run. The parent reads the
// child's standard output line by line (Line), may close the child's
// standard input to tell it to stop (Stop does), and keeps the tail of
// its standard error, which the errors of Stop carry: a child that fails
// says why in the parent's failure. Stop, or StartTest's cleanup, kills a
// child that does not exit in time and always waits for it, so that no
// child outlives its test.
package childproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// TestArgs are the arguments that make a test binary run no test and no
// benchmark: its TestMain alone acts, in the role the environment names.
var TestArgs = []string{"-test.run=^$", "-test.bench=^$"}

// Grace is how long Stop waits for a child to exit once its standard
// input is closed, by default, before it kills it.
const Grace = 10 * time.Second

// maxLines bounds the lines of standard output kept unread: a child that
// prints more than that meanwhile loses the later ones (Line reports the
// end of its output once it has returned those), and never blocks on a
// full pipe.
const maxLines = 1024

// stderrTail is how much of the end of a child's standard error is kept.
const stderrTail = 16 << 10

// Spec says how to start a child.
type Spec struct {
	// Exe is the executable; "" is this one (os.Executable).
	Exe string
	// Args are its arguments; nil is TestArgs.
	Args []string
	// Via is a command line the executable runs under, for instance
	// "ip netns exec NAME"; nil runs it directly.
	Via []string
	// Env is added to this process's environment. GORACE gets
	// atexit_sleep_ms=0 as well: a binary built with -race sleeps a
	// second at exit unless told not to.
	Env []string
	// Files are the child's descriptors 3, 4 and on; Start closes the
	// parent's copies once the child has them.
	Files []*os.File
	// Cred, if set, is the user and group the child runs as.
	Cred *syscall.Credential
	// MergeStdout sends the child's standard output where its standard
	// error goes, instead of to Line.
	MergeStdout bool
	// Stderr, if set, receives a copy of the child's standard error as
	// it comes (the tail is kept regardless).
	Stderr io.Writer
}

// Child is a running child process.
type Child struct {
	cmd   *exec.Cmd
	stdin io.Closer

	mu    sync.Mutex
	lines []string
	eof   bool
	more  chan struct{} // closed and replaced when a line or the end comes
	tail  tailBuffer

	stdout, stderr *os.File       // the read ends, closed by a Stop that kills
	readers        sync.WaitGroup // the readers of stdout and stderr
	exited         chan struct{}  // closed once the child is waited for
	waitErr        error          // cmd.Wait's, once exited is closed
	killed         atomic.Bool

	stopOnce sync.Once
	stopErr  error
}

// Start starts a child. Its standard output is read into lines (Line), its
// standard error into a tail (and Spec.Stderr); both readers and the wait
// for the child end once it exits, at the latest when Stop returns.
func Start(s Spec) (*Child, error) {
	exe := s.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("the child process: %w", err)
		}
	}
	args := s.Args
	if args == nil {
		args = TestArgs
	}
	argv := append(append(append([]string(nil), s.Via...), exe), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(append(os.Environ(), s.Env...), "GORACE="+gorace)
	cmd.ExtraFiles = s.Files
	if s.Cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.Cred}
	}
	var ours, theirs []*os.File // pipe ends: kept here, and the child's
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			f.Close()
		}
	}
	pipe := func() (r, w *os.File, err error) {
		if r, w, err = os.Pipe(); err == nil {
			ours, theirs = append(ours, r), append(theirs, w)
		}
		return r, w, err
	}
	inR, inW, err1 := os.Pipe()
	if err1 == nil {
		ours, theirs = append(ours, inW), append(theirs, inR)
	}
	outR, outW, err2 := pipe()
	errR, errW, err3 := pipe()
	if err := errors.Join(err1, err2, err3); err != nil {
		closeAll(ours)
		closeAll(theirs)
		closeAll(s.Files)
		return nil, fmt.Errorf("the child process: %w", err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	if s.MergeStdout {
		cmd.Stdout = errW
	}
	err := cmd.Start()
	// The child holds its ends now; ours must go so that the pipes end
	// when the child does.
	closeAll(theirs)
	closeAll(s.Files)
	if err != nil {
		closeAll(ours)
		return nil, fmt.Errorf("starting the child process: %w", err)
	}
	c := &Child{cmd: cmd, stdin: inW, stdout: outR, stderr: errR, more: make(chan struct{}), exited: make(chan struct{})}
	c.readers.Add(2)
	go c.readLines(outR)            // owner: the waiter below, which waits for it
	go c.readStderr(errR, s.Stderr) // likewise
	go func() {                     // the waiter; owner: Stop, which waits for exited
		c.waitErr = cmd.Wait()
		c.readers.Wait()
		close(c.exited)
	}()
	return c, nil
}

// readLines reads the child's standard output into c.lines until it ends.
// Once maxLines lines wait unread, the rest of the output is read and
// dropped.
func (c *Child) readLines(r io.Reader) {
	defer c.readers.Done()
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		c.mu.Lock()
		if line != "" {
			c.lines = append(c.lines, strings.TrimSuffix(line, "\n"))
		}
		full := len(c.lines) >= maxLines
		if full {
			c.mu.Unlock()
			io.Copy(io.Discard, br)
			c.mu.Lock()
		}
		if err != nil || full {
			c.eof = true
		}
		close(c.more)
		c.more = make(chan struct{})
		c.mu.Unlock()
		if err != nil || full {
			return
		}
	}
}

// readStderr keeps the tail of the child's standard error, copying it to w
// if w is not nil.
func (c *Child) readStderr(r io.Reader, w io.Writer) {
	defer c.readers.Done()
	var buf [4096]byte
	for {
		n, err := r.Read(buf[:])
		if n > 0 {
			c.mu.Lock()
			c.tail.write(buf[:n])
			c.mu.Unlock()
			if w != nil {
				w.Write(buf[:n])
			}
		}
		if err != nil {
			return
		}
	}
}

// Pid returns the child's process id.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// ProcessState returns the child's state once it has exited (after Stop),
// or nil.
func (c *Child) ProcessState() *os.ProcessState {
	select {
	case <-c.exited:
		return c.cmd.ProcessState
	default:
		return nil
	}
}

// Exited returns a channel closed once the child has exited and its output
// has been read.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// ErrNoLine is Line's error when the child's standard output ended.
var ErrNoLine = errors.New("the child process's output ended")

// Line returns the child's next line of standard output, without its
// newline. It fails with ErrNoLine (and what the child wrote on standard
// error) once the output ended, or with ctx's error.
func (c *Child) Line(ctx context.Context) (string, error) {
	for {
		c.mu.Lock()
		if len(c.lines) > 0 {
			l := c.lines[0]
			c.lines = c.lines[1:]
			c.mu.Unlock()
			return l, nil
		}
		eof, more := c.eof, c.more
		c.mu.Unlock()
		if eof {
			return "", c.withStderr(ErrNoLine)
		}
		select {
		case <-more:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// LineWithin is Line with a timeout.
func (c *Child) LineWithin(d time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	l, err := c.Line(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("no line from the child process within %v", d)
	}
	return l, err
}

// CloseStdin closes the child's standard input: the child's sign to stop.
func (c *Child) CloseStdin() error { return c.stdin.Close() }

// Stderr returns the tail of what the child wrote on standard error so
// far.
func (c *Child) Stderr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tail.String()
}

// Kill kills the child at once (SIGKILL). Stop then reports no error for
// its death.
func (c *Child) Kill() error {
	c.killed.Store(true)
	err := c.cmd.Process.Kill()
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// Stop closes the child's standard input, waits up to grace for it to
// exit, kills it if it has not, and waits for it. It returns an error if
// the child had to be killed, or exited with an error (other than after
// Kill), with the tail of its standard error. Later calls return the first
// one's result.
func (c *Child) Stop(grace time.Duration) error {
	c.stopOnce.Do(func() {
		c.stdin.Close()
		timer := time.NewTimer(grace)
		defer timer.Stop()
		select {
		case <-c.exited:
		case <-timer.C:
			c.cmd.Process.Kill()
			// Closing the read ends ends the readers even if something
			// other than the child still holds the pipes' write ends.
			c.stdout.Close()
			c.stderr.Close()
			<-c.exited
			c.stopErr = c.withStderr(fmt.Errorf("the child process %d did not exit within %v: killed", c.Pid(), grace))
			return
		}
		if c.waitErr != nil && !c.killed.Load() {
			c.stopErr = c.withStderr(fmt.Errorf("the child process %d: %w", c.Pid(), c.waitErr))
		}
	})
	return c.stopErr
}

// withStderr adds the tail of the child's standard error to err.
func (c *Child) withStderr(err error) error {
	if s := strings.TrimSpace(c.Stderr()); s != "" {
		return fmt.Errorf("%w; its standard error:\n%s", err, s)
	}
	return err
}

// TB is the part of testing.TB StartTest uses.
type TB interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Failed() bool
	Logf(format string, args ...any)
}

// StartTest starts a child for a test, failing it if the child does not
// start. At the end of the test the child is stopped (Stop with Grace): a
// child that had to be killed or failed fails the test, and a failed
// test shows what the child wrote on standard error.
func StartTest(t TB, s Spec) *Child {
	t.Helper()
	c, err := Start(s)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(Grace); err != nil {
			t.Errorf("%v", err)
		} else if t.Failed() {
			if s := strings.TrimSpace(c.Stderr()); s != "" {
				t.Logf("the child process %d's standard error:\n%s", c.Pid(), s)
			}
		}
	})
	return c
}

// tailBuffer keeps the last stderrTail bytes written to it.
type tailBuffer struct {
	b   []byte
	cut bool
}

func (t *tailBuffer) write(p []byte) {
	t.b = append(t.b, p...)
	if over := len(t.b) - stderrTail; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
		t.cut = true
	}
}

func (t *tailBuffer) String() string {
	if t.cut {
		return "..." + string(t.b)
	}
	return string(t.b)
}
