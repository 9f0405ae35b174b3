package verbs_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/inproc"
)

// holdLink records Message.Unconfirmed of each message handed to it and
// keeps the message in flight: it reports no outcome, so that every work
// request posted stays in the send queue.
type holdLink struct {
	verbs.Link
	seen *[]bool
}

func (l holdLink) Transmit(m *verbs.Message) (bool, error) {
	*l.seen = append(*l.seen, m.Unconfirmed())
	return false, nil
}

// TestMessageUnconfirmed posts work requests one at a time into a send
// queue of 8 whose provider completes none: a message may be confirmed
// late only if it is an unsignaled SEND or WRITE handed over while the
// queue held at most half its depth (itself included) and no more work
// requests than its send CQ had free slots (a CQ of 4: the first two).
func TestMessageUnconfirmed(t *testing.T) {
	send := verbs.SendWR{Opcode: verbs.OpSend}
	signaled := verbs.SendWR{Opcode: verbs.OpSend, Flags: verbs.Signaled}
	write := verbs.SendWR{Opcode: verbs.OpWrite}
	writeImm := verbs.SendWR{Opcode: verbs.OpWriteWithImm}
	sendImm := verbs.SendWR{Opcode: verbs.OpSendWithImm}
	read := verbs.SendWR{Opcode: verbs.OpRead}
	cases := []struct {
		name    string
		cqDepth int // 16 if zero
		wrs     []verbs.SendWR
		want    []bool
	}{
		{"unsignaled sends", 0, []verbs.SendWR{send, send, send, send, send, send, send, send},
			[]bool{true, true, true, true, false, false, false, false}},
		{"mixed", 0, []verbs.SendWR{send, signaled, read, write, writeImm, sendImm},
			[]bool{true, false, false, true, false, false}},
		{"signaled", 0, []verbs.SendWR{signaled, sendImm, signaled},
			[]bool{false, true, false}},
		{"small CQ", 4, []verbs.SendWR{send, write, send, send},
			[]bool{true, true, false, false}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var seen []bool
			p := &wrapProvider{inner: inproc.New(), wrap: func(l verbs.Link, _ *verbs.Endpoint) verbs.Link { return holdLink{l, &seen} }}
			dev, err := verbs.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			pd, _ := dev.AllocPD()
			depth := c.cqDepth
			if depth == 0 {
				depth = 16
			}
			cq, _ := dev.CreateCQ(depth, verbs.CQOptions{})
			newQP := func() *verbs.QP {
				qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, SendDepth: 8})
				if err != nil {
					t.Fatal(err)
				}
				return qp
			}
			client, server := newQP(), newQP()
			ln, err := dev.Listen("inproc:unconfirmed")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				if req, err := ln.Accept(ctx); err == nil {
					req.Accept(server, nil)
				}
			}()
			if _, err := client.Connect(ctx, "inproc:unconfirmed", nil); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 8)
			mr, _ := pd.RegisterMR(buf, mreg.LocalWrite|mreg.RemoteWrite)
			for i, wr := range c.wrs {
				wr.WRID = uint64(i)
				wr.SGL = []verbs.SGE{mr.SGE(0, 8)}
				wr.RKey, wr.RemoteAddr = mr.RKey(), 0
				if err := client.PostSend(wr); err != nil {
					t.Fatalf("post %d: %v", i, err)
				}
			}
			if diff := cmp.Diff(c.want, seen); diff != "" {
				t.Errorf("Unconfirmed of the messages (-want +got):\n%s", diff)
			}
			client.Disconnect()
		})
	}
}
