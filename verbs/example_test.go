package verbs_test

import (
	"context"
	"fmt"
	"time"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/inproc"
)

// Example connects two queue pairs of one process, writes into the
// peer's memory with an RDMA WRITE, and tells the peer with a SEND, which
// is delivered only after the WRITE's data has been placed.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	dev, _ := verbs.Open(inproc.New())
	defer dev.Close()
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(16, verbs.CQOptions{})
	newQP := func() *verbs.QP {
		qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq})
		if err != nil {
			panic(err)
		}
		return qp
	}
	client, server := newQP(), newQP()

	// The server registers a buffer peers may write into, and posts a RECV
	// for the notification before accepting.
	target := make([]byte, 16)
	note := make([]byte, 8)
	tmr, _ := pd.RegisterMR(target, mreg.LocalWrite|mreg.RemoteWrite)
	nmr, _ := pd.RegisterMR(note, mreg.LocalWrite)
	server.PostRecv(verbs.RecvWR{WRID: 100, SGL: []verbs.SGE{nmr.SGE(0, 8)}})

	ln, _ := dev.Listen("inproc:example")
	defer ln.Close()
	go func() {
		req, err := ln.Accept(ctx)
		if err != nil {
			return
		}
		req.Accept(server, []byte("welcome"))
	}()
	reply, err := client.Connect(ctx, "inproc:example", []byte("hello"))
	if err != nil {
		panic(err)
	}
	fmt.Printf("connected, server said %q\n", reply)

	// The client writes (the server's rkey and address would normally
	// travel in a message), then sends a notification.
	src := []byte("zero-copy data!!done")
	smr, _ := pd.RegisterMR(src, 0)
	client.PostSend(verbs.SendWR{WRID: 1, Opcode: verbs.OpWrite, SGL: []verbs.SGE{smr.SGE(0, 16)},
		RKey: tmr.RKey(), RemoteAddr: tmr.Addr()})
	client.PostSend(verbs.SendWR{WRID: 2, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{smr.SGE(16, 4)}})

	wcs := make([]verbs.WC, 4)
	n, _ := cq.Wait(ctx, wcs, 2)
	for _, wc := range wcs[:n] {
		fmt.Println(wc.WRID, wc.Opcode, wc.Status, wc.ByteLen)
	}
	fmt.Printf("%s %s\n", target, note[:4])
	// Output:
	// connected, server said "welcome"
	// 100 RECV success 4
	// 2 SEND success 0
	// zero-copy data!! done
}
