//go:build linux

package shm_test

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/shm"
	"github.com/exsgo/exs/verbs/verbstest"
)

// TestArenaLocalOnlyNotShared checks that an arena holding only local
// registrations (send buffers, say) is not handed to the peer, which could
// write any byte of it, while one with a remote registration is.
func TestArenaLocalOnlyNotShared(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), verbstest.Timeout)
	defer cancel()
	a, b := newProvider(), newProvider()
	_, qb := connectPair(t, ctx, a, b, "shm:"+sockDir(t)+"/ln")
	pd := qb.PD()
	local, err := b.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	remote, err := b.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	lmr, err := pd.RegisterMR(local, mreg.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	rmr, err := pd.RegisterMR(remote, mreg.LocalWrite|mreg.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	// The arena messages go in order on one socket: once the remote
	// region's arena is mapped, the local one's would have been too.
	deadline := time.Now().Add(verbstest.Timeout)
	for {
		st := a.Stats()
		if len(st) == 1 && st[0].PeerArenas >= 1 {
			if st[0].PeerArenas != 1 {
				t.Errorf("the peer mapped %d arenas, want 1 (the one with a remote registration)", st[0].PeerArenas)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Stats = %+v, want the remote region's arena mapped", st)
		}
		time.Sleep(time.Millisecond)
	}
	for _, mr := range []interface{ Deregister() error }{lmr, rmr} {
		if err := mr.Deregister(); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range [][]byte{local, remote} {
		if err := b.Free(m); err != nil {
			t.Error(err)
		}
	}
}

// TestPeerArenaLimitConn connects a provider that maps at most two pages
// of the peer's arenas to one that hands it a four-page arena and then a
// one-page arena: the first is refused, the second mapped, and WRITEs into
// both succeed (the refused one by cross-memory attach or the ring, the
// mapped one by a plain copy), so the connection goes on.
func TestPeerArenaLimitConn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), verbstest.Timeout)
	defer cancel()
	ps := os.Getpagesize()
	a, b := newProvider(shm.WithPeerArenaLimit(int64(2*ps))), newProvider()
	qa, qb := connectPair(t, ctx, a, b, "shm:"+sockDir(t)+"/ln")
	big, err := b.Alloc(4 * ps)
	if err != nil {
		t.Fatal(err)
	}
	small, err := b.Alloc(ps)
	if err != nil {
		t.Fatal(err)
	}
	var targets []*verbs.MR
	for _, m := range [][]byte{big, small} {
		mr, err := qb.PD().RegisterMR(m, mreg.LocalWrite|mreg.RemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, mr)
	}
	// The arena messages go in order on one socket: once the small arena
	// is mapped, the big one was handled.
	deadline := time.Now().Add(verbstest.Timeout)
	for st := a.Stats(); len(st) != 1 || st[0].PeerArenas < 1; st = a.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("Stats = %+v, want the small arena mapped", st)
		}
		time.Sleep(time.Millisecond)
	}
	if st := a.Stats(); st[0].PeerArenas != 1 {
		t.Fatalf("%d peer arenas mapped, want 1 (the big one beyond the limit)", st[0].PeerArenas)
	}
	src := make([]byte, 100)
	for i := range src {
		src[i] = byte(i + 1)
	}
	smr, err := qa.PD().RegisterMR(src, mreg.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	cq := qa.Config().SendCQ
	for i, mr := range targets {
		if err := qa.PostSend(verbs.SendWR{WRID: uint64(i), Opcode: verbs.OpWrite, Flags: verbs.Signaled,
			SGL: []verbs.SGE{smr.SGE(0, len(src))}, RKey: mr.RKey(), RemoteAddr: mr.Addr() + 10}); err != nil {
			t.Fatal(err)
		}
		wcs := make([]verbs.WC, 1)
		if _, err := cq.Wait(ctx, wcs, 1); err != nil {
			t.Fatal(err)
		}
		if wcs[0].Status != verbs.StatusSuccess {
			t.Fatalf("WRITE into arena %d: %v", i, wcs[0].Status)
		}
		if !bytes.Equal(mr.Bytes()[10:10+len(src)], src) {
			t.Errorf("WRITE into arena %d: bytes differ", i)
		}
	}
	if st := a.Stats(); st[0].Shared != 1 {
		t.Errorf("Shared = %d, want 1 (the WRITE into the mapped arena)", st[0].Shared)
	}
	for _, mr := range append(targets, smr) {
		if err := mr.Deregister(); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range [][]byte{big, small} {
		if err := b.Free(m); err != nil {
			t.Error(err)
		}
	}
}
