//go:build linux

package shm_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/exsgo/exs/internal/childproc"
	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/shm"
	"github.com/exsgo/exs/verbs/verbstest"
)

// credChildEnv makes the test binary a process of another user for
// TestPeerUID: "dial ADDR [UID]" or "listen ADDR [UID]", UID being a user
// it admits besides its own (shm.WithAllowUIDs).
const credChildEnv = "EXS_SHM_CRED_CHILD"

// otherUID is the user the child runs as: nobody.
const otherUID = 65534

// credQP is a queue pair with a receive buffer and a RECV posted.
type credQP struct {
	qp  *verbs.QP
	cq  *verbs.CQ
	buf []byte
	mr  *verbs.MR
}

func newCredQP(dev *verbs.Device) (*credQP, error) {
	pd, err := dev.AllocPD()
	if err != nil {
		return nil, err
	}
	cq, err := dev.CreateCQ(16, verbs.CQOptions{})
	if err != nil {
		return nil, err
	}
	qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, SignalAll: true})
	if err != nil {
		return nil, err
	}
	c := &credQP{qp: qp, cq: cq, buf: make([]byte, 256)}
	if c.mr, err = pd.RegisterMR(c.buf, mreg.LocalWrite); err != nil {
		return nil, err
	}
	return c, qp.PostRecv(verbs.RecvWR{WRID: 1, SGL: []verbs.SGE{c.mr.SGE(0, 128)}})
}

// send sends s from the upper half of the buffer and waits for its
// completion.
func (c *credQP) send(ctx context.Context, s string) error {
	n := copy(c.buf[128:], s)
	if err := c.qp.PostSend(verbs.SendWR{WRID: 2, Opcode: verbs.OpSend, SGL: []verbs.SGE{c.mr.SGE(128, n)}}); err != nil {
		return err
	}
	wc, err := c.wait(ctx)
	if err == nil && wc.Status != verbs.StatusSuccess {
		err = fmt.Errorf("SEND: %v", wc.Status)
	}
	return err
}

// recv waits for the message of the RECV posted.
func (c *credQP) recv(ctx context.Context) (string, error) {
	wc, err := c.wait(ctx)
	if err != nil {
		return "", err
	}
	if wc.Status != verbs.StatusSuccess {
		return "", fmt.Errorf("RECV: %v", wc.Status)
	}
	return string(c.buf[:wc.ByteLen]), nil
}

func (c *credQP) wait(ctx context.Context) (verbs.WC, error) {
	wcs := make([]verbs.WC, 1)
	_, err := c.cq.Wait(ctx, wcs, 1)
	return wcs[0], err
}

// credChildMain is the child of TestPeerUID. It reports on stdout, one
// line each: "listening", then "received MSG" or "no request" (once its
// stdin ends); or "sent", or "refused EACCES ERR" or "failed ERR".
func credChildMain(spec string) int {
	f := strings.Fields(spec)
	if len(f) < 2 {
		fmt.Println("failed: bad spec", spec)
		return 2
	}
	var opts []shm.Option
	if len(f) > 2 {
		uid, err := strconv.Atoi(f[2])
		if err != nil {
			fmt.Println("failed:", err)
			return 2
		}
		opts = append(opts, shm.WithAllowUIDs(uid))
	}
	ctx, cancel := context.WithTimeout(context.Background(), verbstest.Timeout)
	defer cancel()
	go func() { // the parent closes stdin when it is done with us
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	dev, err := verbs.Open(newProvider(opts...))
	if err != nil {
		fmt.Println("failed:", err)
		return 1
	}
	defer dev.Close()
	c, err := newCredQP(dev)
	if err != nil {
		fmt.Println("failed:", err)
		return 1
	}
	switch f[0] {
	case "dial":
		if _, err := c.qp.Connect(ctx, f[1], nil); err != nil {
			fmt.Println("refused", errors.Is(err, syscall.EACCES), err)
			return 0
		}
		if err := c.send(ctx, fmt.Sprintf("hello from uid %d", os.Geteuid())); err != nil {
			fmt.Println("failed:", err)
			return 1
		}
		fmt.Println("sent")
		<-ctx.Done()
	case "listen":
		ln, err := dev.Listen(f[1])
		if err != nil {
			fmt.Println("failed:", err)
			return 1
		}
		defer ln.Close()
		fmt.Println("listening")
		r, err := ln.Accept(ctx)
		if err != nil {
			fmt.Println("no request")
			return 0
		}
		if err := r.Accept(c.qp, nil); err != nil {
			fmt.Println("failed:", err)
			return 1
		}
		msg, err := c.recv(ctx)
		if err != nil {
			fmt.Println("failed:", err)
			return 1
		}
		fmt.Println("received", msg)
	}
	return 0
}

// startCredChild runs the test binary exe as otherUID with spec; the
// child stops at the end of the test.
func startCredChild(t *testing.T, exe, spec string) *childproc.Child {
	t.Helper()
	return childproc.StartTest(t, childproc.Spec{
		Exe:  exe,
		Env:  []string{credChildEnv + "=" + spec},
		Cred: &syscall.Credential{Uid: otherUID, Gid: otherUID},
	})
}

// childLine returns the child's next line of output.
func childLine(t *testing.T, c *childproc.Child) string {
	t.Helper()
	s, err := c.LineWithin(verbstest.Timeout)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// childBinary returns a copy of the test binary that otherUID may run (the
// build directory is private to its owner), skipping the test unless it
// runs as root; under CI, which runs as root, not being root fails it.
func childBinary(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but the test runs as uid %d: starting a process of another user takes root", os.Geteuid())
		}
		t.Skipf("starting a process of another user (uid %d) takes root; this is uid %d", otherUID, os.Geteuid())
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := sockDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	path := filepath.Join(dir, "shm.test")
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPeerUID runs the other end of a connection as another user (nobody):
// by default a listener refuses its request (the dial fails with EACCES,
// nothing reaches Accept, and the listener goes on serving its own user)
// and a dialer refuses its listener; admitted with shm.WithAllowUIDs on
// both ends, the two connect and a message goes through, the listener
// seeing the dialer's uid in QP.Peer.
func TestPeerUID(t *testing.T) {
	exe := childBinary(t)
	dir := sockDir(t)
	if err := os.Chmod(dir, 0o777); err != nil { // the child listens in it too
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), verbstest.Timeout)
	defer cancel()
	open := func(opts ...shm.Option) *verbs.Device {
		dev, err := verbs.Open(newProvider(opts...))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Close() })
		return dev
	}
	listen := func(dev *verbs.Device, addr string) *verbs.Listener {
		ln, err := dev.Listen(addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		// The socket's file permissions would stop the child before the
		// check: open them, so that the check is what refuses.
		if err := os.Chmod(strings.TrimPrefix(addr, shm.Scheme), 0o777); err != nil {
			t.Fatal(err)
		}
		return ln
	}
	qpOf := func(dev *verbs.Device) *credQP {
		c, err := newCredQP(dev)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	t.Run("ListenerRefuses", func(t *testing.T) {
		dev := open()
		addr := shm.Scheme + dir + "/refuse"
		ln := listen(dev, addr)
		// The child admits this process's user: the refusal is the
		// listener's.
		child := startCredChild(t, exe, "dial "+addr+" 0")
		if got := childLine(t, child); !strings.HasPrefix(got, "refused true ") || !strings.Contains(got, "listener refuses") {
			t.Fatalf("the child's dial: %q, want the listener's refusal, EACCES", got)
		} else {
			t.Log("child:", got)
		}
		// The refused request never reached Accept: the next one is
		// this process's own.
		mine := qpOf(open())
		go mine.qp.Connect(ctx, addr, []byte("same user"))
		r, err := ln.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(r.PrivateData()); got != "same user" {
			t.Fatalf("Accept returned a request with private data %q, want this process's", got)
		}
		r.Reject(nil)
	})

	t.Run("DialerRefuses", func(t *testing.T) {
		addr := shm.Scheme + dir + "/child1"
		child := startCredChild(t, exe, "listen "+addr+" 0")
		if got := childLine(t, child); got != "listening" {
			t.Fatalf("the child: %q", got)
		}
		c := qpOf(open())
		_, err := c.qp.Connect(ctx, addr, nil)
		if !errors.Is(err, syscall.EACCES) || !errors.Is(err, os.ErrPermission) || !strings.Contains(err.Error(), "uid 65534") {
			t.Fatalf("Connect to a listener of uid %d = %v, want EACCES naming its uid", otherUID, err)
		}
		t.Log(err)
		child.CloseStdin()
		if got := childLine(t, child); got != "no request" {
			t.Errorf("the child's listener: %q, want no request", got)
		}
	})

	t.Run("Allowed", func(t *testing.T) {
		dev := open(shm.WithAllowUIDs(otherUID))
		addr := shm.Scheme + dir + "/allow"
		ln := listen(dev, addr)
		child := startCredChild(t, exe, "dial "+addr+" 0")
		r, err := ln.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c := qpOf(dev)
		if err := r.Accept(c.qp, nil); err != nil {
			t.Fatal(err)
		}
		msg, err := c.recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("hello from uid %d", otherUID); msg != want {
			t.Errorf("received %q, want %q", msg, want)
		}
		if got := childLine(t, child); got != "sent" {
			t.Errorf("the child: %q", got)
		}
		if cred := c.qp.Peer().Cred; cred == nil || cred.UID != otherUID || cred.GID != otherUID || cred.PID != child.Pid() {
			t.Errorf("Peer().Cred = %+v, want pid %d, uid and gid %d", cred, child.Pid(), otherUID)
		}
	})
}

// TestPeerCheck checks shm.WithPeerCheck within one user: it is given the
// peer's credentials from the kernel, a listener's refusal fails the dial
// with EACCES and the check's error without queueing the request, a
// dialer's refusal fails its own dial, and admitted peers connect.
func TestPeerCheck(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), verbstest.Timeout)
	defer cancel()
	dir := sockDir(t)
	errNo := errors.New("not this one")
	var mu sync.Mutex // the check runs in the listener's goroutines
	var seen []verbs.Cred
	refuse := func(c verbs.Cred) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, c)
		return errNo
	}
	saw := func() []verbs.Cred {
		mu.Lock()
		defer mu.Unlock()
		s := seen
		seen = nil
		return s
	}
	open := func(opts ...shm.Option) *verbs.Device {
		dev, err := verbs.Open(newProvider(opts...))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Close() })
		return dev
	}
	qpOf := func(dev *verbs.Device) *credQP {
		c, err := newCredQP(dev)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	me := verbs.Cred{PID: os.Getpid(), UID: os.Geteuid(), GID: os.Getegid()}

	// A listener that refuses everyone.
	lnDev := open(shm.WithPeerCheck(refuse))
	ln, err := lnDev.Listen(shm.Scheme + dir + "/l")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = qpOf(open()).qp.Connect(ctx, ln.Addr(), nil)
	if !errors.Is(err, syscall.EACCES) {
		t.Fatalf("Connect to a listener that refuses = %v, want EACCES", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	if r, err := ln.Accept(short); err == nil {
		t.Errorf("Accept returned a refused request (private data %q)", r.PrivateData())
	}
	cancelShort()
	if s := saw(); len(s) != 1 || s[0] != me {
		t.Errorf("the check saw %+v, want once %+v", s, me)
	}

	// A dialer that refuses every listener: the listener's request
	// never comes.
	okDev := open()
	ok, err := okDev.Listen(shm.Scheme + dir + "/ok")
	if err != nil {
		t.Fatal(err)
	}
	defer ok.Close()
	_, err = qpOf(open(shm.WithPeerCheck(refuse))).qp.Connect(ctx, ok.Addr(), nil)
	if !errors.Is(err, syscall.EACCES) || !errors.Is(err, errNo) {
		t.Fatalf("Connect by a dialer that refuses = %v, want EACCES and the check's error", err)
	}
	if s := saw(); len(s) != 1 || s[0] != me {
		t.Errorf("the check saw %+v, want once %+v", s, me)
	}

	// A check that admits.
	adm := open(shm.WithPeerCheck(func(c verbs.Cred) error { return nil }))
	errc := make(chan error, 1)
	go func() {
		r, err := ok.Accept(ctx)
		if err == nil {
			err = r.Accept(qpOf(okDev).qp, nil)
		}
		errc <- err
	}()
	if _, err := qpOf(adm).qp.Connect(ctx, ok.Addr(), nil); err != nil {
		t.Fatalf("Connect by a dialer that admits: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
