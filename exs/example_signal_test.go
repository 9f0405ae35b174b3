package exs_test

import (
	"fmt"
	"log"
	"time"

	"github.com/exsgo/exs/exs"
)

// One loop serves two queues, and could serve timers and other channels
// too: it waits on the queues' signals in a select, then dequeues without
// waiting until each queue is empty.
func ExampleQueue_Signal() {
	st, err := exs.NewStack()
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	serverQ, _ := st.Qcreate(8)
	clientQ, _ := st.Qcreate(8)

	ln, _ := st.Socket(exs.SockSeqPacket)
	ln.Bind("inproc:example-signal")
	ln.Listen(0)
	ln.Accept(serverQ, "accept")
	c, _ := st.Socket(exs.SockSeqPacket)
	c.Connect(clientQ, "inproc:example-signal", "connect")
	c.Send(clientQ, []byte("ping"), nil, 0, "send")

	buf := make([]byte, 16)
	var evs [4]exs.Event
	for left := 3; left > 0; { // connect, send, recv
		select {
		case <-serverQ.Signal():
			for n := serverQ.TryDequeue(evs[:]); n > 0; n = serverQ.TryDequeue(evs[:]) {
				for _, ev := range evs[:n] {
					switch ev.Type {
					case exs.EventAccept:
						ev.Accepted.Recv(serverQ, buf, nil, 0, "recv")
					case exs.EventRecv:
						fmt.Printf("server got %q\n", buf[:ev.N])
						left--
					}
				}
			}
		case <-clientQ.Signal():
			for n := clientQ.TryDequeue(evs[:]); n > 0; n = clientQ.TryDequeue(evs[:]) {
				for _, ev := range evs[:n] {
					fmt.Println("client:", ev.Type, ev.Err)
					left--
				}
			}
		case <-time.After(5 * time.Second):
			log.Fatal("no event")
		}
	}
	// Unordered output:
	// client: connect <nil>
	// client: send <nil>
	// server got "ping"
}
