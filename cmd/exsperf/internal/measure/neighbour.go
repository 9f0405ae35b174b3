package measure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"time"
)

// A Neighbour is a CPU-bound process beside a run, as a machine shared with
// other work has: this binary re-executed as exsperf's hidden "neighbour"
// subcommand (Spin), one thread that computes without pause until its stdin
// closes.
type Neighbour struct {
	p     *peerProc
	Pid   int
	start time.Time
}

// neighbourLine is the line a neighbour announces itself with.
const neighbourLine = "spinning"

// StartNeighbour starts a neighbour and waits until it spins.
func StartNeighbour(ctx context.Context) (*Neighbour, error) {
	p, line, err := startPeer(ctx, "neighbour")
	if err != nil {
		return nil, fmt.Errorf("the neighbour: %w", err)
	}
	if strings.TrimSpace(line) != neighbourLine {
		return nil, errors.Join(fmt.Errorf("the neighbour did not start (it said %q)", short(line)), p.Close())
	}
	return &Neighbour{p: p, Pid: p.child.Pid(), start: time.Now()}, nil
}

// Close stops the neighbour and returns the share of a CPU it had over its
// life: its CPU time over the wall time since it started.
func (n *Neighbour) Close() (float64, error) {
	if err := n.p.Close(); err != nil {
		return 0, err
	}
	wall := time.Since(n.start)
	st := n.p.child.ProcessState()
	return (st.UserTime() + st.SystemTime()).Seconds() / wall.Seconds(), nil
}

// Spin is the neighbour's side: it announces itself on w and computes on
// one thread until its stdin closes.
func Spin(w io.Writer) error {
	runtime.GOMAXPROCS(1)
	var stop atomic.Bool
	go func() { // owner: Spin, which returns once it has stopped it
		io.Copy(io.Discard, os.Stdin)
		stop.Store(true)
	}()
	fmt.Fprintln(w, neighbourLine)
	x := uint64(1)
	for !stop.Load() {
		for range 1 << 16 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	spinSink.Store(x)
	return nil
}

// spinSink keeps Spin's arithmetic from being optimised away.
var spinSink atomic.Uint64
