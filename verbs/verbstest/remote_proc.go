package verbstest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exsgo/exs/internal/childproc"
	"github.com/exsgo/exs/verbs"
)

// PeerEnv is the environment variable that makes a test binary a peer
// process: PeerProcessMain serves a Peer listening at its value.
const PeerEnv = "EXS_VERBSTEST_PEER_ADDR"

// The peer process talks the Peer protocol on these file descriptors
// (requests in, replies out), so that whatever the code under test prints
// on standard output cannot corrupt the stream.
const (
	peerInFD  = 3
	peerOutFD = 4
)

// peerExitGrace bounds how long a peer process takes to clean up once its
// stream has ended (its parent closed it or died) before it exits anyway.
const peerExitGrace = 10 * time.Second

// PeerProcessMain makes a test binary able to serve as the peer process of
// StartPeerProcess. Call it first in TestMain:
//
//	func TestMain(m *testing.M) {
//		verbstest.PeerProcessMain(func() verbs.Provider { return myprovider.New() })
//		os.Exit(m.Run())
//	}
//
// It returns at once unless the process was started by StartPeerProcess.
// Then it opens a provider with newProvider, serves
// NewLocalPeer(provider, addr) (addr from the PeerEnv environment
// variable) with ServePeer until the parent closes the peer, the parent
// dies or the stream breaks, closes the provider if it is an io.Closer and
// exits: status 0 after a clean Close, 1 otherwise (with the reason on
// standard error).
func PeerProcessMain(newProvider func() verbs.Provider) {
	addr, ok := os.LookupEnv(PeerEnv)
	if !ok {
		return
	}
	os.Unsetenv(PeerEnv) // not for the peer's own children
	in := os.NewFile(peerInFD, "verbstest-peer-in")
	out := os.NewFile(peerOutFD, "verbstest-peer-out")
	if in == nil || out == nil {
		fmt.Fprintf(os.Stderr, "verbstest: peer process: %s set but no stream on descriptors %d and %d\n", PeerEnv, peerInFD, peerOutFD)
		os.Exit(2)
	}
	p := newProvider()
	r := &endReader{r: in, onEnd: func() {
		// The stream is over: whatever happens, do not outlive it for
		// long.
		time.AfterFunc(peerExitGrace, func() {
			fmt.Fprintf(os.Stderr, "verbstest: peer process: still cleaning up %v after the stream ended; exiting\n", peerExitGrace)
			os.Exit(3)
		})
	}}
	err := ServePeer(context.Background(), NewLocalPeer(p, addr), r, out)
	if c, ok := p.(io.Closer); ok {
		if cerr := c.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("verbstest: closing the provider: %w", cerr))
		}
	}
	out.Close()
	if err != nil {
		fmt.Fprintf(os.Stderr, "verbstest: peer process %d: %v\n", os.Getpid(), err)
		os.Exit(1)
	}
	os.Exit(0)
}

// endReader calls onEnd once, when a Read first fails.
type endReader struct {
	r     io.Reader
	once  sync.Once
	onEnd func()
}

func (e *endReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil {
		e.once.Do(e.onEnd)
	}
	return n, err
}

// ProcessPeer is a Peer served by a child process: the test binary itself,
// run again by StartPeerProcess. Besides Peer it can report the child's
// pid and kill it.
type ProcessPeer struct {
	Peer // the remote peer

	rp     *remotePeer
	child  *childproc.Child
	killed atomic.Bool // Kill was called: the child's death is no error

	closeOnce sync.Once
	closeErr  error
}

// StartPeerProcess starts a peer process: it runs the test binary
// (os.Executable) again with -test.run=^$, PeerEnv set to listenAddr and
// env added to its environment, and returns a Peer that calls it. The test
// binary's TestMain must call PeerProcessMain. StartPeerProcess waits until
// the child answers, and fails t if it does not within Timeout.
//
// The ProcessPeer's Close (which the suite calls, and t.Cleanup calls too)
// closes the child's Peer, waits for the child to exit, killing it if it
// has not exited 10 seconds later, and reports a child that exited with an
// error, with what it wrote on standard error (and standard output). If
// the parent dies, the child sees its stream end and exits.
func StartPeerProcess(t testing.TB, listenAddr string, env ...string) *ProcessPeer {
	t.Helper()
	pp, err := startPeerProcess(listenAddr, env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if pp.close() && pp.closeErr != nil {
			t.Errorf("peer process: %v", pp.closeErr)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if err := pp.rp.ping(ctx); err != nil {
		pp.Kill()
		t.Fatalf("verbstest: peer process %d does not answer (does TestMain call verbstest.PeerProcessMain?): %v", pp.Pid(), err)
	}
	return pp
}

func startPeerProcess(listenAddr string, env []string) (*ProcessPeer, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("verbstest: peer process: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("verbstest: peer process: %w", err)
	}
	child, err := childproc.Start(childproc.Spec{
		Env:   append([]string{PeerEnv + "=" + listenAddr}, env...),
		Files: []*os.File{inR, outW}, // descriptors 3 and 4
		// Whatever the code under test prints goes with the child's
		// standard error.
		MergeStdout: true,
	})
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("verbstest: %w", err)
	}
	pp := &ProcessPeer{child: child}
	pp.rp = newRemotePeer(outR, inW)
	pp.Peer = pp.rp
	return pp, nil
}

// Pid returns the child's process id.
func (pp *ProcessPeer) Pid() int { return pp.child.Pid() }

// Kill kills the child with SIGKILL at once. Calls in progress and later
// calls fail with an error satisfying errors.Is(err, verbs.ErrClosed);
// Close then reports no error for the child's death.
func (pp *ProcessPeer) Kill() error {
	pp.killed.Store(true)
	return pp.child.Kill()
}

// Close closes the child's Peer and waits for the child to exit. A second
// Close returns the first one's result.
func (pp *ProcessPeer) Close() error {
	pp.close()
	return pp.closeErr
}

// Exited returns a channel closed once the child has exited.
func (pp *ProcessPeer) Exited() <-chan struct{} { return pp.child.Exited() }

// close closes the peer once, setting closeErr, and reports whether this
// call did.
func (pp *ProcessPeer) close() (first bool) {
	pp.closeOnce.Do(func() {
		first = true
		err := pp.rp.Close()
		if cerr := pp.child.Stop(peerExitGrace); cerr != nil {
			err = errors.Join(err, fmt.Errorf("verbstest: %w", cerr))
		}
		if !pp.killed.Load() {
			pp.closeErr = err
		}
	})
	return first
}
