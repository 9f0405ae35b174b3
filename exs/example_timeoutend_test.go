package exs_test

import (
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/exsgo/exs/exs"
)

// With TimeoutEnd, a recv that waits longer than the socket's recv
// timeout ends with ETIMEDOUT, reporting the bytes it got, and the
// connection ends with it.
func ExampleWithTimeoutMode() {
	st, err := exs.NewStack()
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	q, _ := st.Qcreate(8)
	ln, _ := st.Socket(exs.SockStream,
		exs.WithOpTimeout(0, 200*time.Millisecond), exs.WithTimeoutMode(exs.TimeoutEnd))
	ln.Bind("inproc:example-timeout-end")
	ln.Listen(0)
	ln.Accept(q, "accept")
	c, _ := st.Socket(exs.SockStream)
	c.Connect(q, "inproc:example-timeout-end", "connect")

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
			srv = ev.Accepted // inherits the timeout and its mode
		}
	}
	c.Send(q, []byte("part"), nil, 0, "send")
	buf := make([]byte, 16)
	srv.Recv(q, buf, nil, exs.MsgWaitAll, "recv") // waits for 16 bytes
	for {
		ev := next()
		if ev.User == "recv" {
			fmt.Printf("%v %q %v\n", ev.Type, buf[:ev.N], errors.Is(ev.Err, exs.ErrTimedOut))
			break
		}
	}
	// Output:
	// recv "part" true
}
