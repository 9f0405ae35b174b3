package verbstest_test

import (
	"context"
	"errors"
	"io"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/inproc"
	"github.com/exsgo/exs/verbs/verbstest"
)

// TestMain lets this test binary serve as a peer process.
func TestMain(m *testing.M) {
	verbstest.PeerProcessMain(func() verbs.Provider { return inproc.New() })
	os.Exit(m.Run())
}

// pipePeer returns a remote Peer over pipes to a ServePeer of a local peer
// of p in this process. The cleanup closes the remote peer (again, after
// the suite) and checks ServePeer's result.
func pipePeer(t *testing.T, p verbs.Provider, addr string) verbstest.Peer {
	t.Helper()
	reqR, reqW := io.Pipe()
	repR, repW := io.Pipe()
	served := make(chan error, 1)
	go func() {
		served <- verbstest.ServePeer(context.Background(), verbstest.NewLocalPeer(p, addr), reqR, repW)
	}()
	rp := verbstest.NewRemotePeer(repR, reqW)
	t.Cleanup(func() {
		rp.Close()
		if err := <-served; err != nil {
			t.Errorf("ServePeer: %v", err)
		}
	})
	return rp
}

// TestRemotePeerConformance runs the suite with the Peer behind the
// protocol, in this process: the protocol must be faithful enough for
// every test to pass as it does with NewLocalPeer.
func TestRemotePeerConformance(t *testing.T) {
	verbstest.Run(t, func(t *testing.T) verbstest.Env {
		p := inproc.New()
		return verbstest.Env{
			Provider:   p,
			Peer:       pipePeer(t, p, "inproc:peer"),
			ListenAddr: "inproc:local",
		}
	})
}

// connected returns a local queue pair's parts connected to a remote peer
// queue pair through a local listener.
func connected(t *testing.T, ctx context.Context, p verbs.Provider, peer verbstest.Peer) (*verbs.QP, *verbs.PD, *verbs.CQ, verbstest.PeerQP) {
	t.Helper()
	dev, err := verbs.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	ln, err := dev.Listen("inproc:local")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := dev.CreateCQ(64, verbs.CQOptions{})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		q   verbstest.PeerQP
		err error
	}
	done := make(chan result, 1)
	go func() {
		q, _, err := peer.Connect(ctx, "inproc:local", verbstest.QPSpec{}, nil)
		done <- result{q, err}
	}()
	cr, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := cr.Accept(qp, nil); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	return qp, pd, cq, r.q
}

// TestRemotePeerContext checks that blocking calls honour their context
// across the wire: the deadline, a cancellation, and Poll's partial
// result.
func TestRemotePeerContext(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), verbstest.Timeout)
	defer cancel()
	p := inproc.New()
	peer := pipePeer(t, p, "inproc:peer")
	defer peer.Close()

	if _, err := peer.Listen(ctx); err != nil {
		t.Fatal(err)
	}
	if err := peer.Serve(verbstest.Answer{}); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	_, _, err := peer.Served(short)
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Served past its deadline: %v, want DeadlineExceeded", err)
	}

	q, pd, _, pq := connected(t, ctx, p, peer)
	mr, err := pq.Register(64, mreg.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	for id := range uint64(2) {
		if err := pq.PostRecv(id, []verbstest.PeerSGE{{MR: mr, Off: 8 * int(id), Len: 8}}); err != nil {
			t.Fatal(err)
		}
	}
	src, err := pd.RegisterMR(make([]byte, 8), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.PostSend(verbs.SendWR{WRID: 7, Opcode: verbs.OpSend, SGL: []verbs.SGE{src.SGE(0, 8)}}); err != nil {
		t.Fatal(err)
	}
	// One completion of the two asked for, then the caller cancels.
	cctx, cancelPoll := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancelPoll)
	wcs, err := pq.Poll(cctx, 2)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Poll cancelled: %v, want Canceled", err)
	}
	want := []verbs.WC{{WRID: 0, Status: verbs.StatusSuccess, Opcode: verbs.WCRecv, ByteLen: 8}}
	for i := range wcs {
		wcs[i].QPNum = 0
	}
	if diff := cmp.Diff(want, wcs); diff != "" {
		t.Errorf("partial Poll (-want +got):\n%s", diff)
	}
	// A call whose context has already ended still gets the peer's answer.
	dead, cancelDead := context.WithCancel(ctx)
	cancelDead()
	if err := pq.WaitError(dead); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitError with a cancelled context: %v, want Canceled", err)
	}
	if err := pq.Close(); err != nil {
		t.Errorf("peer QP Close: %v", err)
	}
	if err := pq.Close(); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("second peer QP Close: %v, want ErrClosed", err)
	}
	if err := mr.Deregister(); err != nil {
		t.Errorf("Deregister: %v", err)
	}
	if err := mr.Deregister(); !errors.Is(err, mreg.ErrDeregistered) {
		t.Errorf("second Deregister: %v, want mreg.ErrDeregistered", err)
	}
	if err := peer.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := peer.Listen(ctx); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("Listen after Close: %v, want ErrClosed", err)
	}
	if err := peer.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestRemotePeerServerGone checks that calls in progress fail, promptly
// and with ErrClosed and io.ErrUnexpectedEOF, when the server's stream
// breaks.
func TestRemotePeerServerGone(t *testing.T) {
	defer goleak.VerifyNone(t)
	reqR, reqW := io.Pipe()
	repR, repW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- verbstest.ServePeer(ctx, verbstest.NewLocalPeer(inproc.New(), "inproc:peer"), reqR, repW)
	}()
	peer := verbstest.NewRemotePeer(repR, reqW)
	if _, err := peer.Listen(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := peer.Serve(verbstest.Answer{}); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, _, err := peer.Served(context.Background())
		errc <- err
	}()
	waitCall(t, peer)
	cancel() // the server stops: it answers Served with Canceled, then its end closes
	if err := <-served; !errors.Is(err, context.Canceled) {
		t.Errorf("ServePeer after its context ended: %v, want Canceled", err)
	}
	repW.Close()
	select {
	case err := <-errc:
		if err == nil {
			t.Errorf("Served succeeded")
		}
	case <-time.After(verbstest.Timeout):
		t.Fatal("Served still blocked after the server went away")
	}
	if _, err := peer.Listen(context.Background()); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("Listen after the server went away: %v, want ErrClosed", err)
	}
	if err := peer.Close(); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("Close after the server went away: %v, want ErrClosed", err)
	}
}

// TestPeerProcess starts a peer process, checks that it answers and that
// errors keep their identity from there, and that Close ends it cleanly.
func TestPeerProcess(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), verbstest.Timeout)
	defer cancel()
	pp := verbstest.StartPeerProcess(t, "inproc:peer")
	if pp.Pid() == os.Getpid() || pp.Pid() <= 0 {
		t.Errorf("Pid() = %d", pp.Pid())
	}
	addr, err := pp.Listen(ctx)
	if err != nil || addr != "inproc:peer" {
		t.Errorf("Listen = %q, %v; want inproc:peer", addr, err)
	}
	// Nobody listens at this address in the child.
	q, _, err := pp.Connect(ctx, "inproc:nobody", verbstest.QPSpec{}, []byte("hi"))
	if q != nil || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Connect to nobody = %v, %v; want ECONNREFUSED", q, err)
	}
	if _, _, err := pp.Connect(ctx, "bad", verbstest.QPSpec{}, nil); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("Connect to a malformed address: %v, want ErrInvalid", err)
	}
	if err := pp.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case <-pp.Exited():
	default:
		t.Errorf("child still running after Close")
	}
	if err := pp.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestPeerProcessKill kills the peer process during a blocking call: the
// call, and later ones, fail at once with ErrClosed.
func TestPeerProcessKill(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), verbstest.Timeout)
	defer cancel()
	pp := verbstest.StartPeerProcess(t, "inproc:peer")
	if _, err := pp.Listen(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pp.Serve(verbstest.Answer{}); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, _, err := pp.Served(ctx) // nobody connects
		errc <- err
	}()
	waitCall(t, pp)
	start := time.Now()
	if err := pp.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, verbs.ErrClosed) {
			t.Errorf("Served when the peer died: %v, want ErrClosed", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Served took %v to fail", d)
		}
	case <-ctx.Done():
		t.Fatal("Served still blocked after the peer was killed")
	}
	if _, err := pp.Listen(ctx); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("Listen after Kill: %v, want ErrClosed", err)
	}
	if err := pp.Close(); err != nil {
		t.Errorf("Close after Kill: %v", err)
	}
}

// waitCall waits until a call of p is in progress (sent, no reply yet).
func waitCall(t *testing.T, p verbstest.Peer) {
	t.Helper()
	deadline := time.Now().Add(verbstest.Timeout)
	for verbstest.CallsInFlight(p) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no call in progress")
		}
		runtime.Gosched()
	}
}
