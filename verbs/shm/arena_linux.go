package shm

import (
	"encoding/binary"
	"fmt"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// The shared allocator. Alloc hands out memory that lives in an arena: a
// sealed memfd of its own, mapped shared. When a region registered in an
// arena for remote access (RemoteRead or RemoteWrite) is published to a
// connection, the arena's memfd goes first to the peer over the connection's Unix socket (SCM_RIGHTS), and the published
// entry names the arena and the region's offset in it. The peer's watcher
// maps the arena; from then on the peer's initiator moves the bytes of an
// RDMA WRITE or READ into or out of the region with a plain copy into its
// own mapping, after the checks of the cross-memory-attach path, without
// a system call and without this side's CPU.
//
// Lifetime: Free refuses an arena while a registration of this provider
// lies in it; after the last deregistration no peer starts a copy into it
// (the access protocol of MemoryDeregistered), Free unmaps it and closes
// its memfd and tells the peers that mapped it to drop their mappings. A
// peer's mapping keeps the pages alive until the peer unmaps it, so a late
// copy by a peer touches only pages no one else uses any more. A peer
// drops every mapping it holds when the connection ends.

// Socket messages after the handshake (little-endian, 24 bytes): magic
// u32, kind u8, 0 u8 x3, arena id u32, 0 u32, size u64. arenaAdd carries
// the arena's memfd.
const (
	arenaMsgLen  = 24
	arenaAdd     = 1
	arenaDrop    = 2
	maxArena     = 1 << 40 // largest arena a peer maps
	maxPeerArena = 4096    // most arenas a peer maps per connection
	arenaSendTO  = time.Second
)

// arena is one allocation of the shared allocator.
type arena struct {
	id   uint32
	fd   int
	m    []byte // the whole mapping (whole pages)
	base uintptr
	regs int // live registrations of this provider inside it
}

// contains reports whether [addr, addr+n) lies in the arena.
func (a *arena) contains(addr, n uint64) bool {
	b := uint64(a.base)
	return addr >= b && addr-b <= uint64(len(a.m)) && n <= uint64(len(a.m))-(addr-b)
}

// Alloc returns n bytes of zeroed, page-aligned memory from the shared
// allocator: a memfd of its own (the allocation rounded up to whole pages),
// mapped shared and populated (every page allocated and mapped before
// Alloc returns), so that the first transfers into it take no page faults;
// a peer that maps it populates its mapping likewise. Registered with a device of this provider for remote
// access, the memory is mapped by the peers the registration is published
// to (memory with only local registrations is never handed out), so that
// their RDMA WRITEs and READs into it are plain copies, with no system call (see the
// package documentation). A peer that maps it can write any byte of the
// allocation: register such memory only for peers trusted as much as with
// cross-memory attach. Memory from Alloc may be registered with other
// providers too, like any memory.
//
// Alloc returns an error wrapping mreg.ErrInvalid if n is not positive, or
// the system's error if the memfd or the mapping fails. Return the memory
// with Free. It is safe for concurrent use.
func (p *Provider) Alloc(n int) ([]byte, error) {
	ps := os.Getpagesize()
	if n <= 0 || uint64(n) > maxArena {
		return nil, fmt.Errorf("shm: allocate %d bytes: %w", n, mreg.ErrInvalid)
	}
	size := (n + ps - 1) &^ (ps - 1)
	fd, m, err := createArena(uint64(size))
	if err != nil {
		return nil, err
	}
	a := &arena{fd: fd, m: m, base: uintptrOf(m)}
	p.mu.Lock()
	p.nextArena++
	if p.nextArena == 0 {
		p.nextArena++
	}
	a.id = p.nextArena
	p.arenas[a.base] = a
	p.mu.Unlock()
	return m[:n:n], nil
}

// Free returns memory obtained from Alloc: b must start at the first byte
// Alloc returned. It returns an error wrapping mreg.ErrBusy, and keeps the
// memory, while a region of this provider registered in it is live; one
// wrapping mreg.ErrInvalid for memory Alloc did not return or that was
// already freed. The peers that mapped the memory drop their mappings. It
// is safe for concurrent use.
func (p *Provider) Free(b []byte) error {
	if len(b) == 0 && cap(b) == 0 {
		return fmt.Errorf("shm: free memory not from Alloc: %w", mreg.ErrInvalid)
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	p.mu.Lock()
	a := p.arenas[base]
	switch {
	case a == nil:
		p.mu.Unlock()
		return fmt.Errorf("shm: free memory not from Alloc: %w", mreg.ErrInvalid)
	case a.regs > 0:
		p.mu.Unlock()
		return fmt.Errorf("shm: free memory with %d live registrations: %w", a.regs, mreg.ErrBusy)
	}
	delete(p.arenas, base)
	var flush []*link
	for l := range p.links {
		if _, ok := l.pmu.arenasSent[a.id]; ok {
			delete(l.pmu.arenasSent, a.id)
			l.pmu.arenaQ = append(l.pmu.arenaQ, arenaMsg{kind: arenaDrop, id: a.id, size: uint64(len(a.m)), fd: -1})
			flush = append(flush, l)
		}
	}
	p.mu.Unlock()
	for _, l := range flush {
		l.flushArenaMsgs()
	}
	err := unix.Munmap(a.m)
	unix.Close(a.fd)
	if err != nil {
		return fmt.Errorf("shm: munmap of %d bytes: %w", len(a.m), err)
	}
	return nil
}

// arenaOf returns the arena [addr, addr+n) lies in, or nil. Called with
// p.mu held.
func (p *Provider) arenaOf(addr, n uint64) *arena {
	for _, a := range p.arenas {
		if a.contains(addr, n) {
			return a
		}
	}
	return nil
}

// createArena makes a sealed memfd of size bytes and maps it shared and
// populated: MAP_POPULATE allocates every page of the memfd and maps it
// (writable: memfd memory needs no write notification), at about 1-3 ms
// per MiB on a virtual machine, the cost a first write would otherwise take
// in the middle of the first transfers. A population cut short (memory is
// short) leaves the rest to be faulted in on first use.
func createArena(size uint64) (int, []byte, error) {
	fd, err := unix.MemfdCreate("exs-shm-alloc", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, nil, fmt.Errorf("shm: memfd_create: %w", err)
	}
	if err = unix.Ftruncate(fd, int64(size)); err == nil {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, wantSeals)
	}
	var m []byte
	if err == nil {
		m, err = unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	}
	if err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("shm: shared allocation of %d bytes: %w", size, err)
	}
	return fd, m, nil
}

// arenaMsg is an arena message waiting to be written to a link's socket.
type arenaMsg struct {
	kind byte
	id   uint32
	size uint64
	fd   int // arenaAdd: a duplicate of the arena's memfd, closed once written; else -1
}

// queueArena queues the arena's memfd for the peer, once, if the
// connection is running, and reports whether it queued it; the caller
// writes the queue with flushArenaMsgs once it has released p.mu. The
// memfd is duplicated, so that Free may close the arena's own meanwhile.
// Called with p.mu held.
func (l *link) queueArena(a *arena) bool {
	if a == nil || !l.pmu.started {
		return false
	}
	if _, ok := l.pmu.arenasSent[a.id]; ok {
		return false
	}
	fd, err := unix.FcntlInt(uintptr(a.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return false // such as EMFILE: the next registration in it tries again
	}
	l.pmu.arenasSent[a.id] = struct{}{}
	l.pmu.arenaQ = append(l.pmu.arenaQ, arenaMsg{kind: arenaAdd, id: a.id, size: uint64(len(a.m)), fd: fd})
	return true
}

// flushArenaMsgs writes the link's queued arena messages to its socket,
// in the order they were queued. It is called without p.mu, so that a peer
// that does not read its socket stalls no other connection of the
// provider; sock keeps one writer at a time, hence the order. Each write
// waits at most arenaSendTO; after a failed one (the peer stopped reading,
// or is gone, or the link closed its socket) the link writes no more and
// drops what is queued: the peer then goes without the mappings, using
// cross-memory attach or the ring, so that a stalled peer costs at most
// one such wait.
func (l *link) flushArenaMsgs() {
	l.sock.Lock()
	defer l.sock.Unlock()
	for {
		l.p.mu.Lock()
		q := l.pmu.arenaQ
		l.pmu.arenaQ = nil
		l.p.mu.Unlock()
		if len(q) == 0 {
			return
		}
		for _, m := range q {
			if !l.sock.failed && l.writeArenaMsg(m) != nil {
				l.sock.failed = true
			}
			if m.fd >= 0 {
				unix.Close(m.fd)
			}
		}
	}
}

// writeArenaMsg writes an arena message to the socket. Called with sock
// held.
func (l *link) writeArenaMsg(m arenaMsg) error {
	var b [arenaMsgLen]byte
	putArenaMsg(b[:], m)
	var oob []byte
	if m.fd >= 0 {
		oob = unix.UnixRights(m.fd)
	}
	l.conn.SetWriteDeadline(time.Now().Add(arenaSendTO))
	_, _, err := l.conn.WriteMsgUnix(b[:], oob, nil)
	l.conn.SetWriteDeadline(time.Time{})
	return err
}

// onArenaMsg handles a message of the peer's socket: an arena to map or
// to drop. Anything else is ignored; received descriptors are closed.
func (l *link) onArenaMsg(b []byte, fds []int) {
	defer closeFDs(fds)
	msg, ok := parseArenaMsg(b, len(fds))
	if !ok {
		return
	}
	id, size := msg.id, msg.size
	switch msg.kind {
	case arenaAdd:
		// Refused before it is mapped, and checked again after (the
		// link may have died meanwhile).
		l.tx.Lock()
		ok := l.mayMapLocked(id, size)
		l.tx.Unlock()
		if !ok {
			return
		}
		m, err := mapPeer(fds[0], size)
		if err != nil {
			return
		}
		populatePeer(fds[0], m)
		l.tx.Lock()
		if !l.mayMapLocked(id, size) {
			l.tx.Unlock()
			unix.Munmap(m)
			return
		}
		l.tx.peerArenas[id] = m
		l.tx.peerArenaBytes += size
		l.tx.Unlock()
	case arenaDrop:
		l.tx.Lock()
		m := l.tx.peerArenas[id]
		delete(l.tx.peerArenas, id)
		l.tx.peerArenaBytes -= uint64(len(m))
		l.tx.Unlock()
		if m != nil {
			unix.Munmap(m)
		}
	}
}

// putArenaMsg encodes an arena message (not its descriptor) into b,
// arenaMsgLen bytes.
func putArenaMsg(b []byte, m arenaMsg) {
	clear(b[:arenaMsgLen])
	binary.LittleEndian.PutUint32(b[0:], msgMagic)
	b[4] = m.kind
	binary.LittleEndian.PutUint32(b[8:], m.id)
	binary.LittleEndian.PutUint64(b[16:], m.size)
}

// parseArenaMsg decodes a message of the peer's socket that came with
// nfds descriptors, and reports whether it is an arena message to act on:
// arenaAdd of a nonzero id and a size of whole pages up to maxArena, with
// exactly one descriptor, or arenaDrop. The fd of the result is -1.
func parseArenaMsg(b []byte, nfds int) (arenaMsg, bool) {
	if len(b) != arenaMsgLen || binary.LittleEndian.Uint32(b[0:]) != msgMagic {
		return arenaMsg{}, false
	}
	m := arenaMsg{kind: b[4], id: binary.LittleEndian.Uint32(b[8:]), size: binary.LittleEndian.Uint64(b[16:]), fd: -1}
	switch m.kind {
	case arenaAdd:
		if m.id == 0 || nfds != 1 || m.size == 0 || m.size > maxArena || m.size%pageSize != 0 {
			return arenaMsg{}, false
		}
	case arenaDrop:
	default:
		return arenaMsg{}, false
	}
	return m, true
}

// populatePeer maps into this side's page tables the pages of a peer's
// arena m (mapped from the memfd fd) that the peer has allocated, so that
// this side's first copies into them take no page faults: one
// MADV_POPULATE_READ per extent of data (SEEK_DATA, SEEK_HOLE), which maps
// the pages writable (memfd memory needs no write notification) and, unlike
// a write fault, maps up to 16 pages per fault. Holes are left alone, so
// that a peer cannot make this side allocate memory it never touched. On a
// kernel without MADV_POPULATE_READ (before Linux 5.14) or SEEK_DATA the
// pages are faulted in on first use, as before.
func populatePeer(fd int, m []byte) {
	for off := int64(0); off < int64(len(m)); {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err != nil || data >= int64(len(m)) {
			return // ENXIO: no data after off
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil || hole > int64(len(m)) {
			hole = int64(len(m))
		}
		if unix.Madvise(m[data:hole], unix.MADV_POPULATE_READ) != nil {
			return
		}
		off = hole
	}
}

// mayMapLocked reports whether the peer's arena id of size bytes may be
// mapped: the link is alive, the id is new, and the connection's arenas
// stay within maxPeerArena and the provider's byte limit
// (WithPeerArenaLimit). A refused arena is simply not mapped: the peer's
// operations on it take the path they would take for an arena not mapped
// yet. Called with tx held.
func (l *link) mayMapLocked(id uint32, size uint64) bool {
	return !l.tx.dead && l.tx.peerArenas[id] == nil && len(l.tx.peerArenas) < maxPeerArena &&
		size <= l.p.opts.peerArena && l.tx.peerArenaBytes <= l.p.opts.peerArena-size
}

// dropPeerArenas unmaps every arena of the peer. Called once the link is
// dead, so that no copy uses them.
func (l *link) dropPeerArenas() {
	l.tx.Lock()
	ms := l.tx.peerArenas
	l.tx.peerArenas, l.tx.peerArenaBytes = nil, 0
	l.tx.Unlock()
	for _, m := range ms {
		unix.Munmap(m)
	}
}

// arenaSpanLocked returns the bytes of the peer's region that m names, in
// this side's mapping of the arena the entry says the region lies in, or
// false if that arena is not mapped here or the entry does not fit in it.
// ri has passed Check for m, and was read from e. Called with tx held.
func (l *link) arenaSpanLocked(e *entry, ri verbs.RegionInfo, raddr uint64, n int) ([]byte, bool) {
	id := e.arena.Load()
	if id == 0 {
		return nil, false
	}
	a := l.tx.peerArenas[id]
	if a == nil {
		return nil, false
	}
	return arenaSpan(a, e.arenaOff.Load(), ri, raddr, n)
}

// arenaSpan returns the n bytes at raddr of the region ri, which the
// peer's entry says starts at offset off of the arena mapped here as a,
// or false if the region does not fit in a. ri has passed Check for raddr
// and n: they lie in the region.
func arenaSpan(a []byte, off uint64, ri verbs.RegionInfo, raddr uint64, n int) ([]byte, bool) {
	if off > uint64(len(a)) || ri.Len > uint64(len(a))-off {
		return nil, false
	}
	start := off + (raddr - ri.Addr)
	return a[start : start+uint64(n) : start+uint64(n)], true
}
