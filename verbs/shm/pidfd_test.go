//go:build linux

package shm

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// childPidfd starts a child process that waits, and returns it with a
// pidfd of it.
func childPidfd(t *testing.T) (*exec.Cmd, int) {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep command:", err)
	}
	cmd := exec.Command(sleep, "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	fd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
	if errors.Is(err, unix.ENOSYS) {
		t.Skip("no pidfd_open")
	}
	if err != nil {
		t.Fatal(err)
	}
	return cmd, fd
}

// cmaLink returns a link that uses cross-memory attach into the process
// pid, watched through pidfd (which it owns), and a buffer of this
// process with its bytes.
func cmaLink(t *testing.T, pid, pidfd int) *link {
	t.Helper()
	p := mustNew()
	l, _ := socketLink(t, p, testPD(t, p))
	l.cma, l.peerPID, l.pidfd = true, pid, pidfd
	t.Cleanup(func() { l.closePeerProcess(l.pidf != nil) })
	return l
}

// writeSelf tries to write src into dst, in this process, by the link's
// cross-memory attach, as if this process were the peer.
func writeSelf(l *link, dst, src []byte) error {
	var v iovecs
	v.addLocal(src)
	v.addRemote(uint64(uintptrOf(dst)), len(src))
	_, err := l.peerTransfer(&v, true, len(src), false)
	return err
}

// TestCMAAfterFailedCallPeerExited makes a cross-memory-attach call fail
// because the peer process exited and was reaped; its pid is then taken by
// another process (this one, in the test): the link makes no call into it.
func TestCMAAfterFailedCallPeerExited(t *testing.T) {
	cmd, pidfd := childPidfd(t)
	l := cmaLink(t, cmd.Process.Pid, pidfd)
	cmd.Process.Kill()
	cmd.Wait() // reaped: the pid is free

	// A read (harmless if the pid were already someone else's) fails.
	buf := make([]byte, 64)
	var v iovecs
	v.addLocal(buf)
	v.addRemote(uint64(uintptrOf(buf)), len(buf))
	_, err := l.peerTransfer(&v, false, len(buf), false)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("read from the exited peer: %v, want an error wrapping ECONNRESET", err)
	}
	if !l.peerGone.Load() {
		t.Error("the link did not notice the peer's exit on a failed call")
	}

	l.peerPID = os.Getpid() // the pid, reused
	dst, src := make([]byte, 64), bytes.Repeat([]byte{0xa5}, 64)
	if err := writeSelf(l, dst, src); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("write after the peer's exit: %v, want an error wrapping ECONNRESET", err)
	}
	if !bytes.Equal(dst, make([]byte, 64)) {
		t.Error("a write after the peer's exit reached the process that reused its pid")
	}
}

// TestCMAPeerExitWatched lets a link's peer process exit with no call
// failing, its socket still open: the link learns of the exit from the
// pidfd alone and makes no call into the process that then has the pid
// (this one, in the test).
func TestCMAPeerExitWatched(t *testing.T) {
	cmd, pidfd := childPidfd(t)
	l := cmaLink(t, cmd.Process.Pid, pidfd)
	l.watchPeerProcess()
	// The watcher has looked once and found the peer running: it waits in
	// the poller, which must wake it at the exit.
	for l.pidChecks.Load() == 0 {
		runtime.Gosched()
	}
	if l.peerGone.Load() {
		t.Fatal("peer gone while it runs")
	}
	cmd.Process.Kill()
	cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for !l.peerGone.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the link did not notice the peer's exit")
		}
		time.Sleep(time.Millisecond)
	}
	l.peerPID = os.Getpid() // the pid, reused
	dst, src := make([]byte, 64), bytes.Repeat([]byte{0x5a}, 64)
	if err := writeSelf(l, dst, src); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("write after the peer's exit: %v, want an error wrapping ECONNRESET", err)
	}
	if !bytes.Equal(dst, make([]byte, 64)) {
		t.Error("a write after the peer's exit reached the process that reused its pid")
	}
}

// TestCMAPeerAlive checks the other side of the two tests above: with the
// peer alive (this process), calls go through and the watcher stops when
// the link closes the pidfd.
func TestCMAPeerAlive(t *testing.T) {
	pidfd, err := unix.PidfdOpen(os.Getpid(), 0)
	if errors.Is(err, unix.ENOSYS) {
		t.Skip("no pidfd_open")
	}
	if err != nil {
		t.Fatal(err)
	}
	l := cmaLink(t, os.Getpid(), pidfd)
	l.watchPeerProcess()
	dst, src := make([]byte, 64), bytes.Repeat([]byte{7}, 64)
	if err := writeSelf(l, dst, src); err != nil || !bytes.Equal(dst, src) {
		t.Errorf("write into a live peer: %v, bytes equal %v", err, bytes.Equal(dst, src))
	}
	l.closePeerProcess(true)
	if l.peerGone.Load() {
		t.Error("closing the pidfd marked the peer gone")
	}
}

// TestPeerPidfd checks that the rendezvous gets a pidfd of the socket's
// peer (here this process).
func TestPeerPidfd(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[1])
	f := os.NewFile(uintptr(fds[0]), "sock")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	uc := c.(*net.UnixConn)
	pid, err := peerPID(uc)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := peerPidfd(uc, pid)
	if err != nil {
		t.Fatal(err)
	}
	if fd < 0 {
		t.Skip("no pidfds")
	}
	defer unix.Close(fd)
	info, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", fd))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("\nPid:\t%d\n", os.Getpid()); !strings.Contains(string(info), want) {
		t.Errorf("fdinfo of the pidfd:\n%s\nwant %q", info, want)
	}
	if pidfdExited(fd) || checkPeerProcess(fd, nil) != "" {
		t.Error("this process reported exited")
	}
}
