package exs_test

import (
	"fmt"
	"log"
	"time"

	"github.com/exsgo/exs/exs"
)

// A recv that waits longer than the socket's recv timeout is reported
// once, and stays posted: it completes when the bytes come.
func ExampleWithOpTimeout() {
	st, err := exs.NewStack()
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	q, _ := st.Qcreate(8)
	ln, _ := st.Socket(exs.SockStream, exs.WithOpTimeout(0, 10*time.Millisecond))
	ln.Bind("inproc:example-timeout")
	ln.Listen(0)
	ln.Accept(q, "accept")
	c, _ := st.Socket(exs.SockStream)
	c.Connect(q, "inproc:example-timeout", "connect")

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
			srv = ev.Accepted // inherits the recv timeout
		}
	}
	buf := make([]byte, 16)
	srv.Recv(q, buf, nil, 0, "recv")
	for {
		ev := next()
		if ev.Type == exs.EventRecvTimeout {
			fmt.Println(ev.Type, ev.User)
			break
		}
	}
	c.Send(q, []byte("at last"), nil, 0, "send")
	for {
		ev := next()
		if ev.Type == exs.EventRecv {
			fmt.Printf("%v %q\n", ev.Type, buf[:ev.N])
			break
		}
	}
	// Output:
	// recv timeout recv
	// recv "at last"
}
