package exs_test

import (
	"fmt"
	"log"
	"time"

	"github.com/exsgo/exs/exs"
)

// exampleConn returns a queue and the two ends of a stream connection of
// st at addr, for the examples of SendMsg and RecvMsg.
func exampleConn(st *exs.Stack, addr string) (q *exs.Queue, client, server *exs.Socket, next func() exs.Event) {
	q, _ = st.Qcreate(8)
	ln, _ := st.Socket(exs.SockStream)
	ln.Bind(addr)
	ln.Listen(0)
	ln.Accept(q, "accept")
	client, _ = st.Socket(exs.SockStream)
	client.Connect(q, addr, "connect")
	var evs [1]exs.Event
	next = func() exs.Event {
		if _, err := q.Dequeue(evs[:], 1, 5*time.Second); err != nil {
			log.Fatal(err)
		}
		return evs[0]
	}
	for range 2 { // the accept and the connect
		if ev := next(); ev.Type == exs.EventAccept {
			server = ev.Accepted
		}
	}
	return q, client, server, next
}

// A client sends a header it builds per message and a payload kept in
// registered memory as one send, without copying them together.
func ExampleSocket_SendMsg() {
	st, err := exs.NewStack()
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	q, c, srv, next := exampleConn(st, "inproc:example-sendmsg")

	payload := []byte("the payload, registered once")
	mh, err := st.Mregister(payload, exs.AccessRead)
	if err != nil {
		log.Fatal(err)
	}
	header := []byte("len=28;")
	buf := make([]byte, len(header)+28)
	srv.Recv(q, buf, nil, exs.MsgWaitAll, "recv")
	err = c.SendMsg(q, []exs.IOVec{
		{Buf: header},               // no handle: registered for this send
		{Buf: payload[:28], MH: mh}, // inside mh
	}, 0, "sendmsg")
	if err != nil {
		log.Fatal(err)
	}
	for range 2 {
		switch ev := next(); ev.Type {
		case exs.EventSendMsg:
			fmt.Println(ev.Type, ev.N, ev.Err)
		case exs.EventRecv:
			fmt.Printf("%v %q\n", ev.Type, buf[:ev.N])
		}
	}
	// Unordered output:
	// sendmsg 35 <nil>
	// recv "len=28;the payload, registered once"
}

// A server receives a fixed-size header and the body that follows into
// two buffers with one recv.
func ExampleSocket_RecvMsg() {
	st, err := exs.NewStack()
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	q, c, srv, next := exampleConn(st, "inproc:example-recvmsg")

	header, body := make([]byte, 4), make([]byte, 16)
	err = srv.RecvMsg(q, []exs.IOVec{{Buf: header}, {Buf: body}}, exs.MsgWaitAll, "recvmsg")
	if err != nil {
		log.Fatal(err)
	}
	c.Send(q, []byte("0016sixteen bytes..."), nil, 0, "send")
	for {
		ev := next()
		if ev.Type == exs.EventRecvMsg {
			fmt.Println(ev.Type, ev.N)
			fmt.Printf("header %q body %q\n", header, body)
			break
		}
	}
	// Output:
	// recvmsg 20
	// header "0016" body "sixteen bytes..."
}
