//go:build linux

package exs_test

import (
	"fmt"
	"log"

	"golang.org/x/sys/unix"

	"github.com/exsgo/exs/exs"
)

// An event loop built on poll(2) (or epoll) waits on a queue's descriptor
// beside its other descriptors, then dequeues without waiting.
func ExampleQueue_SignalFD() {
	st, err := exs.NewStack()
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	q, _ := st.Qcreate(8)
	fd, err := q.SignalFD()
	if err != nil {
		log.Fatal(err)
	}

	s, _ := st.Socket(exs.SockStream)
	s.Cancel(q, "cancel") // nothing to cancel: completes at once

	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if _, err := unix.Poll(fds, 5000); err != nil {
		log.Fatal(err)
	}
	var evs [4]exs.Event
	n := q.TryDequeue(evs[:])
	fmt.Println(n, evs[0].Type, evs[0].User)

	// The queue is empty: the descriptor is no longer readable.
	k, _ := unix.Poll(fds, 0)
	fmt.Println("readable:", k == 1)
	// Output:
	// 1 cancel cancel
	// readable: false
}
