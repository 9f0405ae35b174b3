//go:build linux

package tcp_test

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/exsgo/exs/exs"
	"github.com/exsgo/exs/internal/childproc"
)

// The two-hosts test runs exs between two processes, each in a network
// namespace of its own, joined by a veth pair: the only path between them
// is a network interface, as between two machines.

// netnsRoleEnv makes the test binary a party of the two-hosts test: the
// "server" listens at the address in netnsAddrEnv and prints the address
// it got; the "client" connects to it.
const (
	netnsRoleEnv = "EXS_TCP_NETNS_ROLE"
	netnsAddrEnv = "EXS_TCP_NETNS_ADDR"
	netnsBytes   = 16 << 20
)

// netnsMain runs a role if the environment names one, and exits.
func netnsMain() {
	role := os.Getenv(netnsRoleEnv)
	if role == "" {
		return
	}
	var err error
	switch role {
	case "server":
		err = netnsServer(os.Getenv(netnsAddrEnv))
	case "client":
		err = netnsClient(os.Getenv(netnsAddrEnv))
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "netns %s: %v\n", role, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// netnsPattern is the stream the client sends.
func netnsPattern(off, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		k := off + i
		b[i] = byte(k*7 + k>>9)
	}
	return b
}

// next waits for one event.
func next(q *exs.Queue) (exs.Event, error) {
	evs := make([]exs.Event, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := q.DequeueContext(ctx, evs, 1); err != nil {
		return exs.Event{}, err
	}
	if evs[0].Err != nil {
		return evs[0], fmt.Errorf("%v %v: %w", evs[0].Type, evs[0].User, evs[0].Err)
	}
	return evs[0], nil
}

// netnsServer accepts one connection, receives netnsBytes, checks them,
// and answers with their CRC32 (a seqpacket-sized reply on the stream).
func netnsServer(addr string) error {
	st, err := exs.NewStack()
	if err != nil {
		return err
	}
	defer st.Close()
	q, err := st.Qcreate(16)
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
	if err := ln.Accept(q, "accept"); err != nil {
		return err
	}
	fmt.Println("listening", ln.Addr())
	ev, err := next(q)
	if err != nil {
		return err
	}
	s := ev.Accepted
	fmt.Println("accepted", s.RemoteAddr())
	buf := make([]byte, 1<<20)
	sum := crc32.NewIEEE()
	got := 0
	for got < netnsBytes {
		if err := s.Recv(q, buf, nil, 0, "recv"); err != nil {
			return err
		}
		ev, err := next(q)
		if err != nil {
			return err
		}
		if ev.EOF {
			return fmt.Errorf("end of stream after %d bytes", got)
		}
		if want := netnsPattern(got, ev.N); string(buf[:ev.N]) != string(want) {
			return fmt.Errorf("bytes %d..%d differ", got, got+ev.N)
		}
		sum.Write(buf[:ev.N])
		got += ev.N
	}
	reply := []byte(fmt.Sprintf("%08x", sum.Sum32()))
	if err := s.Send(q, reply, nil, 0, "reply"); err != nil {
		return err
	}
	if _, err := next(q); err != nil {
		return err
	}
	// Wait for the client's end of the stream before closing.
	if err := s.Recv(q, buf, nil, 0, "eof"); err != nil {
		return err
	}
	if ev, err := next(q); err != nil || !ev.EOF {
		return fmt.Errorf("want the end of the stream: %+v, %v", ev, err)
	}
	// The orderly end (exs's package doc): shut down too, and close once
	// the shutdown completed; closing at once may fail the client's
	// shutdown with ECONNRESET, as the close rule allows.
	if err := s.Shutdown(q, "shutdown"); err != nil {
		return err
	}
	_, err = next(q)
	return err
}

// netnsClient sends netnsBytes and checks the server's reply.
func netnsClient(addr string) error {
	st, err := exs.NewStack()
	if err != nil {
		return err
	}
	defer st.Close()
	q, err := st.Qcreate(16)
	if err != nil {
		return err
	}
	s, err := st.Socket(exs.SockStream)
	if err != nil {
		return err
	}
	if err := s.Connect(q, addr, "connect"); err != nil {
		return err
	}
	if _, err := next(q); err != nil {
		return err
	}
	start := time.Now()
	const chunk = 1 << 20
	for off := 0; off < netnsBytes; off += chunk {
		if err := s.Send(q, netnsPattern(off, chunk), nil, 0, "send"); err != nil {
			return err
		}
		if _, err := next(q); err != nil {
			return err
		}
	}
	reply := make([]byte, 8)
	if err := s.Recv(q, reply, nil, exs.MsgWaitAll, "reply"); err != nil {
		return err
	}
	if _, err := next(q); err != nil {
		return err
	}
	d := time.Since(start)
	sum := crc32.NewIEEE()
	sum.Write(netnsPattern(0, netnsBytes))
	if want := fmt.Sprintf("%08x", sum.Sum32()); string(reply) != want {
		return fmt.Errorf("server's CRC %s, want %s", reply, want)
	}
	if err := s.Shutdown(q, "shutdown"); err != nil {
		return err
	}
	if _, err := next(q); err != nil {
		return err
	}
	if err := s.Recv(q, reply, nil, 0, "eof"); err != nil {
		return err
	}
	if ev, err := next(q); err != nil || !ev.EOF {
		return fmt.Errorf("want the end of the stream: %+v, %v", ev, err)
	}
	fmt.Printf("ok %d bytes from %s to %s in %v (%.2f GB/s)\n", netnsBytes, s.LocalAddr(), s.RemoteAddr(), d, float64(netnsBytes)/d.Seconds()/1e9)
	return nil
}

// hosts is two network namespaces joined by a veth pair: A at ipA on
// vethA, B at ipB on vethB.
type hosts struct {
	ip           string // the ip command
	nsA, nsB     string
	vethA, vethB string
	ipA, ipB     string
	need         func(format string, args ...any)
	t            *testing.T
}

// newHosts creates two network namespaces joined by a veth pair, removed
// at the end of the test. It needs root and iproute2: outside CI it skips
// without them; under CI=true it fails.
func newHosts(t *testing.T) *hosts {
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
	hostSeq++
	tag := fmt.Sprintf("%d-%d", os.Getpid(), hostSeq)
	id := (os.Getpid() + hostSeq) % 250
	h := &hosts{
		ip:    ipCmd,
		nsA:   "exs-tcp-a-" + tag,
		nsB:   "exs-tcp-b-" + tag,
		vethA: fmt.Sprintf("exsa%d", (os.Getpid()*8+hostSeq)%100000000),
		vethB: fmt.Sprintf("exsb%d", (os.Getpid()*8+hostSeq)%100000000),
		ipA:   fmt.Sprintf("10.213.%d.1", id),
		ipB:   fmt.Sprintf("10.213.%d.2", id),
		need:  need,
		t:     t,
	}
	h.run("netns", "add", h.nsA)
	t.Cleanup(func() { exec.Command(ipCmd, "netns", "del", h.nsA).Run() })
	h.run("netns", "add", h.nsB)
	t.Cleanup(func() { exec.Command(ipCmd, "netns", "del", h.nsB).Run() })
	h.run("link", "add", h.vethA, "type", "veth", "peer", "name", h.vethB)
	h.run("link", "set", h.vethA, "netns", h.nsA)
	h.run("link", "set", h.vethB, "netns", h.nsB)
	h.run("-n", h.nsA, "addr", "add", h.ipA+"/24", "dev", h.vethA)
	h.run("-n", h.nsB, "addr", "add", h.ipB+"/24", "dev", h.vethB)
	for _, ns := range []struct{ ns, dev string }{{h.nsA, h.vethA}, {h.nsB, h.vethB}} {
		h.run("-n", ns.ns, "link", "set", ns.dev, "up")
		h.run("-n", ns.ns, "link", "set", "lo", "up")
	}
	return h
}

// hostSeq numbers the hosts of this process.
var hostSeq int

// run runs ip with args.
func (h *hosts) run(args ...string) string {
	h.t.Helper()
	out, err := exec.Command(h.ip, args...).CombinedOutput()
	if err != nil {
		h.need("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestTwoHosts creates two network namespaces joined by a veth pair and
// runs exs between a process in each: 16 MiB over a stream socket, checked
// byte for byte, and a reply. It needs root and iproute2: outside CI it
// skips without them; under CI=true it fails.
func TestTwoHosts(t *testing.T) {
	h := newHosts(t)
	ipCmd, nsA, nsB, ipA, ipB := h.ip, h.nsA, h.nsB, h.ipA, h.ipB
	const limit = 60 * time.Second
	run := func(ns, role, addr string) *childproc.Child {
		return childproc.StartTest(t, childproc.Spec{
			Via: []string{ipCmd, "netns", "exec", ns},
			Env: []string{netnsRoleEnv + "=" + role, netnsAddrEnv + "=" + addr},
		})
	}
	// rest returns the lines a child writes until it ends.
	rest := func(c *childproc.Child) []string {
		var lines []string
		for {
			l, err := c.LineWithin(limit)
			if errors.Is(err, childproc.ErrNoLine) {
				return lines
			}
			if err != nil {
				t.Fatal(err)
			}
			lines = append(lines, l)
		}
	}
	server := run(nsA, "server", "tcp:"+ipA+":0")
	first, err := server.LineWithin(limit)
	if err != nil {
		t.Fatalf("the server said nothing: %v", err)
	}
	addr, ok := strings.CutPrefix(first, "listening ")
	if !ok || !strings.HasPrefix(addr, "tcp:"+ipA+":") || strings.HasSuffix(addr, ":0") {
		t.Fatalf("server: %q", first)
	}
	client := run(nsB, "client", addr)
	lines := rest(client)
	cerr := client.Stop(limit)
	for _, l := range rest(server) {
		t.Logf("server: %s", l)
	}
	serr := server.Stop(limit)
	if cerr != nil || serr != nil {
		t.Fatalf("client: %v, server: %v", cerr, serr)
	}
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "ok ") || !strings.Contains(lines[0], ipB) || !strings.Contains(lines[0], ipA) {
		t.Fatalf("client said %q", lines)
	}
	t.Log(lines[0])
}
