//go:build linux

package shm_test

import (
	"errors"
	"testing"
	"time"

	"github.com/exsgo/exs/exs"
	"github.com/exsgo/exs/verbs/shm"
)

// TestStackAlloc checks that a stack whose same-host provider offers the
// shared allocator hands out its memory (exs.Stack.Alloc), and that Free
// refuses it while a handle on it is registered.
func TestStackAlloc(t *testing.T) {
	p := newProvider()
	st, err := exs.NewStack(exs.WithProvider("shm", p))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b, err := st.Alloc(10000)
	if err != nil {
		t.Fatal(err)
	}
	h, err := st.Mregister(b, exs.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Free(b); !errors.Is(err, exs.ErrBusy) {
		t.Errorf("Free of registered memory = %v, want ErrBusy", err)
	}
	if err := st.Mderegister(h); err != nil {
		t.Fatal(err)
	}
	if err := p.Free(b); err != nil {
		t.Errorf("the provider's Free of the stack's allocation: %v, want success (memory from shm.Provider.Alloc)", err)
	}
	if err := st.Free(b); !errors.Is(err, exs.ErrInvalid) {
		t.Errorf("second Free = %v, want ErrInvalid", err)
	}
	if _, err := st.Alloc(0); !errors.Is(err, exs.ErrInvalid) {
		t.Errorf("Alloc(0) = %v, want ErrInvalid", err)
	}
}

// TestStackBusyPoll checks that the same-host provider's receivers of a
// busy-polling socket's connection never sleep (exs sets
// verbs.QPConfig.BusyPoll), while those of a socket in another wait mode
// do once their rings are empty (a spin time of zero here). The busy
// connection is judged once a connection of a sleeping mode, made after
// it on the same provider, has seen both its receivers sleep.
func TestStackBusyPoll(t *testing.T) {
	for _, tc := range []struct {
		wait       exs.WaitMode
		wantSleeps bool
	}{
		{exs.WaitBusyPoll, false},
		{exs.WaitAdaptive, true},
		{exs.WaitNotify, true},
	} {
		t.Run(tc.wait.String(), func(t *testing.T) {
			p := newProvider(shm.WithSpin(0))
			st, err := exs.NewStack(exs.WithProvider("shm", p), exs.WithWaitMode(tc.wait))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			q, err := st.Qcreate(16)
			if err != nil {
				t.Fatal(err)
			}
			dir := sockDir(t)
			exchangeOnce(t, st, q, "shm:"+dir+"/s")
			tested := map[uint32]bool{}
			for _, s := range p.Stats() {
				tested[s.QPNum] = true
			}
			if len(tested) != 2 {
				t.Fatalf("Stats = %+v, want two connection ends", p.Stats())
			}
			// The reference: a connection whose receivers sleep.
			exchangeOnce(t, st, q, "shm:"+dir+"/r", exs.WithWaitMode(exs.WaitNotify))
			deadline := time.Now().Add(10 * time.Second)
			for {
				slept := 0
				for _, s := range p.Stats() {
					if !tested[s.QPNum] && s.Sleeps > 0 {
						slept++
					}
				}
				if slept == 2 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the reference connection's receivers did not sleep: %+v", p.Stats())
				}
				time.Sleep(time.Millisecond)
			}
			for {
				done := true
				for _, s := range p.Stats() {
					if !tested[s.QPNum] {
						continue
					}
					if slept := s.Sleeps > 0; slept != tc.wantSleeps {
						done = false
						if !tc.wantSleeps || time.Now().After(deadline) {
							t.Fatalf("connection %d: receiver slept %d times, want sleeps %v", s.QPNum, s.Sleeps, tc.wantSleeps)
						}
					}
				}
				if done {
					break
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
}

// exchangeOnce listens at addr on st, connects to it with opts and sends
// one message across, waiting on q until it is received.
func exchangeOnce(t *testing.T, st *exs.Stack, q *exs.Queue, addr string, opts ...exs.SocketOption) {
	t.Helper()
	ln, err := st.Socket(exs.SockStream, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := ln.Bind(addr); err != nil {
		t.Fatal(err)
	}
	if err := ln.Listen(0); err != nil {
		t.Fatal(err)
	}
	if err := ln.Accept(q, nil); err != nil {
		t.Fatal(err)
	}
	c, err := st.Socket(exs.SockStream, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Connect(q, addr, nil); err != nil {
		t.Fatal(err)
	}
	msg, got := []byte("ping"), make([]byte, 4)
	if err := c.Send(q, msg, nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	evs := make([]exs.Event, 4)
	for recvd := false; !recvd; {
		n, err := q.Dequeue(evs, 1, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs[:n] {
			if ev.Err != nil {
				t.Fatalf("%v: %v", ev.Type, ev.Err)
			}
			switch ev.Type {
			case exs.EventAccept:
				if err := ev.Accepted.Recv(q, got, nil, exs.MsgWaitAll, nil); err != nil {
					t.Fatal(err)
				}
			case exs.EventRecv:
				recvd = true
			}
		}
	}
}
