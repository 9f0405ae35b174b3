package shm

import (
	"encoding/binary"
	"errors"
	"sync/atomic"
	"unsafe"

	"github.com/exsgo/exs/mreg"
)

// The shared mapping of one connection, created by the dialing side
// (side 0) and mapped by the listening side (side 1):
//
//	offset 0         header page: magic, version, ring sizes; the side
//	                 blocks of side 0 (at 1024) and side 1 (at 2048)
//	then, per side s in 0, 1:
//	                 request ring s (control page, then reqSize bytes),
//	                 response ring s (control page, then respSize bytes)
//	then, per side s: the registration table of side s (tableSlots
//	                 entries of 64 bytes)
//
// Ring s is produced by side s and consumed by side 1-s. Requests (SEND,
// WRITE, READ, ...) travel on the request rings; outcomes, READ data and
// terminations on the response rings, so that a target holding back
// requests (receiver not ready) still reads outcomes. Table s lists the
// registrations side s publishes for its queue pair's protection domain.
const (
	pageSize     = 4096
	headerMagic  = 0x6578735f73686d31 // "exs_shm1"
	protoVersion = 2
	sideOffset   = 1024 // side block s at sideOffset*(s+1)
	tableSlots   = mreg.MaxRegions + 1
	entrySize    = 64
)

// layout gives the offsets of the parts of a shared mapping.
type layout struct {
	reqSize, respSize uint64
	req, resp, table  [2]uint64
	total             uint64
}

func newLayout(reqSize, respSize uint64) layout {
	var lo layout
	lo.reqSize, lo.respSize = reqSize, respSize
	off := uint64(pageSize)
	for s := range 2 {
		lo.req[s] = off
		off += pageSize + reqSize
		lo.resp[s] = off
		off += pageSize + respSize
	}
	for s := range 2 {
		lo.table[s] = off
		off += (tableSlots*entrySize + pageSize - 1) &^ (pageSize - 1)
	}
	lo.total = off
	return lo
}

// validRingSize reports whether n is a usable ring size: a power of two
// between 16 KiB and 64 MiB.
func validRingSize(n uint64) bool {
	return n >= 16<<10 && n <= 64<<20 && n&(n-1) == 0
}

// header is the start of the mapping.
type header struct {
	magic    uint64
	version  uint64
	reqSize  uint64
	respSize uint64
	nonce    uint64 // random, names the connection (see raceKeyFor)
}

// sideBlock holds the words one side of a connection shares with its
// peer, each on its own cache line.
type sideBlock struct {
	// bell is the futex word the side's receiver sleeps on; sleeping is
	// sleepNormal while it does (or is about to). A waker bumps bell and
	// wakes a sleepNormal receiver.
	bell     atomic.Uint32
	sleeping atomic.Uint32
	_        [56]byte
	// closed is set when the side terminated the connection: the peer
	// may no longer touch the side's memory (message buffers and
	// registered regions).
	closed atomic.Uint32
	_      [60]byte
	// access counts the peer's copies into or out of this side's memory
	// in progress (cross-memory attach). The peer raises it, then checks
	// closed (and the registration entry), copies, and lowers it; a side
	// that terminates or deregisters sets closed (or kills the entry) and
	// then waits for access to reach zero.
	access atomic.Int32
	_      [60]byte
	// wantSpace is set while the side has records waiting for room in one
	// of the rings it produces; the consumer then rings its bell.
	wantSpace atomic.Uint32
	_         [60]byte
}

// entry is one published registration, at the slot of its keys.
type entry struct {
	state  atomic.Uint32 // entryLive, or not
	lkey   atomic.Uint32
	rkey   atomic.Uint32
	access atomic.Uint32
	addr   atomic.Uint64
	n      atomic.Uint64
	// arena names the shared-allocator arena the region lies in (0:
	// none) and arenaOff the region's first byte's offset in it; a peer
	// that mapped the arena copies into the region with a plain copy.
	arena    atomic.Uint32
	_        uint32
	arenaOff atomic.Uint64
	_        [16]byte
}

const entryLive = 1

// slotOf returns the table slot of a key (mreg keeps the slot in the low
// bits of both keys of a region).
func slotOf(k mreg.Key) uint32 { return uint32(k) & mreg.MaxRegions }

// table is a side's published registrations.
type table []entry

func tableAt(m []byte, off uint64) table {
	return unsafe.Slice((*entry)(unsafe.Pointer(&m[off])), tableSlots)
}

func sideAt(m []byte, s int) *sideBlock {
	return (*sideBlock)(unsafe.Pointer(&m[sideOffset*(s+1)]))
}

// ringCtl is the control page of a ring: the producer's tail and the
// consumer's head, on separate cache lines. Both count bytes from the
// ring's creation; position = count mod size.
type ringCtl struct {
	tail atomic.Uint64
	_    [120]byte
	head atomic.Uint64
	_    [120]byte
}

// ring is a single-producer, single-consumer ring of variable-length
// records in shared memory. A record starts with an 8-byte header (its
// length in bytes including the header, as a little-endian uint32, then
// its type) and is padded to a multiple of 8; records never wrap: a pad
// record fills the end of the data area when the next record does not
// fit there.
type ring struct {
	ctl  *ringCtl
	data []byte
	size uint64
	race unsafe.Pointer // see raceKeyFor; nil unless built with -race
}

func ringAt(m []byte, off, size uint64) ring {
	return ring{
		ctl:  (*ringCtl)(unsafe.Pointer(&m[off])),
		data: m[off+pageSize : off+pageSize+size : off+pageSize+size],
		size: size,
	}
}

// Record types.
const (
	recPad   = 1 + iota // filler up to the end of the data area
	recReq              // a request (initiator to target)
	recFrag             // more inline bytes of the request before it
	recAck              // every request up to an id succeeded
	recDone             // one request's outcome (an error)
	recRData            // bytes of a READ's response
	recTerm             // the sender terminated the connection
)

const recHdr = 8

func align8(n int) int { return (n + 7) &^ 7 }

// maxRecord is the largest record for a ring of size bytes: small enough
// that an empty ring always takes one, pad included.
func maxRecord(size uint64) int { return int(min(size/4, 64<<10)) }

// errCorrupt reports a record that breaks the ring's rules: the peer is
// faulty or hostile.
var errCorrupt = errors.New("shm: corrupt record from peer")

// producer is the writing end of a ring. It is thread-compatible: the
// link serializes its use.
type producer struct {
	r         ring
	tail      uint64 // local copy of ctl.tail
	headCache uint64 // last head read
}

// reserve returns room for a record of n bytes (header included), writing
// a pad record first if needed, or nil if the ring is full. The caller
// fills the record (header included) and calls commit.
func (p *producer) reserve(n int) []byte {
	an := uint64(align8(n))
	pos := p.tail & (p.r.size - 1)
	pad := uint64(0)
	if pos+an > p.r.size {
		pad = p.r.size - pos
	}
	if p.tail+pad+an-p.headCache > p.r.size {
		p.headCache = p.r.ctl.head.Load()
		if p.tail+pad+an-p.headCache > p.r.size {
			return nil
		}
	}
	if pad > 0 {
		binary.LittleEndian.PutUint32(p.r.data[pos:], uint32(pad))
		p.r.data[pos+4] = recPad
		p.tail += pad
		pos = 0
	}
	return p.r.data[pos : pos+uint64(n) : pos+uint64(n)]
}

// commit publishes the record of n bytes last reserved.
func (p *producer) commit(n int) {
	p.tail += uint64(align8(n))
	raceRelease(p.r.race)
	p.r.ctl.tail.Store(p.tail)
}

// room reports the largest record that would fit now without waiting, a
// lower bound.
func (p *producer) room() int {
	p.headCache = p.r.ctl.head.Load()
	free := p.r.size - (p.tail - p.headCache)
	pos := p.tail & (p.r.size - 1)
	if end := p.r.size - pos; end < free {
		// The record either fits before the end or goes to the start
		// after a pad.
		free = max(end, free-end)
	}
	return int(free) &^ 7
}

// consumer is the reading end of a ring. It is thread-compatible.
type consumer struct {
	r         ring
	head      uint64 // local head, published with publish
	tailCache uint64 // last tail read
}

// ready reports whether a record (or pad) is there, without reading it.
func (c *consumer) ready() bool {
	return c.head != c.tailCache || c.r.ctl.tail.Load() != c.head
}

// peek returns the next record, skipping pads, or nil if the ring is
// empty. It returns errCorrupt for a record that breaks the rules.
func (c *consumer) peek() ([]byte, error) {
	for {
		if c.head == c.tailCache {
			c.tailCache = c.r.ctl.tail.Load()
			if c.head == c.tailCache {
				return nil, nil
			}
			if c.tailCache-c.head > c.r.size || c.tailCache&7 != 0 {
				return nil, errCorrupt
			}
		}
		pos := c.head & (c.r.size - 1)
		n := uint64(binary.LittleEndian.Uint32(c.r.data[pos:]))
		an := (n + 7) &^ 7
		if n < recHdr || pos+an > c.r.size || an > c.tailCache-c.head {
			return nil, errCorrupt
		}
		if c.r.data[pos+4] == recPad {
			c.head += an
			continue
		}
		raceAcquire(c.r.race)
		return c.r.data[pos : pos+n : pos+n], nil
	}
}

// advance moves past a record of n bytes returned by peek.
func (c *consumer) advance(n int) { c.head += uint64(align8(n)) }

// publish tells the producer how far the consumer has read.
func (c *consumer) publish() {
	if c.r.ctl.head.Load() != c.head {
		c.r.ctl.head.Store(c.head)
	}
}

// putHdr writes a record header.
func putHdr(b []byte, typ byte) {
	binary.LittleEndian.PutUint32(b, uint32(len(b)))
	b[4] = typ
	b[5], b[6], b[7] = 0, 0, 0
}

// An entry is exactly entrySize bytes.
var (
	_ [entrySize - unsafe.Sizeof(entry{})]byte
	_ [unsafe.Sizeof(entry{}) - entrySize]byte
)
