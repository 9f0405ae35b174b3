//go:build linux

package shm

import (
	"encoding/binary"
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// sealedMemfd returns a sealed memfd of size bytes, not mapped: a peer's
// arena as it arrives over the socket.
func sealedMemfd(t *testing.T, size uint64) int {
	t.Helper()
	fd, err := unix.MemfdCreate("exs-shm-test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, wantSeals); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	return fd
}

func arenaMsgBytes(kind byte, id uint32, size uint64) []byte {
	b := make([]byte, arenaMsgLen)
	binary.LittleEndian.PutUint32(b[0:], msgMagic)
	b[4] = kind
	binary.LittleEndian.PutUint32(b[8:], id)
	binary.LittleEndian.PutUint64(b[16:], size)
	return b
}

// offerArena hands the link a fake arenaAdd message for a fresh memfd of
// size bytes, and reports whether the link mapped it. The descriptor must
// be closed either way.
func offerArena(t *testing.T, l *link, id uint32, size uint64) bool {
	t.Helper()
	fd := sealedMemfd(t, size)
	l.onArenaMsg(arenaMsgBytes(arenaAdd, id, size), []int{fd})
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
		unix.Close(fd)
		t.Errorf("arena %d: descriptor still open after the message (F_GETFD: %v)", id, err)
	}
	l.tx.Lock()
	defer l.tx.Unlock()
	return l.tx.peerArenas[id] != nil
}

func arenaLink(opts ...Option) *link {
	l := &link{p: mustNew(opts...)}
	l.tx.peerArenas = make(map[uint32][]byte)
	return l
}

// TestPeerArenaLimit checks that a connection maps a peer's arenas only up
// to the byte limit: an arena that would pass it is refused (its
// descriptor closed, nothing mapped), later ones that fit are mapped, and a
// dropped arena gives its bytes back.
func TestPeerArenaLimit(t *testing.T) {
	ps := uint64(pageSize)
	l := arenaLink(WithPeerArenaLimit(int64(4 * ps)))
	defer l.dropPeerArenas()
	steps := []struct {
		kind byte
		id   uint32
		size uint64
		want bool // mapped after the step
	}{
		{arenaAdd, 1, 3 * ps, true},
		{arenaAdd, 2, 2 * ps, false}, // 5 pages > 4
		{arenaAdd, 3, ps, true},      // exactly 4
		{arenaAdd, 4, ps, false},
		{arenaDrop, 1, 0, false},
		{arenaAdd, 5, 2 * ps, true},
		{arenaAdd, 6, 5 * ps, false}, // alone above the limit
	}
	for _, s := range steps {
		var got bool
		if s.kind == arenaAdd {
			got = offerArena(t, l, s.id, s.size)
		} else {
			l.onArenaMsg(arenaMsgBytes(arenaDrop, s.id, 0), nil)
			l.tx.Lock()
			got = l.tx.peerArenas[s.id] != nil
			l.tx.Unlock()
		}
		if got != s.want {
			t.Errorf("kind %d, arena %d of %d pages: mapped %v, want %v", s.kind, s.id, s.size/ps, got, s.want)
		}
	}
	if l.tx.peerArenaBytes != 3*ps || len(l.tx.peerArenas) != 2 {
		t.Errorf("%d arenas of %d bytes mapped, want 2 of %d", len(l.tx.peerArenas), l.tx.peerArenaBytes, 3*ps)
	}
}

// TestPeerArenaHuge offers a 64 GiB arena (a sparse memfd) under the
// default limit: refused without being mapped.
func TestPeerArenaHuge(t *testing.T) {
	l := arenaLink()
	defer l.dropPeerArenas()
	if offerArena(t, l, 1, 64<<30) {
		t.Errorf("a 64 GiB arena was mapped under a limit of %d bytes", uint64(DefaultPeerArenaLimit))
	}
	if !offerArena(t, l, 2, 1<<20) {
		t.Error("a 1 MiB arena after the refused one was not mapped")
	}
	if l.tx.peerArenaBytes != 1<<20 {
		t.Errorf("%d bytes mapped, want %d", l.tx.peerArenaBytes, 1<<20)
	}
}

// TestPeerArenaCount checks the cap on the number of arenas a connection
// maps, whatever their size.
func TestPeerArenaCount(t *testing.T) {
	if maxPeerArena > 1<<13 {
		t.Fatalf("maxPeerArena = %d: a peer may make this side hold that many mappings per connection", maxPeerArena)
	}
	l := arenaLink()
	defer l.dropPeerArenas()
	for id := uint32(1); id <= maxPeerArena; id++ {
		if !offerArena(t, l, id, uint64(pageSize)) {
			t.Fatalf("arena %d of one page not mapped", id)
		}
	}
	if offerArena(t, l, maxPeerArena+1, uint64(pageSize)) {
		t.Errorf("arena %d mapped, above the cap", maxPeerArena+1)
	}
}
