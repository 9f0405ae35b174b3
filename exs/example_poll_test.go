package exs_test

import (
	"fmt"
	"log"
	"time"

	"github.com/exsgo/exs/exs"
)

// A server polls its connection for bytes before it commits a buffer to a
// recv.
func ExampleSocket_Poll() {
	st, err := exs.NewStack()
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	q, _ := st.Qcreate(8)
	ln, _ := st.Socket(exs.SockStream)
	ln.Bind("inproc:example-poll")
	ln.Listen(0)
	ln.Accept(q, "accept")
	c, _ := st.Socket(exs.SockStream)
	c.Connect(q, "inproc:example-poll", "connect")

	var evs [1]exs.Event
	next := func() exs.Event {
		if _, err := q.Dequeue(evs[:], 1, 5*time.Second); err != nil {
			log.Fatal(err)
		}
		return evs[0]
	}
	var srv *exs.Socket
	for srv == nil {
		if ev := next(); ev.Type == exs.EventAccept {
			srv = ev.Accepted
		}
	}
	srv.Poll(q, exs.PollIn, "readable?")
	c.Send(q, []byte("hello"), nil, 0, "send")
	for {
		ev := next()
		if ev.Type == exs.EventPoll {
			fmt.Println(ev.User, ev.Revents())
			break
		}
	}
	buf := make([]byte, 16)
	srv.Recv(q, buf, nil, 0, "recv")
	for {
		ev := next()
		if ev.Type == exs.EventRecv {
			fmt.Printf("%q\n", buf[:ev.N])
			break
		}
	}
	// Output:
	// readable? in
	// "hello"
}
