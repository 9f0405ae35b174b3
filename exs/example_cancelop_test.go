package exs_test

import (
	"fmt"
	"log"
	"time"

	"github.com/exsgo/exs/exs"
)

// A listening socket with two accepts posted cancels one of them by its
// user value; the other stays posted.
func ExampleSocket_CancelOp() {
	st, err := exs.NewStack()
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	q, _ := st.Qcreate(8)
	ln, _ := st.Socket(exs.SockStream)
	ln.Bind("inproc:example-cancelop")
	ln.Listen(0)
	ln.Accept(q, "first")
	ln.Accept(q, "second")

	if err := ln.CancelOp(q, "first", "cancel"); err != nil {
		log.Fatal(err)
	}
	var evs [2]exs.Event
	n, err := q.Dequeue(evs[:], 2, 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	for _, ev := range evs[:n] {
		fmt.Println(ev.Type, ev.User, ev.N, ev.Err != nil)
	}
	// Nothing is outstanding under that user value any more.
	fmt.Println(ln.CancelOp(q, "first", "cancel again") != nil)
	// Output:
	// accept first 0 true
	// cancel cancel 1 false
	// true
}
