package mreg

import (
	"sync/atomic"
	"unsafe"
)

// Region lifetime.
//
// A region's lifetime is packed into one uint64 that changes only by
// compare-and-swap, in the manner of the poll.fdMutex of the standard
// library:
//
//	bit  0      closed: set by a successful Deregister, never cleared
//	bits 1..63  refs: the number of references held
//
// Transitions:
//
//	incref  (Acquire, Lookup):  !closed        -> refs+1   (closed: refused)
//	decref  (Release):          refs > 0       -> refs-1   (refs == 0: panic)
//	close   (Deregister):       !closed, refs==0 -> closed (refs > 0: ErrBusy;
//	                                                        closed: ErrDeregistered)
//
// Once closed, refs is 0 and stays 0, since incref refuses a closed region.
// So after a successful close no one holds a reference, and no one can take
// one: the table forgets the region and the region forgets its memory. A
// Lookup that races with Deregister either takes its reference first (and
// Deregister reports ErrBusy) or finds the region closed (and reports
// ErrInvalidKey); it never touches memory of a closed region.
const (
	stateClosed = 1 << 0
	stateRef    = 1 << 1
)

// Region is one registration of a buffer in a Table. It is safe for
// concurrent use. Regions are made by Table.Register; the zero Region is not
// usable.
//
// Work that uses the region's memory (a posted send, receive or RDMA
// operation) holds a reference, taken by Table.Lookup or Acquire and dropped
// by Release, for as long as it may touch the memory. Deregistration is
// refused while references are held.
type Region struct {
	state atomic.Uint64        // lifetime; see "Region lifetime" above
	data  atomic.Pointer[byte] // first byte of the buffer; nil once deregistered
	table *Table               // the table that registered the region
	addr  uint64               // virtual address of the first byte
	n     int                  // length of the buffer, > 0
	lkey  Key                  // local key
	rkey  Key                  // remote key
	acc   Access               // rights granted
	idx   uint32               // slot in table
}

// LKey returns the region's local key, used by local work requests (scatter
// and gather lists). It stays the same after deregistration, but no longer
// names a live region.
func (r *Region) LKey() Key { return r.lkey }

// RKey returns the region's remote key, the key peers use for RDMA READ and
// WRITE. Every region has one, distinct from its lkey; a region without
// remote rights refuses remote access through the rights check.
func (r *Region) RKey() Key { return r.rkey }

// Addr returns the virtual address of the first byte of the registered
// buffer. Peers name bytes of the region by addresses in
// [Addr(), Addr()+Len()).
func (r *Region) Addr() uint64 { return r.addr }

// Len returns the length of the registered buffer in bytes.
func (r *Region) Len() int { return r.n }

// Access returns the rights the region was registered with.
func (r *Region) Access() Access { return r.acc }

// Bytes returns the registered buffer, or nil once the region has been
// deregistered. Without a reference (Acquire) the region may be
// deregistered, and the memory released by its owner, at any moment.
func (r *Region) Bytes() []byte {
	p := r.data.Load()
	if p == nil {
		return nil
	}
	return unsafe.Slice(p, r.n)
}

// Acquire takes a reference to the region for work that will use its
// memory, so that deregistration is refused until the matching Release. It
// returns ErrDeregistered if the region has been deregistered.
func (r *Region) Acquire() error {
	if !r.incref() {
		return ErrDeregistered
	}
	return nil
}

// Release drops a reference taken by Acquire or Table.Lookup. Each reference
// must be released exactly once; Release panics if no reference is held,
// since that is a bug in the caller rather than an input error.
func (r *Region) Release() { r.decref() }

// Slice returns the bytes [addr, addr+n) of the region, addr being a virtual
// address as for Addr. n == 0 is allowed for any addr inside the region or at
// its end. The slice's capacity ends with it. Slice checks bounds only, not
// keys or rights; it returns ErrBounds for a range outside the region and
// ErrDeregistered once the region has been deregistered. Hold a reference
// while using the slice.
func (r *Region) Slice(addr, n uint64) ([]byte, error) {
	p := r.data.Load()
	if p == nil {
		return nil, ErrDeregistered
	}
	off, ok := r.offset(addr, n)
	if !ok {
		return nil, ErrBounds
	}
	return unsafe.Slice(p, r.n)[off : off+n : off+n], nil
}

// offset returns addr's offset in the region if [addr, addr+n) lies inside
// it. It never computes addr+n, so an overflowing end is simply out of
// bounds.
func (r *Region) offset(addr, n uint64) (uint64, bool) {
	if addr < r.addr {
		return 0, false
	}
	off := addr - r.addr
	size := uint64(r.n)
	if off > size || n > size-off {
		return 0, false
	}
	return off, true
}

// incref takes a reference unless the region is closed.
func (r *Region) incref() bool {
	for {
		old := r.state.Load()
		if old&stateClosed != 0 {
			return false
		}
		next := old + stateRef
		if next < old {
			panic("mreg: too many references to a region")
		}
		if r.state.CompareAndSwap(old, next) {
			return true
		}
	}
}

// decref drops a reference; it panics if none is held.
func (r *Region) decref() {
	for {
		old := r.state.Load()
		if old < stateRef {
			panic("mreg: Release of a region without a reference")
		}
		if r.state.CompareAndSwap(old, old-stateRef) {
			return
		}
	}
}

// close marks the region closed if it is open and unreferenced.
func (r *Region) close() error {
	for {
		old := r.state.Load()
		switch {
		case old&stateClosed != 0:
			return ErrDeregistered
		case old >= stateRef:
			return ErrBusy
		}
		if r.state.CompareAndSwap(old, old|stateClosed) {
			return nil
		}
	}
}
