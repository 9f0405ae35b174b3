package measure

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"
)

// peerProc is a child exsperf process started as a peer of this one. Its
// first line on stdout says where it listens; the rest of its stdout is read
// and dropped, so that it never blocks on a full pipe. It exits when its
// stdin closes.
type peerProc struct {
	cmd     *exec.Cmd
	stdin   io.Closer
	stdout  io.Closer
	drained chan struct{} // closed when the reader of stdout has stopped
	done    chan error    // cmd.Wait's result, taken once, after drained
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
	exe, err := os.Executable()
	if err != nil {
		return nil, "", fmt.Errorf("starting the peer process: %w", err)
	}
	argv := append(append(append([]string(nil), via...), exe), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), PeerEnv+"=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", fmt.Errorf("starting the peer process: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		in.Close()
		return nil, "", fmt.Errorf("starting the peer process: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("starting the peer process: %w", err)
	}
	p := &peerProc{cmd: cmd, stdin: in, stdout: out, drained: make(chan struct{}), done: make(chan error, 1)}
	type firstLine struct {
		line string
		err  error
	}
	first := make(chan firstLine, 1)
	go func() { // the reader; owner: Close, which waits for drained
		defer close(p.drained)
		br := bufio.NewReader(out)
		line, err := br.ReadSlice('\n')
		first <- firstLine{string(line), err}
		io.Copy(io.Discard, br)
	}()
	go func() { // the waiter; owner: Close, which takes done
		// os/exec: Wait closes the pipe, so only after the last read.
		<-p.drained
		p.done <- cmd.Wait()
	}()
	timer := time.NewTimer(peerStartTimeout)
	defer timer.Stop()
	grace := time.Duration(0) // kill at once, unless it has closed its stdout
	select {
	case l := <-first:
		if l.err == nil {
			return p, l.line, nil
		}
		err = fmt.Errorf("the peer process did not start (it said %q): %w", short(l.line), l.err)
		if l.err == io.EOF {
			grace = peerExitTimeout
		}
	case <-timer.C:
		err = fmt.Errorf("the peer process did not start: no address line within %v", peerStartTimeout)
	case <-ctx.Done():
		err = fmt.Errorf("starting the peer process: %w", ctx.Err())
	}
	if killed, werr := p.stop(grace); werr != nil && !killed {
		err = errors.Join(err, fmt.Errorf("the peer process: %w", werr))
	}
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
	killed, err := p.stop(peerExitTimeout)
	if killed {
		return errors.Join(fmt.Errorf("the peer process did not exit within %v: killed", peerExitTimeout), err)
	}
	if err != nil {
		return fmt.Errorf("the peer process: %w", err)
	}
	return nil
}

// stop closes the peer's stdin, waits up to grace for it to exit and
// otherwise kills it. It returns whether it was killed and the peer's exit
// error. It must be called once.
func (p *peerProc) stop(grace time.Duration) (killed bool, err error) {
	p.stdin.Close()
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case err := <-p.done:
		return false, err
	case <-timer.C:
	}
	p.cmd.Process.Kill()
	// Closing the read end ends the reader even if something other than
	// the peer still holds the pipe's write end.
	p.stdout.Close()
	return true, <-p.done
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
