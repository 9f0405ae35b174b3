//go:build linux

package tcp

import (
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestSockReaderIdle reads a loopback connection in steps and records when
// the reader calls idle: before it waits for input (a read that found
// nothing), and before a read that follows one that took all the socket
// held (fewer bytes than asked for), whose turn to find nothing is saved;
// not before a read that follows a full one.
func TestSockReaderIdle(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	w, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := newSockReader(c.(*net.TCPConn))
	if err != nil {
		t.Fatal(err)
	}
	var log []string
	r.idle = func() { log = append(log, "idle") }
	read := func(n int) {
		t.Helper()
		got, err := r.Read(make([]byte, n))
		if err != nil {
			t.Fatal(err)
		}
		log = append(log, "read "+string(rune('0'+got)))
	}
	send := func(b string) {
		t.Helper()
		if _, err := w.Write([]byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	send("abcd")
	waitInput(t, c)
	read(2) // a full read: the socket may hold more
	read(4) // 2 of 4: the socket is drained
	send("ef")
	waitInput(t, c)
	read(2) // after a drained read: idle first, then the 2 bytes
	go w.Write([]byte("g"))
	read(1) // after a full read: nothing waiting yet, or the byte
	want := []string{"read 2", "read 2", "idle", "read 2"}
	if diff := cmp.Diff(want, log[:len(want)]); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	if rest := log[len(want):]; len(rest) > 2 || rest[len(rest)-1] != "read 1" {
		t.Errorf("last read: calls %q, want the byte (after idle if it was not there yet)", rest)
	}
}

// waitInput waits until c has input to read.
func waitInput(t *testing.T, c net.Conn) {
	t.Helper()
	fd, err := fdOf(c.(*net.TCPConn))
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(10 * time.Second); !hasInput(fd); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("no input after 10 s")
		}
	}
}
