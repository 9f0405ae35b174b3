package faults_test

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/exsgo/exs/exs"
	"github.com/exsgo/exs/verbs/faults"
	"github.com/exsgo/exs/verbs/inproc"
)

// An exs connection whose messages from the connecting side are delayed,
// and which a fault drops once the sides have exchanged a few messages: the
// bytes whose send completed still arrive, then the recv sees the reset.
func Example() {
	p := faults.New(inproc.New())
	defer p.Close()
	p.Set(faults.Filters{Message: func(m *faults.Msg) faults.Fault {
		if m.Conn.Side() == faults.Dialer {
			return faults.Fault{Delay: time.Millisecond}
		}
		return faults.Fault{}
	}})
	st, _ := exs.NewStack(exs.WithProvider("inproc", p))
	defer st.Close()
	q, _ := st.Qcreate(16)
	ln, _ := st.Socket(exs.SockStream)
	ln.Bind("inproc:example")
	ln.Listen(0)
	ln.Accept(q, "accept")
	c, _ := st.Socket(exs.SockStream)
	c.Connect(q, "inproc:example", "connect")
	c.Send(q, []byte("hello"), nil, 0, "send")

	var evs [1]exs.Event
	var server *exs.Socket
	for sent := false; server == nil || !sent; {
		q.Dequeue(evs[:], 1, time.Minute)
		switch evs[0].Type {
		case exs.EventAccept:
			server = evs[0].Accepted
		case exs.EventSend:
			sent = true
		}
	}
	// The send completed: its bytes are at the server. Now the link goes.
	p.Conns()[0].Drop(faults.ErrReset)
	buf := make([]byte, 16)
	for {
		server.Recv(q, buf, nil, 0, "recv")
		q.Dequeue(evs[:], 1, time.Minute)
		if evs[0].Err != nil {
			fmt.Println("then:", errors.Is(evs[0].Err, syscall.ECONNRESET))
			break
		}
		fmt.Printf("received %q\n", buf[:evs[0].N])
	}
	// Output:
	// received "hello"
	// then: true
}
