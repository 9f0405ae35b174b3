package measure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/exsgo/exs/internal/childproc"
)

// peerProc is a child exsperf process started as a peer of this one. Its
// first line on stdout says where it listens; the rest of its stdout is read
// and dropped, so that it never blocks on a full pipe. It exits when its
// stdin closes. Its stderr goes to this process's.
type peerProc struct {
	child *childproc.Child
}

// PeerEnv is set to 1 in the environment of a peer process (startPeer), so
// that a test binary re-executed as one knows to serve as exsperf's hidden
// "peer" subcommand does.
const PeerEnv = "EXSPERF_PEER_MAIN"

// peerStartTimeout bounds the wait for a peer's first line, and
// peerExitTimeout the wait for it to exit once its stdin is closed; a peer
// that takes longer is killed.
var (
	peerStartTimeout = 10 * time.Second
	peerExitTimeout  = 5 * time.Second
)

// startPeer starts this binary with args as a peer and returns it with its
// first line of output. A peer that does not print that line within
// peerStartTimeout, or before ctx is done, is killed.
func startPeer(ctx context.Context, args ...string) (*peerProc, string, error) {
	return startPeerVia(ctx, nil, args...)
}

// startPeerVia is startPeer with the command run by the command line
// via, for instance "ip netns exec NAME" (nil: none).
func startPeerVia(ctx context.Context, via []string, args ...string) (*peerProc, string, error) {
	c, err := childproc.Start(childproc.Spec{Args: args, Via: via, Env: []string{PeerEnv + "=1"}, Stderr: os.Stderr})
	if err != nil {
		return nil, "", fmt.Errorf("starting the peer process: %w", err)
	}
	lctx, cancel := context.WithTimeout(ctx, peerStartTimeout)
	defer cancel()
	line, err := c.Line(lctx)
	switch {
	case err == nil:
		return &peerProc{child: c}, line, nil
	case errors.Is(err, childproc.ErrNoLine):
		// It has closed its stdout: give it the time to exit.
		err = fmt.Errorf("the peer process did not start: %w", err)
		if serr := c.Stop(peerExitTimeout); serr != nil {
			err = errors.Join(err, fmt.Errorf("the peer process: %w", serr))
		}
		return nil, "", err
	case ctx.Err() != nil:
		err = fmt.Errorf("starting the peer process: %w", ctx.Err())
	default:
		err = fmt.Errorf("the peer process did not start: no address line within %v", peerStartTimeout)
	}
	c.Kill()
	c.Stop(0)
	return nil, "", err
}

// short returns s, cut to a length that fits in an error message.
func short(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// Close closes the peer's stdin and waits for it to exit; it kills the
// peer if it has not exited within peerExitTimeout.
func (p *peerProc) Close() error {
	if err := p.child.Stop(peerExitTimeout); err != nil {
		return fmt.Errorf("the peer process: %w", err)
	}
	return nil
}

// A Server serves measurements to exsperf clients, one at a time.
type Server interface {
	// Addr is the address clients reach it at.
	Addr() string
	// Serve serves until ctx is done or, with once, after the first
	// session, and closes the server.
	Serve(ctx context.Context, once bool) error
}

// ServeAsPeer serves s as the peer of a parent exsperf: it announces s's
// address on w, the line the parent waits for (startPeer), and serves until
// its stdin closes (the parent is gone) or, with once, after one session.
func ServeAsPeer(ctx context.Context, s Server, once bool, w io.Writer) error {
	fmt.Fprintf(w, "listening %s\n", s.Addr())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // owner: this function; ends when stdin closes or at exit
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	return s.Serve(ctx, once)
}
