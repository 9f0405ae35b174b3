package verbs_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/inproc"
)

// unknownLenLink hands SENDs to the peer with Len -1 and a payload that is
// a plain reader, as a provider that learns a SEND's length at its end.
type unknownLenLink struct{ verbs.Link }

func (l unknownLenLink) Transmit(m *verbs.Message) (bool, error) {
	if m.Op != verbs.OpSend && m.Op != verbs.OpSendWithImm {
		return l.Link.Transmit(m)
	}
	mm := *m
	mm.Len = -1
	mm.Payload = struct{ io.Reader }{m.Payload}
	return l.Link.Transmit(&mm)
}

// TestDeliverUnknownLength sends messages whose length the target learns
// at their end (Message.Len -1) into RECVs of one or two segments: the
// RECV completes with the bytes of the message, and a message longer than
// the RECV fails it with a length error at the target and an invalid
// request at the initiator.
func TestDeliverUnknownLength(t *testing.T) {
	cases := []struct {
		send   int
		recv   []int
		status verbs.Status
	}{
		{16, []int{16}, verbs.StatusSuccess},
		{8, []int{16}, verbs.StatusSuccess},
		{0, []int{16}, verbs.StatusSuccess},
		{0, nil, verbs.StatusSuccess},
		{12, []int{8, 8}, verbs.StatusSuccess},
		{16, []int{8, 8}, verbs.StatusSuccess},
		{17, []int{8, 8}, verbs.StatusRemoteInvalidRequest},
		{1, nil, verbs.StatusRemoteInvalidRequest},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("send%d-recv%v", c.send, c.recv), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			p := &wrapProvider{inner: inproc.New(), wrap: func(l verbs.Link, _ *verbs.Endpoint) verbs.Link { return unknownLenLink{l} }}
			dev, err := verbs.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			pd, _ := dev.AllocPD()
			cq, _ := dev.CreateCQ(16, verbs.CQOptions{})
			newQP := func() *verbs.QP {
				qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq})
				if err != nil {
					t.Fatal(err)
				}
				return qp
			}
			client, server := newQP(), newQP()
			dst := bytes.Repeat([]byte{0xEE}, 64)
			dmr, _ := pd.RegisterMR(dst, mreg.LocalWrite)
			var sgl []verbs.SGE
			off := 0
			for _, n := range c.recv {
				sgl = append(sgl, dmr.SGE(off, n))
				off += n + 4 // a gap between the segments
			}
			if err := server.PostRecv(verbs.RecvWR{WRID: 100, SGL: sgl}); err != nil {
				t.Fatal(err)
			}
			ln, err := dev.Listen("inproc:unknown")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				if req, err := ln.Accept(ctx); err == nil {
					req.Accept(server, nil)
				}
			}()
			if _, err := client.Connect(ctx, "inproc:unknown", nil); err != nil {
				t.Fatal(err)
			}
			src := make([]byte, 32)
			for i := range src {
				src[i] = byte(i + 1)
			}
			smr, _ := pd.RegisterMR(src, 0)
			if err := client.PostSend(verbs.SendWR{WRID: 1, Opcode: verbs.OpSendWithImm, Imm: 7, Flags: verbs.Signaled,
				SGL: []verbs.SGE{smr.SGE(0, c.send)}}); err != nil {
				t.Fatal(err)
			}
			wcs := make([]verbs.WC, 4)
			n, err := cq.Wait(ctx, wcs, 2)
			if err != nil {
				t.Fatalf("%v (got %v)", err, wcs[:n])
			}
			var send, recv verbs.WC
			for _, wc := range wcs[:n] {
				if wc.WRID == 1 {
					send = wc
				} else {
					recv = wc
				}
			}
			if send.Status != c.status {
				t.Errorf("send completion %+v, want status %v", send, c.status)
			}
			if c.status != verbs.StatusSuccess {
				if recv.Status != verbs.StatusLocalLengthError {
					t.Errorf("receive completion %+v, want a length error", recv)
				}
				return
			}
			if recv.Status != verbs.StatusSuccess || recv.ByteLen != uint32(c.send) || recv.Imm != 7 || recv.Flags != verbs.WCWithImm {
				t.Errorf("receive completion %+v, want %d bytes with imm 7", recv, c.send)
			}
			want := bytes.Repeat([]byte{0xEE}, 64)
			off, k := 0, 0
			for _, n := range c.recv {
				m := min(n, c.send-k)
				copy(want[off:], src[k:k+m])
				k += m
				off += n + 4
			}
			if !bytes.Equal(dst, want) {
				t.Errorf("receive buffer %x, want %x", dst, want)
			}
		})
	}
}

// wrapProvider is a provider whose links are those of inner, wrapped.
type wrapProvider struct {
	inner verbs.Provider
	wrap  func(l verbs.Link, ep *verbs.Endpoint) verbs.Link
}

func (p *wrapProvider) Listen(addr string) (verbs.LinkListener, error) {
	l, err := p.inner.Listen(addr)
	if err != nil {
		return nil, err
	}
	return &wrapListener{p: p, LinkListener: l}, nil
}

func (p *wrapProvider) Dial(ctx context.Context, addr string, ep *verbs.Endpoint, private []byte) (verbs.Link, []byte, error) {
	l, rep, err := p.inner.Dial(ctx, addr, ep, private)
	if err != nil {
		return nil, nil, err
	}
	return p.wrap(l, ep), rep, nil
}

type wrapListener struct {
	p *wrapProvider
	verbs.LinkListener
}

func (l *wrapListener) Accept(ctx context.Context) (verbs.LinkRequest, error) {
	r, err := l.LinkListener.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return &wrapRequest{p: l.p, LinkRequest: r}, nil
}

type wrapRequest struct {
	p *wrapProvider
	verbs.LinkRequest
}

func (r *wrapRequest) Accept(ep *verbs.Endpoint, private []byte) (verbs.Link, error) {
	l, err := r.LinkRequest.Accept(ep, private)
	if err != nil {
		return nil, err
	}
	return r.p.wrap(l, ep), nil
}
