package childproc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// roleEnv makes this test binary a child in the role it names.
const roleEnv = "EXS_CHILDPROC_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "":
		os.Exit(m.Run())
	case "greet": // two lines, then waits for its stdin to close
		fmt.Println("hello")
		fmt.Println("world")
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	case "fail": // a reason on stderr, then exit status 3
		fmt.Fprintln(os.Stderr, "something broke")
		os.Exit(3)
	case "deaf": // ignores its stdin closing
		fmt.Println("ready")
		time.Sleep(time.Minute)
		os.Exit(0)
	case "chatty": // far more than a pipe holds, then waits
		for range 20000 {
			fmt.Println("chatter")
		}
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	os.Exit(2)
}

func start(t *testing.T, role string) *Child {
	t.Helper()
	c, err := Start(Spec{Env: []string{roleEnv + "=" + role}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop(time.Second) })
	return c
}

func TestLines(t *testing.T) {
	c := start(t, "greet")
	for _, want := range []string{"hello", "world"} {
		if got, err := c.LineWithin(10 * time.Second); got != want || err != nil {
			t.Fatalf("Line = %q, %v; want %q", got, err, want)
		}
	}
	if _, err := c.LineWithin(50 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "within") {
		t.Errorf("a third line: %v, want a timeout", err)
	}
	if err := c.Stop(10 * time.Second); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if _, err := c.LineWithin(time.Second); !errors.Is(err, ErrNoLine) {
		t.Errorf("Line after the end: %v, want ErrNoLine", err)
	}
	if st := c.ProcessState(); st == nil || !st.Success() {
		t.Errorf("ProcessState = %v", st)
	}
}

func TestFailureCarriesStderr(t *testing.T) {
	c := start(t, "fail")
	if _, err := c.LineWithin(10 * time.Second); !errors.Is(err, ErrNoLine) {
		t.Errorf("Line: %v, want ErrNoLine", err)
	}
	err := c.Stop(10 * time.Second)
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "something broke") {
		t.Errorf("Stop: %v, want exit status 3 and the child's stderr", err)
	}
	if err2 := c.Stop(time.Second); err2 != err {
		t.Errorf("a second Stop: %v, want the first one's %v", err2, err)
	}
}

func TestStopKillsDeafChild(t *testing.T) {
	c := start(t, "deaf")
	if l, err := c.LineWithin(10 * time.Second); l != "ready" || err != nil {
		t.Fatalf("Line = %q, %v", l, err)
	}
	begin := time.Now()
	err := c.Stop(100 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("Stop: %v, want killed", err)
	}
	if el := time.Since(begin); el > 5*time.Second {
		t.Errorf("Stop took %v", el)
	}
}

func TestKillIsNoFailure(t *testing.T) {
	c := start(t, "deaf")
	if _, err := c.LineWithin(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("not exited 10 s after Kill")
	}
	if err := c.Stop(time.Second); err != nil {
		t.Errorf("Stop after Kill: %v", err)
	}
}

func TestChattyChildDoesNotBlock(t *testing.T) {
	c := start(t, "chatty")
	if l, err := c.LineWithin(10 * time.Second); l != "chatter" || err != nil {
		t.Fatalf("Line = %q, %v", l, err)
	}
	// It printed 160 kB and waits for its stdin: it must not be stuck
	// on a full pipe, so it exits at once when asked to.
	if err := c.Stop(10 * time.Second); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

func TestTail(t *testing.T) {
	var tb tailBuffer
	tb.write([]byte(strings.Repeat("a", stderrTail)))
	tb.write([]byte("bc"))
	if s := tb.String(); len(s) != stderrTail+3 || !strings.HasPrefix(s, "...a") || !strings.HasSuffix(s, "abc") {
		t.Errorf("tail of %d bytes starting %q", len(s), s[:8])
	}
}
