package measure

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/exsgo/exs/dynproto"
)

// fakePeerEnv makes a re-executed peer misbehave: "silent" never prints its
// address line (and ignores its stdin for a minute), "exit" exits with
// status 3 before printing it, "chatty" serves as usual but prints 4 MiB
// more after it and exits only once they are written.
const fakePeerEnv = "EXSPERF_TEST_FAKE_PEER"

// chattyPeer is the "chatty" peer; it returns the exit status.
func chattyPeer() int {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() { // owner: chattyPeer, which waits for done
		defer close(done)
		br := bufio.NewReader(pr)
		line, _ := br.ReadString('\n')
		os.Stdout.WriteString(line)
		os.Stdout.Write(bytes.Repeat([]byte("chatter\n"), 512<<10))
		io.Copy(os.Stdout, br)
	}()
	err := testPeer(pw)
	pw.Close()
	<-done
	if err != nil {
		fmt.Fprintln(os.Stderr, "peer:", err)
		return 1
	}
	return 0
}

// TestPeerStartFails: a child that never prints its address line, or exits
// without it, makes starting the same-host transport (or the TCP one to a
// child) fail with an error that says so, within the start timeout (or the
// context's deadline) instead of hanging; the child is stopped and the
// temporary directory removed.
func TestPeerStartFails(t *testing.T) {
	defer func(d time.Duration) { peerStartTimeout = d }(peerStartTimeout)
	exsShm := func(ctx context.Context) error {
		tr, err := startExsProc(ctx)
		if err == nil {
			err = errors.Join(errors.New("started"), tr.Close())
		}
		return err
	}
	tcpProc := func(ctx context.Context) error {
		tr, err := newProcTransport("tcp")
		if err != nil {
			return err
		}
		pr, err := tr.Open(ctx, Params{Size: 64, Sends: 1, Recvs: 1})
		if err == nil {
			err = errors.Join(errors.New("started"), pr.Close())
		}
		return errors.Join(err, tr.Close())
	}
	// A child that exits is given 10 s to do so: a loaded machine (a load
	// of 14 on 2 CPUs) took more than 500 ms to start one and see it exit.
	for _, c := range []struct {
		name, fake string
		start      func(context.Context) error
		timeout    time.Duration // peerStartTimeout
		ctx        time.Duration // the context's deadline; 0 for none
		want       string
	}{
		{"silent", "silent", exsShm, 500 * time.Millisecond, 0, "did not start: no address line within 500ms"},
		{"silent ctx", "silent", exsShm, 500 * time.Millisecond, 200 * time.Millisecond, "context deadline exceeded"},
		{"exit", "exit", exsShm, 10 * time.Second, 0, "exit status 3"},
		{"tcp silent", "silent", tcpProc, 500 * time.Millisecond, 0, "did not start: no address line within 500ms"},
		{"tcp exit", "exit", tcpProc, 10 * time.Second, 0, "exit status 3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			peerStartTimeout = c.timeout
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp)
			t.Setenv(fakePeerEnv, c.fake)
			ctx := context.Background()
			if c.ctx > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.ctx)
				defer cancel()
			}
			begin := time.Now()
			res := make(chan error, 1)
			go func() { res <- c.start(ctx) }() // owner: this test, which takes res or fails
			var err error
			select {
			case err = <-res:
			case <-time.After(30 * time.Second):
				t.Fatal("starting the transport has not returned after 30s")
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one that says %q", err, c.want)
			}
			if el := time.Since(begin); el > c.timeout+4500*time.Millisecond {
				t.Errorf("the start took %v to fail", el)
			}
			if ents, err := os.ReadDir(tmp); err != nil || len(ents) != 0 {
				t.Errorf("temporary directory after the failed start: %v, %v", ents, err)
			}
		})
	}
}

// TestPeerChatty: a child that prints much more than a pipe holds after
// its address line neither blocks nor has to be killed: a measurement runs
// over it, and Close returns without error, well before the child would
// be killed.
func TestPeerChatty(t *testing.T) {
	t.Setenv(fakePeerEnv, "chatty")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := startExsProc(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := Params{Mode: dynproto.Dynamic, Size: 64, Sends: 1, Recvs: 1, Ring: 1 << 16, Wait: WaitAdaptive}
	pr, err := tr.Open(ctx, p)
	if err == nil {
		var rts []time.Duration
		rts, err = pr.PingPong(ctx, 0, 20*time.Millisecond, WaitAdaptive)
		if err == nil && len(rts) == 0 {
			err = errors.New("no round trips")
		}
		err = errors.Join(err, pr.Close())
	}
	if err != nil {
		t.Errorf("ping-pong: %v", err)
	}
	begin := time.Now()
	if err := tr.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if el := time.Since(begin); el >= peerExitTimeout {
		t.Errorf("Close took %v", el)
	}
}
