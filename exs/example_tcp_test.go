//go:build linux

package exs_test

import (
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/exsgo/exs/exs"
)

// Across hosts: a "tcp:HOST:PORT" address takes the connection over the
// TCP provider (iWARP over TCP), which every stack has without options.
// Here both ends are in one process on loopback; between two machines the
// client connects to the server's host instead. The server listens on
// port 0 and reads the port the system gave from Addr. The client sends
// a line and shuts its side down; the server's recvs get the line, then
// the end of the stream (EOF).
func Example_tcp() {
	st, err := exs.NewStack()
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	q, err := st.Qcreate(16)
	if err != nil {
		log.Fatal(err)
	}

	ln, err := st.Socket(exs.SockStream)
	if err != nil {
		log.Fatal(err)
	}
	if err := ln.Bind("tcp:127.0.0.1:0"); err != nil {
		log.Fatal(err)
	}
	if err := ln.Listen(0); err != nil {
		log.Fatal(err)
	}
	if err := ln.Accept(q, "accept"); err != nil {
		log.Fatal(err)
	}
	fmt.Println("listening on a port of its own:", !strings.HasSuffix(ln.Addr(), ":0"))

	c, err := st.Socket(exs.SockStream)
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Connect(q, ln.Addr(), "connect"); err != nil {
		log.Fatal(err)
	}
	if err := c.Send(q, []byte("hello across hosts"), nil, 0, "send"); err != nil {
		log.Fatal(err)
	}
	if err := c.Shutdown(q, "shutdown"); err != nil {
		log.Fatal(err)
	}

	buf := make([]byte, 64)
	var got []byte
	var server *exs.Socket
	evs := make([]exs.Event, 8)
	for done := false; !done; {
		n, err := q.Dequeue(evs, 1, 10*time.Second)
		if err != nil {
			log.Fatal(err)
		}
		for _, ev := range evs[:n] {
			if ev.Err != nil {
				log.Fatal(ev.Err)
			}
			switch ev.User {
			case "accept":
				server = ev.Accepted
				err = server.Recv(q, buf, nil, 0, "recv")
			case "recv":
				if ev.EOF {
					fmt.Printf("received %q, then EOF\n", got)
					done = true
					break
				}
				got = append(got, buf[:ev.N]...)
				err = server.Recv(q, buf, nil, 0, "recv")
			}
			if err != nil {
				log.Fatal(err)
			}
		}
	}
	// Output:
	// listening on a port of its own: true
	// received "hello across hosts", then EOF
}
