package exs_test

import (
	"bytes"
	"fmt"
	"log"
	"time"

	"github.com/exsgo/exs/exs"
	"github.com/exsgo/exs/mreg"
)

// An echo server and its client, served by one event loop: every operation
// names the queue its event goes to and a user value that says what to do
// next.
func Example_echo() {
	st, err := exs.NewStack()
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	q, err := st.Qcreate(16)
	if err != nil {
		log.Fatal(err)
	}

	// The server listens and accepts one connection.
	ln, err := st.Socket(exs.SockStream)
	if err != nil {
		log.Fatal(err)
	}
	if err := ln.Bind("inproc:example-echo"); err != nil {
		log.Fatal(err)
	}
	if err := ln.Listen(0); err != nil {
		log.Fatal(err)
	}
	if err := ln.Accept(q, "accept"); err != nil {
		log.Fatal(err)
	}

	// The client connects, sends a line and waits for all of it to come
	// back (MsgWaitAll). It may post at once: the send and recv start
	// when the connection is up.
	c, err := st.Socket(exs.SockStream)
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Connect(q, "inproc:example-echo", "connect"); err != nil {
		log.Fatal(err)
	}
	line := []byte("hello, exs")
	reply := make([]byte, len(line))
	if err := c.Send(q, line, nil, 0, "client send"); err != nil {
		log.Fatal(err)
	}
	if err := c.Recv(q, reply, nil, exs.MsgWaitAll, "client recv"); err != nil {
		log.Fatal(err)
	}

	var server *exs.Socket
	sbuf := make([]byte, 64)
	evs := make([]exs.Event, 8)
	for done := false; !done; {
		n, err := q.Dequeue(evs, 1, 5*time.Second)
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
				err = server.Recv(q, sbuf, nil, 0, "server recv")
			case "server recv":
				// Echo what came; sbuf is busy until the send's event.
				err = server.Send(q, sbuf[:ev.N], nil, 0, "server send")
			case "server send":
				err = server.Recv(q, sbuf, nil, 0, "server recv")
			case "client recv":
				fmt.Printf("echo: %s\n", reply[:ev.N])
				done = true
			}
			if err != nil {
				log.Fatal(err)
			}
		}
	}
	// Output: echo: hello, exs
}

// A zero-copy send: both buffers are registered once; in direct-only mode
// the receiver advertises its recv buffer and the sender's bytes are
// written straight into it, with no copy through a stream buffer.
func Example_zeroCopy() {
	st, err := exs.NewStack(exs.WithMode(exs.ModeDirectOnly))
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	q, err := st.Qcreate(16)
	if err != nil {
		log.Fatal(err)
	}
	ln, _ := st.Socket(exs.SockStream)
	if err := ln.Bind("inproc:example-zero-copy"); err != nil {
		log.Fatal(err)
	}
	if err := ln.Listen(0); err != nil {
		log.Fatal(err)
	}
	if err := ln.Accept(q, "accept"); err != nil {
		log.Fatal(err)
	}
	client, _ := st.Socket(exs.SockStream)
	if err := client.Connect(q, "inproc:example-zero-copy", "connect"); err != nil {
		log.Fatal(err)
	}
	var server *exs.Socket
	evs := make([]exs.Event, 2)
	for got := 0; got < 2; {
		n, err := q.Dequeue(evs, 1, 5*time.Second)
		if err != nil {
			log.Fatal(err)
		}
		for _, ev := range evs[:n] {
			if ev.Err != nil {
				log.Fatal(ev.Err)
			}
			if ev.Type == exs.EventAccept {
				server = ev.Accepted
			}
			got++
		}
	}

	// Page-aligned memory outside the Go heap, registered once.
	const size = 1 << 20
	src, err := mreg.Alloc(size)
	if err != nil {
		log.Fatal(err)
	}
	defer mreg.Free(src)
	dst, err := mreg.Alloc(size)
	if err != nil {
		log.Fatal(err)
	}
	defer mreg.Free(dst)
	for i := range src {
		src[i] = byte(i % 251)
	}
	smh, err := st.Mregister(src, exs.AccessRead)
	if err != nil {
		log.Fatal(err)
	}
	dmh, err := st.Mregister(dst, exs.AccessWrite)
	if err != nil {
		log.Fatal(err)
	}

	if err := server.Recv(q, dst, dmh, exs.MsgWaitAll, "recv"); err != nil {
		log.Fatal(err)
	}
	if err := client.Send(q, src, smh, 0, "send"); err != nil {
		log.Fatal(err)
	}
	done := make(map[any]int)
	for len(done) < 2 {
		n, err := q.Dequeue(evs, 1, 5*time.Second)
		if err != nil {
			log.Fatal(err)
		}
		for _, ev := range evs[:n] {
			if ev.Err != nil {
				log.Fatal(ev.Err)
			}
			done[ev.User] = ev.N
		}
	}
	fmt.Printf("sent %d bytes, received %d\n", done["send"], done["recv"])
	stats := client.Stats()
	fmt.Printf("direct: %d bytes in %d transfer; indirect: %d bytes; equal: %v\n",
		stats.BytesDirect, stats.TransfersDirect, stats.BytesIndirect, bytes.Equal(src, dst))

	// The handles are free once their operations' events are posted.
	if err := st.Mderegister(smh); err != nil {
		log.Fatal(err)
	}
	if err := st.Mderegister(dmh); err != nil {
		log.Fatal(err)
	}
	// Output:
	// sent 1048576 bytes, received 1048576
	// direct: 1048576 bytes in 1 transfer; indirect: 0 bytes; equal: true
}
