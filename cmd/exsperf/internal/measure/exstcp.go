package measure

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// exs between two processes over the TCP provider (iWARP over TCP, exs's
// default tcp: scheme): the child exsperf process listens on
// exs+tcp:HOST:0 and announces the port it got; the control and data
// connections are exs stream sockets over TCP, as for exs-shm over shm:.

// tcpAbout describes the exs-tcp transports; where says what the child's
// address is.
func tcpAbout(where string) string {
	return "exs sockets to a child exsperf process over the TCP provider (iWARP over TCP, CRC32c on, the system's congestion control, " +
		SystemCongestion() + " here), " + where + "; " + procsAbout(measureProcs()) +
		"; CPU per side: RUSAGE_SELF of each process"
}

// startExsTCP starts a child on loopback and connects to it.
func startExsTCP(ctx context.Context) (*exsProcTransport, error) {
	t := &exsProcTransport{}
	if err := t.start(ctx, "exs-tcp", tcpAbout("on 127.0.0.1"), "exs+tcp:127.0.0.1:0", nil); err != nil {
		return nil, err
	}
	return t, nil
}

// errNoNetns is the error of exs-tcp-netns where it cannot run.
var errNoNetns = errors.New("exs-tcp-netns needs root and iproute2 (ip)")

// startExsTCPNetns creates a network namespace joined to this one by a
// veth pair, starts a child in it (ip netns exec) listening on its end of
// the pair, and connects to it: the bytes cross a network interface, as
// between two hosts. Close deletes the namespace, which removes the pair.
func startExsTCPNetns(ctx context.Context) (*exsProcTransport, error) {
	ipCmd, err := exec.LookPath("ip")
	if os.Geteuid() != 0 || err != nil {
		return nil, errNoNetns
	}
	pid := os.Getpid()
	ns := "exsperf-" + strconv.Itoa(pid)
	here, there := fmt.Sprintf("exsp%d", pid%10000000), fmt.Sprintf("exsq%d", pid%10000000)
	ipHere, ipThere := fmt.Sprintf("10.214.%d.1", pid%250), fmt.Sprintf("10.214.%d.2", pid%250)
	ip := func(args ...string) error {
		if out, err := exec.CommandContext(ctx, ipCmd, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := ip("netns", "add", ns); err != nil {
		return nil, err
	}
	t := &exsProcTransport{cleanup: func() error { return ip("netns", "del", ns) }}
	for _, args := range [][]string{
		{"link", "add", here, "type", "veth", "peer", "name", there},
		{"link", "set", there, "netns", ns},
		{"addr", "add", ipHere + "/24", "dev", here},
		{"link", "set", here, "up"},
		{"-n", ns, "addr", "add", ipThere + "/24", "dev", there},
		{"-n", ns, "link", "set", there, "up"},
		{"-n", ns, "link", "set", "lo", "up"},
	} {
		if err := ip(args...); err != nil {
			// The veth end still here goes with its peer in ns.
			return nil, errors.Join(err, t.Close())
		}
	}
	about := tcpAbout("across a veth pair: the child in network namespace " + ns + " on " + ipThere + ", this process on " + ipHere)
	if err := t.start(ctx, "exs-tcp-netns", about, "exs+tcp:"+ipThere+":0", []string{ipCmd, "netns", "exec", ns}); err != nil {
		return nil, err
	}
	return t, nil
}
