//go:build linux

package tcp

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// TestDeregisterAfterDisconnect disconnects the target of a stream of RDMA
// WRITEs while they are placed and makes the target region inaccessible
// at once: once Disconnect has returned, the receiver must not touch it
// (its read in progress, and the CRC over the bytes read, went on after
// Terminate returned: an application that freed the memory crashed the
// receiver), and the region can then be deregistered and freed.
func TestDeregisterAfterDisconnect(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	const size = 1 << 20
	for round := range 12 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		pw, pt := New(), New()
		mk := func(p *Provider) (*verbs.Device, *verbs.PD, *verbs.QP, *verbs.CQ) {
			d, _ := verbs.Open(p)
			pdom, _ := d.AllocPD()
			cq, _ := d.CreateCQ(64, verbs.CQOptions{})
			qp, err := pdom.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, SendDepth: 16, RecvDepth: 4})
			if err != nil {
				t.Fatal(err)
			}
			return d, pdom, qp, cq
		}
		dw, pdw, qw, cqw := mk(pw)
		dt, pdt, qt, _ := mk(pt)
		ln, err := dt.Listen("tcp:127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		accepted := make(chan error, 1)
		go func() {
			req, err := ln.Accept(ctx)
			if err == nil {
				err = req.Accept(qt, nil)
			}
			accepted <- err
		}()
		if _, err := qw.Connect(ctx, ln.Addr(), nil); err != nil {
			t.Fatal(err)
		}
		if err := <-accepted; err != nil {
			t.Fatal(err)
		}
		ln.Close()
		src, _ := mreg.Alloc(size)
		for i := range src {
			src[i] = 0x5a
		}
		dst, _ := mreg.Alloc(size)
		smr, err := pdw.RegisterMR(src, 0)
		if err != nil {
			t.Fatal(err)
		}
		dmr, err := pdt.RegisterMR(dst, mreg.LocalWrite|mreg.RemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		wr := verbs.SendWR{Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{smr.SGE(0, size)}, RKey: dmr.RKey(), RemoteAddr: dmr.Addr()}
		written := make(chan struct{}) // the first WRITE completed
		done := make(chan error, 1)
		go func() { // the writer; owner: this round, which waits for done
			wcs := make([]verbs.WC, 16)
			out, first := 0, true
			for {
				for ; out < 4; out++ {
					if err := qw.PostSend(wr); err != nil {
						if first {
							done <- fmt.Errorf("post: %w", err)
							return
						}
						done <- nil // the queue pair is in Error: the end
						return
					}
				}
				n, err := cqw.Wait(ctx, wcs, 1)
				if err != nil {
					done <- err
					return
				}
				for _, wc := range wcs[:n] {
					if wc.Status != verbs.StatusSuccess {
						if first {
							done <- fmt.Errorf("completion %+v: writer %v, target %v", wc, qw.Err(), qt.Err())
							return
						}
						done <- nil
						return
					}
					if first {
						first = false
						close(written)
					}
				}
				out -= n
			}
		}()
		select {
		case <-written:
		case err := <-done:
			t.Fatalf("round %d: the writer stopped before a WRITE completed: %v", round, err)
		}
		time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
		qt.Disconnect()
		// What an application that frees the memory makes of it: a
		// receiver that touches it now dies of a fault, failing the test.
		if err := unix.Mprotect(dst, unix.PROT_NONE); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("round %d: writer: %v", round, err)
		}
		qw.Close()
		qt.Close()
		if err := unix.Mprotect(dst, unix.PROT_READ|unix.PROT_WRITE); err != nil {
			t.Fatal(err)
		}
		// The receiver may hold the region a moment longer (Deliver
		// releases it after the read), without touching the memory.
		deadline := time.Now().Add(5 * time.Second)
		for {
			err := dmr.Deregister()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: Deregister 5 s after Disconnect: %v", round, err)
			}
			time.Sleep(time.Millisecond)
		}
		if err := mreg.Free(dst); err != nil {
			t.Errorf("round %d: free: %v", round, err)
		}
		smr.Deregister()
		mreg.Free(src)
		cancel()
		// The providers are closed at the end, so that no round's
		// closing connections overlap the next ones.
		defer func() {
			dw.Close()
			dt.Close()
			pw.Close()
			pt.Close()
		}()
		if t.Failed() {
			return
		}
	}
}
