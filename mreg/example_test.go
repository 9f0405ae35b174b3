package mreg_test

import (
	"errors"
	"fmt"

	"github.com/exsgo/exs/mreg"
)

// A receiver registers a buffer for remote writes and hands the rkey to its
// peer; every write the peer sends is checked by Lookup before it touches
// memory.
func Example() {
	buf, err := mreg.Alloc(4096)
	if err != nil {
		panic(err)
	}
	defer mreg.Free(buf)

	tab := mreg.NewTable()
	r, err := tab.Register(buf, mreg.LocalWrite|mreg.RemoteWrite)
	if err != nil {
		panic(err)
	}

	// An incoming RDMA WRITE of "hello" at offset 100.
	region, dst, err := tab.Lookup(r.RKey(), r.Addr()+100, 5, mreg.RemoteWrite)
	if err != nil {
		panic(err)
	}
	copy(dst, "hello")
	region.Release()

	// A write past the end, and one with the lkey, are refused.
	_, _, err = tab.Lookup(r.RKey(), r.Addr()+4094, 5, mreg.RemoteWrite)
	fmt.Println(errors.Is(err, mreg.ErrBounds))
	_, _, err = tab.Lookup(r.LKey(), r.Addr(), 5, mreg.RemoteWrite)
	fmt.Println(errors.Is(err, mreg.ErrAccess))

	// Deregistration does not wait: it is refused while work holds a
	// reference.
	if err := r.Acquire(); err != nil {
		panic(err)
	}
	fmt.Println(tab.Deregister(r))
	r.Release()
	fmt.Println(tab.Deregister(r))

	// The key is dead for good.
	_, _, err = tab.Lookup(r.RKey(), r.Addr(), 5, mreg.RemoteWrite)
	fmt.Println(err)
	fmt.Printf("%s\n", buf[100:105])
	// Output:
	// true
	// true
	// memory region in use
	// <nil>
	// invalid memory key
	// hello
}
