//go:build linux

package spin

import (
	"errors"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestWatch(t *testing.T) {
	n := inputs.n.Load()
	a, b := NewInput(), NewInput()
	ua, ub := Watch(a), Watch(b)
	if got := inputs.n.Load(); got != n+2 {
		t.Fatalf("%d inputs watched, want %d", got, n+2)
	}
	ua()
	ua() // a second call does nothing
	if got := inputs.n.Load(); got != n+1 {
		t.Fatalf("%d inputs watched after one unwatch, want %d", got, n+1)
	}
	ub()
	if got := inputs.n.Load(); got != n {
		t.Fatalf("%d inputs watched at the end, want %d", got, n)
	}
}

// TestSpinEndsForWaitingInput runs a socket's reader, parked in the
// network poller, beside a busy-polling spin on one P: the spin ends
// (Block) while a byte waits, so that the processor falls idle and the
// runtime hands the byte to the reader. Without the watch the spin goes
// on until the runtime's monitor polls the network, and never ends.
func TestSpinEndsForWaitingInput(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
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
	r, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rc, err := r.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	in := NewInput()
	defer Watch(in)()
	var got atomic.Int32
	woke := make(chan struct{}, 1)
	readerDone := make(chan error, 1)
	go func() {
		var buf [16]byte
		for {
			var rerr error
			var n int
			err := rc.Read(func(fd uintptr) bool {
				in.SetFD(fd)
				in.Park(false)
				n, rerr = unix.Read(int(fd), buf[:])
				if errors.Is(rerr, unix.EAGAIN) {
					in.Park(true)
					return false
				}
				return true
			})
			in.Park(false)
			if err == nil {
				err = rerr
			}
			if err != nil || n == 0 {
				readerDone <- err
				return
			}
			got.Add(int32(n))
			select {
			case woke <- struct{}{}:
			default:
			}
		}
	}()
	const msgs = 20
	blocks := 0
	for k := range int32(msgs) {
		if _, err := w.Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
		var sp Spin // busy polling: no spin time, no deadline
		for got.Load() <= k {
			if sp.Next() == Block {
				blocks++
				<-woke // the processor idles: the runtime polls the network
				sp.Reset()
			}
		}
	}
	w.Close()
	<-readerDone
	if blocks == 0 {
		t.Errorf("a busy-polling spin never ended for the %d bytes waiting for their reader", msgs)
	}
	t.Logf("%d of %d bytes reached their reader after a spin ended for them", blocks, msgs)
}

// TestInputWaitingAtFirstSight has a watched reader parked with a byte
// waiting and probes: the first sight ends the probing spin only; a second
// one ends every spin for a while.
func TestInputWaitingAtFirstSight(t *testing.T) {
	watchParkedWithInput(t)
	inputs.probe.Lock()
	inputs.seen = 0
	inputs.probe.Unlock()
	now := max(int64(time.Since(epoch)), inputs.next.Load(), inputs.until.Load())
	if !inputWaiting(now) {
		t.Fatal("a probe that sees a parked reader's input does not end its spin")
	}
	if u := inputs.until.Load(); u > now {
		t.Fatalf("the first sight ends every spin, until %d ns after it", u-now)
	}
	later := now + int64(probeEvery)
	if !inputWaiting(later) {
		t.Fatal("a second sight does not end the spin")
	}
	if u := inputs.until.Load(); u <= later {
		t.Fatal("a second sight does not end every spin for a while")
	}
}

// TestSpinProbesAtFirstCheck has a watched reader parked with a byte
// waiting when a spin begins: its first check already ends it.
func TestSpinProbesAtFirstCheck(t *testing.T) {
	watchParkedWithInput(t)
	inputs.probe.Lock()
	inputs.seen = 0
	inputs.next.Store(0)
	inputs.until.Store(0)
	inputs.probe.Unlock()
	s := For(time.Second)
	if v := s.Next(); v != Block {
		t.Fatalf("first check of a spin with input waiting: verdict %d, want Block (%d)", v, Block)
	}
}

// watchParkedWithInput watches, until the test ends, an input whose reader
// is parked with a byte waiting on its pipe.
func watchParkedWithInput(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
	if _, err := unix.Write(p[1], []byte{1}); err != nil {
		t.Fatal(err)
	}
	in := NewInput()
	in.SetFD(uintptr(p[0]))
	in.Park(true)
	unwatch := Watch(in)
	t.Cleanup(func() { unwatch(); in.Park(false) })
}
