package usertest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/exsgo/exs/exs"
	"github.com/exsgo/exs/verbs/tcp"
)

// A peer host that vanishes (power lost, cable pulled, a firewall that
// drops everything) sends no FIN and no reset. A user who connects across
// hosts wants the recv that waits on such a connection to fail, as TCP's
// and RDMA's do, not to wait forever.

// peerTimeout is the survivor's tcp.WithPeerTimeout.
const peerTimeout = 2 * time.Second

// vanishReport is what the survivor child reports.
type vanishReport struct {
	Err       string
	ETIMEDOUT bool // errors.Is(ev.Err, syscall.ETIMEDOUT)
	TimedOut  bool // errors.Is(ev.Err, exs.ErrPeerTimedOut)
	Deadline  bool // errors.Is(ev.Err, os.ErrDeadlineExceeded): it must not
	Type      string
	After     time.Duration // from "ready" to the recv's event
	Close     time.Duration // Socket.Close to its EventClose
	StackEnd  time.Duration // Stack.Close and the provider's Close
}

// TestPeerVanishes runs exs over tcp between two network namespaces
// joined by a veth pair, each end in a child process; the survivor's
// stack uses tcp.New(tcp.WithPeerTimeout(2 s)) for "tcp". Once the
// survivor has a recv posted, the other host's veth goes down: no FIN, no
// reset, nothing. The recv must complete with an error matching ETIMEDOUT
// about 2 s later, and closing must not wait for the peer. It needs root
// and iproute2: outside CI it skips without them; under CI=true it fails.
func TestPeerVanishes(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the tcp provider is built on Linux only")
	}
	need := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if os.Geteuid() != 0 {
		need("network namespaces need root")
	}
	ipCmd, err := exec.LookPath("ip")
	if err != nil {
		need("ip not found: install iproute2")
	}
	ip := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(ipCmd, args...).CombinedOutput()
		if err != nil {
			need("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	pid := os.Getpid()
	nsA, nsB := fmt.Sprintf("exs-ut-a-%d", pid), fmt.Sprintf("exs-ut-b-%d", pid)
	vethA, vethB := fmt.Sprintf("exsua%d", pid), fmt.Sprintf("exsub%d", pid)
	ipA, ipB := fmt.Sprintf("10.214.%d.1", pid%250), fmt.Sprintf("10.214.%d.2", pid%250)
	ip("netns", "add", nsA)
	t.Cleanup(func() { exec.Command(ipCmd, "netns", "del", nsA).Run() })
	ip("netns", "add", nsB)
	t.Cleanup(func() { exec.Command(ipCmd, "netns", "del", nsB).Run() })
	ip("link", "add", vethA, "type", "veth", "peer", "name", vethB)
	ip("link", "set", vethA, "netns", nsA)
	ip("link", "set", vethB, "netns", nsB)
	ip("-n", nsA, "addr", "add", ipA+"/24", "dev", vethA)
	ip("-n", nsB, "addr", "add", ipB+"/24", "dev", vethB)
	ip("-n", nsA, "link", "set", vethA, "up")
	ip("-n", nsB, "link", "set", vethB, "up")
	// A's neighbour entry for B stays put once B is gone, so that A's
	// packets are dropped in silence, as on a path to a dead host.
	macB := strings.Fields(ip("-n", nsB, "-br", "link", "show", "dev", vethB))
	if len(macB) < 3 {
		t.Fatalf("ip link show: %q", macB)
	}
	ip("-n", nsA, "neigh", "replace", ipB, "lladdr", macB[2], "dev", vethA, "nud", "permanent")

	vanishing, addr := startChildVia(t, []string{ipCmd, "netns", "exec", nsB}, "vanishing", "tcp:"+ipB+":0")
	survivor, ready := startChildVia(t, []string{ipCmd, "netns", "exec", nsA}, "survivor", addr)
	if ready != "ready" {
		t.Fatalf("survivor: %q", ready)
	}
	if l, err := vanishing.line(); err != nil || l != "accepted" {
		t.Fatalf("vanishing peer: %q, %v", l, err)
	}
	ip("-n", nsB, "link", "set", vethB, "down")
	line, err := survivor.line()
	if err != nil {
		t.Fatalf("survivor: %v", err)
	}
	var r vanishReport
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		t.Fatalf("survivor: %q: %v", line, err)
	}
	t.Logf("recv: %s after %v: %s; Close %v, stack and provider %v", r.Type, r.After, r.Err, r.Close, r.StackEnd)
	if !r.ETIMEDOUT {
		t.Errorf("the recv's error %q does not match ETIMEDOUT", r.Err)
	}
	if !r.TimedOut {
		t.Errorf("the recv's error %q does not match exs.ErrPeerTimedOut", r.Err)
	}
	if r.Deadline {
		t.Errorf("the recv's error %q matches os.ErrDeadlineExceeded, a deadline of the caller's own", r.Err)
	}
	if r.After < peerTimeout-200*time.Millisecond || r.After > peerTimeout+2*time.Second {
		t.Errorf("the recv failed %v after the peer vanished, want about %v", r.After, peerTimeout)
	}
	if r.Close > 500*time.Millisecond || r.StackEnd > time.Second {
		t.Errorf("closing took %v (socket), %v (stack and provider)", r.Close, r.StackEnd)
	}
}

// childVanishing listens at arg, prints its address, accepts one
// connection, prints "accepted", and holds it until its stdin closes.
func childVanishing(arg string) error {
	var addr string
	if err := json.Unmarshal([]byte(arg), &addr); err != nil {
		return err
	}
	st, err := exs.NewStack()
	if err != nil {
		return err
	}
	defer st.Close()
	q, err := st.Qcreate(4)
	if err != nil {
		return err
	}
	ln, err := st.Socket(exs.SockStream)
	if err != nil {
		return err
	}
	if err := ln.Bind(addr); err != nil {
		return err
	}
	if err := ln.Listen(0); err != nil {
		return err
	}
	if err := ln.Accept(q, nil); err != nil {
		return err
	}
	fmt.Println(ln.Addr())
	ev, err := next(q)
	if err != nil {
		return err
	}
	if ev.Err != nil {
		return ev.Err
	}
	fmt.Println("accepted")
	waitStdinClosed()
	return nil
}

// childSurvivor connects to arg with a peer timeout of peerTimeout, posts
// a recv, prints "ready", and reports the recv's event and how long
// closing took, as a vanishReport.
func childSurvivor(arg string) error {
	var addr string
	if err := json.Unmarshal([]byte(arg), &addr); err != nil {
		return err
	}
	p := tcp.New(tcp.WithPeerTimeout(peerTimeout))
	st, err := exs.NewStack(exs.WithProvider("tcp", p))
	if err != nil {
		return err
	}
	defer p.Close()
	defer st.Close()
	q, s, err := childConnect(st, exs.SockStream, addr)
	if err != nil {
		return err
	}
	buf := make([]byte, 64)
	if err := s.Recv(q, buf, nil, 0, "recv"); err != nil {
		return err
	}
	fmt.Println("ready")
	start := time.Now()
	ev, err := next(q)
	if err != nil {
		return err
	}
	r := vanishReport{After: time.Since(start), Type: ev.Type.String()}
	if ev.Err != nil {
		r.Err = ev.Err.Error()
		r.ETIMEDOUT = errors.Is(ev.Err, syscall.ETIMEDOUT)
		r.TimedOut = errors.Is(ev.Err, exs.ErrPeerTimedOut)
		r.Deadline = errors.Is(ev.Err, os.ErrDeadlineExceeded)
	}
	start = time.Now()
	if err := s.Close(q, "close"); err != nil {
		return err
	}
	if _, err := next(q); err != nil {
		return err
	}
	r.Close = time.Since(start)
	start = time.Now()
	st.Close()
	p.Close()
	r.StackEnd = time.Since(start)
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	waitStdinClosed()
	return nil
}
