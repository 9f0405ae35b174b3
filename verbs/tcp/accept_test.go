//go:build linux

package tcp

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// TestAcceptRequesterEndedInOrder: a requester that sent its request, a
// SEND and the end of its stream before the listener accepted (it did
// not wait for the reply: a peer that reads the reply, sends and closes
// while the accepting side is slow looks the same) is accepted, and its
// SEND is delivered. Only a requester that closed with nothing sent after
// its request counts as one that gave up.
func TestAcceptRequesterEndedInOrder(t *testing.T) {
	p := New(WithLinger(time.Second))
	t.Cleanup(func() { p.Close() })
	dev, err := verbs.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(16, verbs.CQOptions{})
	qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qp.Close() })
	buf := make([]byte, 16)
	mr, err := pd.RegisterMR(buf, mreg.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.PostRecv(verbs.RecvWR{WRID: 7, SGL: []verbs.SGE{mr.SGE(0, len(buf))}}); err != nil {
		t.Fatal(err)
	}
	ln, err := dev.Listen("tcp:127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	hp, _ := parseAddr(ln.Addr())
	c, err := net.Dial("tcp", hp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	msg := []byte("in order")
	var out []byte
	out = appendMPA(out, mpaFrame{crc: true, rev: mpaRevision})
	out = append(out, fpdu(true, untagged(opSend, qnSend, 1, 0, true), msg)...)
	if _, err := c.Write(out); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := req.Accept(qp, nil); err != nil {
		t.Fatalf("accepting a requester that sent and ended in order: %v", err)
	}
	wcs := make([]verbs.WC, 4)
	n, err := cq.Wait(ctx, wcs, 1)
	if err != nil {
		t.Fatal(err)
	}
	if wc := wcs[0]; n < 1 || wc.WRID != 7 || wc.Status != verbs.StatusSuccess || int(wc.ByteLen) != len(msg) || !bytes.Equal(buf[:len(msg)], msg) {
		t.Fatalf("the RECV: %+v, %q; want %q delivered", wcs[:n], buf[:len(msg)], msg)
	}
}
