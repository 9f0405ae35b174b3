//go:build linux

package exs_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/exsgo/exs/exs"
)

// A range of a file goes to the peer with one call and one event; the
// caller's memory never holds its bytes. A range that runs past the end of
// the file is cut short, and N says so.
func ExampleSocket_Sendfile() {
	dir, err := os.MkdirTemp("", "exs-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "greeting")
	if err := os.WriteFile(path, []byte("hello, sendfile"), 0o600); err != nil {
		log.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		log.Fatal(err)
	}

	st, err := exs.NewStack()
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	q, _ := st.Qcreate(8)
	ln, _ := st.Socket(exs.SockStream)
	ln.Bind("inproc:example-sendfile")
	ln.Listen(0)
	ln.Accept(q, "accept")
	c, _ := st.Socket(exs.SockStream)
	c.Connect(q, "inproc:example-sendfile", "connect")

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
	// Bytes 7 to 99: the file has 15.
	if err := c.Sendfile(q, f, 7, 93, 0, "sendfile"); err != nil {
		log.Fatal(err)
	}
	f.Close() // the sendfile holds a descriptor of its own

	buf := make([]byte, 64)
	srv.Recv(q, buf, nil, exs.MsgWaitAll, "recv")
	for ev := next(); ; ev = next() {
		if ev.User == "sendfile" {
			fmt.Println(ev.Type, ev.User, ev.N, ev.Err)
			break
		}
	}
	// The end of the stream completes the MsgWaitAll recv.
	c.Shutdown(q, "shutdown")
	for ev := next(); ; ev = next() {
		if ev.User == "recv" {
			fmt.Printf("%v %q\n", ev.Type, buf[:ev.N])
			break
		}
	}
	// Output:
	// send sendfile 8 <nil>
	// recv "sendfile"
}
