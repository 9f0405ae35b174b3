package exs_test

import (
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/exsgo/exs/exs"
)

// A send larger than the peer's recv is canceled after part of it was
// delivered: its event reports the bytes the peer got. The stream cannot
// skip the rest, so the connection ends: the peer's next recv sees it
// reset.
func ExampleSocket_CancelOp_send() {
	st, err := exs.NewStack()
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	q, _ := st.Qcreate(8)
	// Direct transfers only: the bytes go into the recvs the peer posts.
	ln, _ := st.Socket(exs.SockStream, exs.WithMode(exs.ModeDirectOnly))
	ln.Bind("inproc:example-cancel-send")
	ln.Listen(0)
	ln.Accept(q, "accept")
	c, _ := st.Socket(exs.SockStream, exs.WithMode(exs.ModeDirectOnly))
	c.Connect(q, "inproc:example-cancel-send", "connect")

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
	buf := make([]byte, 5)
	srv.Recv(q, buf, nil, 0, "recv")
	c.Send(q, []byte("hello, world"), nil, 0, "send")
	for ev := next(); ev.User != "recv"; ev = next() {
	}
	fmt.Printf("the peer got %q\n", buf)

	c.CancelOp(q, "send", "cancel")
	for range 2 {
		ev := next()
		fmt.Println(ev.Type, ev.User, ev.N, errors.Is(ev.Err, exs.ErrCanceled))
	}
	srv.Recv(q, buf, nil, 0, "recv again")
	ev := next()
	fmt.Println(ev.Type, ev.User, errors.Is(ev.Err, exs.ErrConnReset))
	// Output:
	// the peer got "hello"
	// send send 5 true
	// cancel cancel 1 false
	// recv recv again true
}
