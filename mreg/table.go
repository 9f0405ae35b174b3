package mreg

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Slots are kept in chunks allocated on first use, so that an empty table
// is small and a lookup is two loads: the chunk, then the slot.
const (
	chunkBits = 8
	chunkSize = 1 << chunkBits
	chunkMask = chunkSize - 1
	numChunks = (1 << slotBits) / chunkSize
)

type slot struct {
	region atomic.Pointer[Region] // the live region, or nil
	gen    uint32                 // registrations so far; guarded by Table.mu
}

type chunk [chunkSize]slot

// Table is a set of registered regions: the memory of one protection domain.
// It is safe for concurrent use. Lookup takes no lock: each slot is an
// atomic pointer. Register and Deregister serialize on a mutex.
//
// The zero value is an empty table ready for use; NewTable returns one. The
// secret that keys are derived from is drawn on the first Register. A Table
// must not be copied after first use.
type Table struct {
	chunks [numChunks]atomic.Pointer[chunk]

	mu    sync.Mutex
	keys  keyGen   // guarded by mu
	fresh uint32   // next never-used slot; 0 until the first Register
	free  []uint32 // freed slots, oldest first, from free[head]
	head  int
	live  int
}

// NewTable returns an empty table.
func NewTable() *Table { return new(Table) }

// Register registers buf with the given rights and returns its region, with
// a fresh lkey and rkey. buf must not be empty; access may hold only
// LocalWrite, RemoteRead and RemoteWrite, and RemoteWrite requires
// LocalWrite. It returns ErrInvalid for a bad argument and ErrTableFull when
// MaxRegions regions are registered. The same memory may be registered more
// than once; each registration is independent.
//
// The table refers to buf until Deregister succeeds: the caller must keep
// the memory valid (not Free it) until then.
func (t *Table) Register(buf []byte, access Access) (*Region, error) {
	switch {
	case len(buf) == 0:
		return nil, fmt.Errorf("%w: register an empty buffer", ErrInvalid)
	case access&^accessAll != 0:
		return nil, fmt.Errorf("%w: unknown access bits %v", ErrInvalid, access&^accessAll)
	case access&RemoteWrite != 0 && access&LocalWrite == 0:
		return nil, fmt.Errorf("%w: RemoteWrite without LocalWrite", ErrInvalid)
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	if t.keys.block == nil {
		t.keys.init()
		t.fresh = 1
	}
	idx, ok := t.allocSlot()
	if !ok {
		return nil, ErrTableFull
	}
	s := t.slot(idx, true)
	s.gen++
	r := &Region{
		table: t,
		addr:  uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))),
		n:     len(buf),
		acc:   access,
		idx:   idx,
	}
	r.lkey, r.rkey = t.keys.keys(idx, s.gen)
	r.data.Store(unsafe.SliceData(buf))
	s.region.Store(r)
	t.live++
	return r, nil
}

// Deregister removes r from the table. It returns ErrBusy, leaving r
// registered and usable, while references to r are held (posted work that
// uses it has not completed); ErrDeregistered if r was already
// deregistered; and ErrInvalid if r is nil or belongs to another table.
//
// After success both keys of r are dead for good (Lookup reports
// ErrInvalidKey), r.Bytes returns nil, and neither the table nor r refers to
// the memory any more: the caller may free it.
func (t *Table) Deregister(r *Region) error {
	switch {
	case r == nil:
		return fmt.Errorf("%w: deregister a nil region", ErrInvalid)
	case r.table != t:
		return fmt.Errorf("%w: region of another table", ErrInvalid)
	}
	if err := r.close(); err != nil {
		return err
	}
	t.mu.Lock()
	t.slot(r.idx, false).region.Store(nil)
	t.free = append(t.free, r.idx)
	t.live--
	t.mu.Unlock()
	r.data.Store(nil)
	return nil
}

// Lookup finds the live region named by key and checks that it may be used
// for access on the bytes [addr, addr+n), addr being a virtual address (see
// Region.Addr); n == 0 is allowed for an addr inside the region or at its
// end. Access that includes RemoteRead or RemoteWrite needs the region's
// rkey; local access (0, meaning local read, or LocalWrite) needs its lkey.
//
// The checks run in this order: the key (ErrInvalidKey if no live region has
// it), the bounds (ErrBounds), then the rights and the kind of key
// (ErrAccess). Unknown access bits are refused with ErrInvalid before any of
// them.
//
// On success Lookup takes a reference to the region, which the caller must
// drop with Release exactly once, and returns the region and its bytes
// [addr, addr+n), with capacity n. Lookup takes no lock and does not
// allocate.
func (t *Table) Lookup(key Key, addr, n uint64, access Access) (*Region, []byte, error) {
	if access&^accessAll != 0 {
		return nil, nil, fmt.Errorf("%w: unknown access bits %#x", ErrInvalid, uint32(access&^accessAll))
	}
	r := t.find(key)
	if r == nil || !r.incref() {
		return nil, nil, ErrInvalidKey
	}
	// From here on the reference keeps the memory registered.
	off, ok := r.offset(addr, n)
	if !ok {
		r.decref()
		return nil, nil, ErrBounds
	}
	remote := access&accessRemote != 0
	if remote != (key == r.rkey) || access&^r.acc != 0 {
		r.decref()
		return nil, nil, ErrAccess
	}
	return r, unsafe.Slice(r.data.Load(), r.n)[off : off+n : off+n], nil
}

// Len returns the number of live regions.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.live
}

// find returns the region in key's slot if key is its lkey or rkey.
func (t *Table) find(key Key) *Region {
	idx := uint32(key) & slotMask
	c := t.chunks[idx>>chunkBits].Load()
	if c == nil {
		return nil
	}
	r := c[idx&chunkMask].region.Load()
	if r == nil || (key != r.lkey && key != r.rkey) {
		return nil
	}
	return r
}

// slot returns slot idx, allocating its chunk if alloc is set. t.mu must be
// held.
func (t *Table) slot(idx uint32, alloc bool) *slot {
	cp := &t.chunks[idx>>chunkBits]
	c := cp.Load()
	if c == nil && alloc {
		c = new(chunk)
		cp.Store(c)
	}
	return &c[idx&chunkMask]
}

// allocSlot picks a free slot: a never-used one while any is left, then the
// one freed longest ago, so that reuse of any single slot, and so the
// advance of its generation, is as slow as possible. t.mu must be held.
func (t *Table) allocSlot() (uint32, bool) {
	if t.fresh <= MaxRegions {
		idx := t.fresh
		t.fresh++
		return idx, true
	}
	if t.head == len(t.free) {
		return 0, false
	}
	idx := t.free[t.head]
	t.head++
	if t.head >= len(t.free)/2 && t.head >= 64 {
		n := copy(t.free, t.free[t.head:])
		t.free = t.free[:n]
		t.head = 0
	}
	return idx, true
}
