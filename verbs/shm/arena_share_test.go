//go:build linux

package shm_test

import (
	"context"
	"testing"
	"time"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs/shm"
	"github.com/exsgo/exs/verbs/verbstest"
)

// TestArenaLocalOnlyNotShared checks that an arena holding only local
// registrations (send buffers, say) is not handed to the peer, which could
// write any byte of it, while one with a remote registration is.
func TestArenaLocalOnlyNotShared(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), verbstest.Timeout)
	defer cancel()
	a, b := shm.New(), shm.New()
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
