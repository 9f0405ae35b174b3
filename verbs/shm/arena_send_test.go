//go:build linux

package shm

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// socketLink returns a started link of p serving pd, whose socket's other
// end (returned) is for the test to read, or not.
func socketLink(t *testing.T, p *Provider, pd *verbs.PD) (*link, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "link")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	lo := newLayout(16<<10, 16<<10)
	fd, m, err := createMapping(lo.total)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	l := newLink(p, 0, m, lo, c.(*net.UnixConn))
	l.pd = pd
	p.addLink(l)
	p.sendArenas(l)
	t.Cleanup(func() {
		p.removeLink(l)
		l.conn.Close()
		l.release()
		unix.Close(fds[1])
	})
	return l, fds[1]
}

func testPD(t *testing.T, p *Provider) *verbs.PD {
	t.Helper()
	dev, err := verbs.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	return pd
}

// registerShared allocates a page from p and registers it in pd for remote
// writes, so that its arena goes to pd's connections.
func registerShared(t *testing.T, p *Provider, pd *verbs.PD) *verbs.MR {
	t.Helper()
	b, err := p.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegisterMR(b, mreg.LocalWrite|mreg.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		mr.Deregister()
		p.Free(b)
	})
	return mr
}

// TestStalledPeerSocket gives the provider a connection whose peer never
// reads its socket, the socket full: a registration whose arena goes to
// that peer must not hold the provider's lock while its write waits, so
// that a registration in another protection domain (another connection's)
// goes on at once; once a write has failed, later registrations do not
// wait at all.
func TestStalledPeerSocket(t *testing.T) {
	p := mustNew()
	pd, other := testPD(t, p), testPD(t, p)
	l, _ := socketLink(t, p, pd)
	fill := make([]byte, 4096)
	for {
		l.conn.SetWriteDeadline(time.Now().Add(20 * time.Millisecond))
		if _, err := l.conn.Write(fill); err != nil {
			break
		}
	}
	l.conn.SetWriteDeadline(time.Time{})

	done := make(chan struct{})
	go func() {
		defer close(done)
		registerShared(t, p, pd)
	}()
	time.Sleep(arenaSendTO / 5) // the arena message is waiting for room
	start := time.Now()
	mr, err := other.RegisterMR(make([]byte, 64), mreg.LocalWrite|mreg.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > arenaSendTO/3 {
		t.Errorf("a registration in another protection domain took %v while a peer's socket was full", d)
	}
	mr.Deregister()
	<-done
	start = time.Now()
	registerShared(t, p, pd)
	if d := time.Since(start); d > arenaSendTO/3 {
		t.Errorf("a registration after a failed arena message took %v", d)
	}
}

// TestArenaMsgOrder reads what a connection's peer receives when a region
// in an arena is registered, deregistered and its memory freed: the
// arena's memfd, then its drop, in that order; and the registration of a
// connection whose peer is gone does not wait.
func TestArenaMsgOrder(t *testing.T) {
	p := mustNew()
	pd := testPD(t, p)
	_, peer := socketLink(t, p, pd)
	b, err := p.Alloc(3 * 4096)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegisterMR(b[100:200], mreg.LocalWrite|mreg.RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	if err := mr.Deregister(); err != nil {
		t.Fatal(err)
	}
	if err := p.Free(b); err != nil {
		t.Fatal(err)
	}
	var id uint32
	for i, want := range []byte{arenaAdd, arenaDrop} {
		buf := make([]byte, 64)
		oob := make([]byte, unix.CmsgSpace(4*4))
		n, oobn, _, _, err := unix.Recvmsg(peer, buf, oob, unix.MSG_DONTWAIT)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		fds := parseFDs(oob[:oobn])
		closeFDs(fds)
		if n != arenaMsgLen || buf[4] != want || binary.LittleEndian.Uint64(buf[16:]) != 3*4096 {
			t.Fatalf("message %d: % x, want kind %d for 3 pages", i, buf[:n], want)
		}
		if got := binary.LittleEndian.Uint32(buf[8:]); i == 0 {
			id = got
		} else if got != id {
			t.Errorf("drop of arena %d, want %d", got, id)
		}
		if wantFDs := 1 - i; len(fds) != wantFDs {
			t.Errorf("message %d carries %d descriptors, want %d", i, len(fds), wantFDs)
		}
	}
	if n, _, _, _, err := unix.Recvmsg(peer, make([]byte, 64), nil, unix.MSG_DONTWAIT); err == nil {
		t.Errorf("a third message of %d bytes", n)
	}

	unix.Shutdown(peer, unix.SHUT_RDWR)
	start := time.Now()
	registerShared(t, p, pd)
	if d := time.Since(start); d > arenaSendTO/3 {
		t.Errorf("a registration with the peer gone took %v", d)
	}
}

// TestPublishReusedSlot registers a region in the slot of one whose
// deregistration the provider has not heard of yet, while the peer copies
// into the old one: the old entry is withdrawn at once, the new one
// written only once the copy ended, and the provider's lock is free
// meanwhile. The old region's deregistration, arriving while the
// withdrawal waits, waits for the copy too.
func TestPublishReusedSlot(t *testing.T) {
	p := mustNew()
	pd := testPD(t, p)
	l, _ := socketLink(t, p, pd)
	oldMR, err := pd.RegisterMR(make([]byte, 64), mreg.LocalWrite|mreg.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	e := &l.mine[slotOf(oldMR.RKey())]
	if e.state.Load() != entryLive || e.rkey.Load() != uint32(oldMR.RKey()) {
		t.Fatal("the registration is not published")
	}
	// Fill the table, so that the next registration takes the old
	// region's slot once it is free.
	fill := make([]byte, 64)
	for {
		mr, err := pd.RegisterMR(fill, mreg.LocalWrite)
		if errors.Is(err, mreg.ErrTableFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		defer mr.Deregister()
	}
	// The old region leaves the table; the provider hears of it later.
	if err := pd.Table().Deregister(oldMR.Region()); err != nil {
		t.Fatal(err)
	}
	l.me.access.Store(1) // the peer copies into the old region
	var mr *verbs.MR
	done := make(chan struct{})
	go func() {
		defer close(done)
		mr, err = pd.RegisterMR(make([]byte, 64), mreg.LocalWrite|mreg.RemoteWrite)
	}()
	time.Sleep(50 * time.Millisecond)
	select {
	case <-done:
		l.me.access.Store(0)
		if err != nil {
			t.Fatal(err)
		}
		t.Fatalf("published at once: slot %d, the old region's %d", slotOf(mr.RKey()), slotOf(oldMR.RKey()))
	default:
	}
	if !p.mu.TryLock() {
		t.Error("the provider's lock is held while a publication waits for the peer's copies")
	} else {
		p.mu.Unlock()
	}
	if e.state.Load() == entryLive {
		t.Error("the old region is still live in the slot")
	}
	dereg := make(chan struct{})
	go func() {
		defer close(dereg)
		p.MemoryDeregistered(pd, oldMR)
	}()
	time.Sleep(50 * time.Millisecond)
	select {
	case <-dereg:
		t.Error("the old region's deregistration did not wait for the peer's copy")
	default:
	}
	l.me.access.Store(0)
	<-done
	<-dereg
	if err != nil {
		t.Fatal(err)
	}
	if e.state.Load() != entryLive || e.rkey.Load() != uint32(mr.RKey()) {
		t.Error("the new region is not published after the copy ended")
	}
	if err := mr.Deregister(); err != nil {
		t.Fatal(err)
	}
}
