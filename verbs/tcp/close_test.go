//go:build linux

package tcp

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/exsgo/exs/verbs"
)

// TestProviderCloseBounded closes a provider whose connections' peers
// never end their side (a peer that vanished, a peer that hangs): Close
// waits the linger time and the handshake timeout, then aborts every
// connection still open, and returns. (With one deadline channel shared by
// the connections, only the first was aborted and Close waited forever for
// the second; and each aborted connection lingered once more, in turn.)
func TestProviderCloseBounded(t *testing.T) {
	const linger, handshake = time.Second, 100 * time.Millisecond
	p := New(WithLinger(linger), WithHandshakeTimeout(handshake))
	dev, err := verbs.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(16, verbs.CQOptions{})
	ln, err := dev.Listen("tcp:127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hp, _ := parseAddr(ln.Addr())
	for range 3 {
		qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { qp.Close() })
		accepted := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, err := ln.Accept(ctx)
			if err == nil {
				err = req.Accept(qp, nil)
			}
			accepted <- err
		}()
		// A raw peer: it sets up the connection and then neither reads
		// nor closes.
		c, err := net.Dial("tcp", hp)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.Write(appendMPA(nil, mpaFrame{rev: mpaRevision}))
		if _, err := readMPA(c, true, new([mpaHdrLen + verbs.MaxPrivateData]byte)); err != nil {
			t.Fatal(err)
		}
		if err := <-accepted; err != nil {
			t.Fatal(err)
		}
	}
	ln.Close()
	done := make(chan time.Duration, 1)
	start := time.Now()
	go func() { p.Close(); done <- time.Since(start) }()
	select {
	case d := <-done:
		// The connections wait at most linger + handshake, and an
		// aborted one lingers no more.
		t.Logf("Close took %v", d)
		if limit := linger + handshake + 500*time.Millisecond; d > limit {
			t.Errorf("Close took %v, want at most %v", d, limit)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return in 10 s")
	}
}
