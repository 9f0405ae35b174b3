//go:build linux

package shm

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// TestDirectAfterPeerTerminated has a raw peer mark itself terminated (as
// a peer that refuses a message does before it writes the outcome and its
// TERM) and the victim post an RDMA WRITE that would take the direct path,
// alone in flight: the WRITE must go through the ring rather than fail at
// once as a disconnect, so that the connection ends with the peer's TERM,
// read after the outcomes the peer wrote before it (the order
// verbs.Endpoint.Terminated asks for). Failing at once made the suite's
// Relaxed/Protection/Remote/NoRemoteWriteImm flush the refused
// WRITE_WITH_IMM and record a disconnect, when the receiver had taken that
// message off inflight but not completed it yet.
func TestDirectAfterPeerTerminated(t *testing.T) {
	const key = mreg.Key(0x5a5a0000 | 9)
	v := newVictim(t, WithDirectMin(0))
	first, second := bytes.Repeat([]byte("first..."), 8), bytes.Repeat([]byte("second.."), 8)
	copy(v.loc.region(), first)
	copy(v.loc.region()[64:], second)
	v.loc.want = bytes.Clone(v.loc.buf)
	for _, c := range []struct {
		name  string
		arena bool // the target lies in a shared-allocator arena: a plain copy; otherwise cross-memory attach
	}{
		{"CrossMemoryAttach", false},
		{"SharedArena", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, a := v.attack(t, rawOpts{probe: !c.arena})
			var target []byte
			raddr := uint64(0x7f00_0000_0000)
			if c.arena {
				m := r.sendArena(t, 1, 4096)
				v.waitArenas(t, a, 1)
				target = m[128 : 128+64]
				r.publishEntry(key, raddr, 64, 1, 128)
			} else {
				if !v.linkOf(t, a.qp).cma {
					t.Skip("no cross-memory attach into this process")
				}
				target = make([]byte, 64)
				raddr = uint64(uintptrOf(target))
				r.publishEntry(key, raddr, 64, 0, 0)
			}
			write := func(id uint64, off int) {
				t.Helper()
				if err := a.qp.PostSend(verbs.SendWR{WRID: id, Opcode: verbs.OpWrite, SGL: []verbs.SGE{v.loc.mr.SGE(off, 64)},
					RKey: key, RemoteAddr: raddr}); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), hostileTimeout)
			defer cancel()
			// The direct path works: the raw peer answers nothing on the
			// rings.
			write(1, 0)
			wcs := make([]verbs.WC, 1)
			if _, err := a.cq.Wait(ctx, wcs, 1); err != nil || wcs[0].Status != verbs.StatusSuccess {
				t.Fatalf("the first WRITE: %v %v", err, wcs[0].Status)
			}
			if !bytes.Equal(target, first) {
				t.Fatalf("the first WRITE placed %q, want %q", target, first)
			}
			r.l.me.closed.Store(1)
			write(2, 64)
			r.awaitRingWrite(t, key, func() {
				if a.cq.Poll(wcs) == 1 {
					t.Fatalf("the WRITE after the peer terminated completed with %v before the peer's TERM (Err %v)", wcs[0].Status, a.qp.Err())
				}
			})
			r.put(t, true, respRec(recTerm, termError, 0, []byte("refused")))
			if err := terminated(t, a); !errors.Is(err, verbs.ErrTerminated) || !strings.Contains(err.Error(), "refused") {
				t.Errorf("the victim's queue pair failed with %v, want ErrTerminated with the peer's text", err)
			}
			if _, err := a.cq.Wait(ctx, wcs, 1); err != nil || wcs[0].WRID != 2 || wcs[0].Status != verbs.StatusFlushed {
				t.Errorf("the second WRITE: %v %+v, want it flushed", err, wcs[0])
			}
			if !bytes.Equal(target, first) {
				t.Errorf("the target holds %q after the peer terminated, want %q", target, first)
			}
			r.close()
			v.settled(t)
			v.after(t)
		})
	}
}

// TestPullAfterPeerTerminated has a raw peer mark itself terminated and
// then hand over a SEND and an RDMA WRITE whose bytes the victim must pull
// from the peer's memory: the peer went in the middle of its messages, so
// the victim's queue pair ends as by the peer's disconnect (ErrDisconnected,
// ECONNRESET), its RECV flushed rather than completed with part of the
// SEND, and the WRITE's target untouched. Before, the pull's error was a
// termination, which exs reported as an aborted connection (ECONNABORTED)
// instead of the peer's end.
func TestPullAfterPeerTerminated(t *testing.T) {
	v := newVictim(t)
	for _, op := range []verbs.Opcode{verbs.OpSend, verbs.OpWrite} {
		t.Run(op.String(), func(t *testing.T) {
			r, a := v.attack(t, rawOpts{probe: true})
			if !v.linkOf(t, a.qp).cma {
				t.Skip("no cross-memory attach into this process")
			}
			if err := a.qp.PostRecv(verbs.RecvWR{WRID: 5, SGL: []verbs.SGE{v.rbuf.mr.SGE(0, 64)}}); err != nil {
				t.Fatal(err)
			}
			src := bytes.Repeat([]byte("pulled.."), 8)
			r.l.me.closed.Store(1)
			rkey, raddr := uint32(0), uint64(0)
			if op == verbs.OpWrite {
				rkey, raddr = uint32(v.w.mr.RKey()), v.w.mr.Addr()
			}
			r.put(t, false, reqRec(op, modeIov, 1, r.nextID(), rkey, raddr, 64, iovBody([2]uint64{uint64(uintptrOf(src)), 64})))
			if err := terminated(t, a); !errors.Is(err, verbs.ErrDisconnected) || !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("the victim's queue pair failed with %v, want the peer's disconnect", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), hostileTimeout)
			defer cancel()
			wcs := make([]verbs.WC, 1)
			if _, err := a.cq.Wait(ctx, wcs, 1); err != nil || wcs[0].WRID != 5 || wcs[0].Status != verbs.StatusFlushed {
				t.Errorf("the RECV: %v %+v, want it flushed", err, wcs[0])
			}
			r.close()
			v.settled(t)
			v.after(t)
		})
	}
}
