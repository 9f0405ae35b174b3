package exs

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// Access is the set of uses a memory handle allows. The zero Access allows
// nothing and is refused by Mregister.
type Access uint8

const (
	// AccessRead allows sending from the memory.
	AccessRead Access = 1 << iota
	// AccessWrite allows receiving into the memory. Such memory is
	// registered for remote write, so that the peer can place the bytes of
	// a recv directly into it (see "Memory" in the package documentation).
	AccessWrite

	accessAll = AccessRead | AccessWrite
)

// String returns "read", "write" or "read|write".
func (a Access) String() string {
	var parts []string
	if a&AccessRead != 0 {
		parts = append(parts, "read")
	}
	if a&AccessWrite != 0 {
		parts = append(parts, "write")
	}
	if rest := a &^ accessAll; rest != 0 || a == 0 {
		parts = append(parts, fmt.Sprintf("Access(%#x)", uint8(rest)))
	}
	return strings.Join(parts, "|")
}

// verbs returns the rights a registration with access needs.
func (a Access) verbs() mreg.Access {
	if a&AccessWrite != 0 {
		return mreg.LocalWrite | mreg.RemoteWrite
	}
	return 0
}

// MHandle is a memory handle: a buffer registered once with every device
// of its stack, so that operations on it need no registration of their
// own. Create one with Stack.Mregister.
//
// Every send or recv that names the handle holds a reference to it from
// the call that posts it until its event is posted; Mderegister is refused
// with ErrBusy meanwhile.
//
// An MHandle is safe for concurrent use. The zero MHandle is not usable.
type MHandle struct {
	st     *Stack
	buf    []byte
	addr   uint64
	access Access
	mrs    []*verbs.MR // by device index

	// state packs a closed bit (bit 0) and the number of references
	// held by posted operations (bits 1..63).
	state atomic.Uint64
}

const (
	handleClosed = 1
	handleRef    = 2
)

// Bytes returns the registered buffer.
func (h *MHandle) Bytes() []byte { return h.buf }

// Access returns the uses the handle allows.
func (h *MHandle) Access() Access { return h.access }

// Mregister registers buf for the uses in access and returns its handle.
// buf must not be empty. The handle keeps buf registered, and so in use by
// the library, until Mderegister succeeds; the caller must not free buf
// (mreg.Free) before.
func (st *Stack) Mregister(buf []byte, access Access) (*MHandle, error) {
	switch {
	case len(buf) == 0:
		return nil, opErr("mregister", "", fmt.Errorf("%w: empty buffer", ErrInvalid))
	case access == 0 || access&^accessAll != 0:
		return nil, opErr("mregister", "", fmt.Errorf("%w: access %v", ErrInvalid, access))
	}
	h := &MHandle{st: st, buf: buf, addr: addrOf(buf), access: access, mrs: make([]*verbs.MR, len(st.devs))}
	for i, d := range st.devs {
		mr, err := d.pd.RegisterMR(buf, access.verbs())
		if err != nil {
			for _, m := range h.mrs[:i] {
				m.Deregister()
			}
			return nil, opErr("mregister", "", err)
		}
		h.mrs[i] = mr
	}
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		for _, m := range h.mrs {
			m.Deregister()
		}
		return nil, opErr("mregister", "", ErrClosed)
	}
	st.handles[h] = struct{}{}
	st.mu.Unlock()
	return h, nil
}

// Mderegister deregisters h. It returns an error matching ErrBusy (and
// mreg.ErrBusy) while operations that name h are outstanding, or while a
// peer's write into h, under way when its recv completed or its connection
// ended, is still being placed (for a moment: retry), leaving h
// registered; an error matching ErrInvalid and mreg.ErrDeregistered if h
// was already deregistered; and ErrInvalid for a nil handle or one of
// another stack. After success, operations naming h fail with ErrInvalid.
func (st *Stack) Mderegister(h *MHandle) error {
	switch {
	case h == nil:
		return opErr("mderegister", "", fmt.Errorf("%w: nil memory handle", ErrInvalid))
	case h.st != st:
		return opErr("mderegister", "", fmt.Errorf("%w: memory handle of another stack", ErrInvalid))
	}
	if err := h.deregister(); err != nil {
		return opErr("mderegister", "", err)
	}
	st.mu.Lock()
	delete(st.handles, h)
	st.mu.Unlock()
	return nil
}

// deregister closes h if no operation holds it, and deregisters its
// memory regions.
func (h *MHandle) deregister() error {
	for {
		old := h.state.Load()
		switch {
		case old&handleClosed != 0:
			return fmt.Errorf("%w: %w", ErrInvalid, mreg.ErrDeregistered)
		case old >= handleRef:
			return fmt.Errorf("%w: %d operations outstanding: %w", ErrBusy, old/handleRef, mreg.ErrBusy)
		}
		if h.state.CompareAndSwap(old, old|handleClosed) {
			break
		}
	}
	var busy error
	for i, mr := range h.mrs {
		if mr == nil {
			continue
		}
		if err := mr.Deregister(); err != nil && !errors.Is(err, mreg.ErrDeregistered) {
			// A peer's write into the memory is still being placed:
			// keep the handle.
			busy = err
			continue
		}
		h.mrs[i] = nil
	}
	if busy != nil {
		h.state.Store(0)
		return fmt.Errorf("%w: %w", ErrBusy, busy)
	}
	return nil
}

// acquire takes a reference for an operation. It adds first and backs out
// if the handle turns out closed: a deregister that closes the handle
// succeeds only while the count is zero, so it either saw this reference
// (and refused) or closed before it (and the reference backs out).
func (h *MHandle) acquire() error {
	if h.state.Add(handleRef)&handleClosed != 0 {
		h.release()
		return fmt.Errorf("%w: memory handle: %w", ErrInvalid, mreg.ErrDeregistered)
	}
	return nil
}

// release drops a reference taken by acquire.
func (h *MHandle) release() {
	if h.state.Add(^uint64(handleRef-1)) >= 1<<63 {
		panic("exs: MHandle released more often than acquired")
	}
}

// check validates buf against h for the access an operation needs.
func (h *MHandle) check(st *Stack, buf []byte, need Access) error {
	switch {
	case h.st != st:
		return fmt.Errorf("%w: memory handle of another stack", ErrInvalid)
	case h.access&need == 0:
		return fmt.Errorf("%w: %v needed, handle grants %v", ErrAccess, need, h.access)
	}
	if len(buf) == 0 {
		return nil
	}
	a := addrOf(buf)
	if a < h.addr || a-h.addr > uint64(len(h.buf)) || uint64(len(buf)) > uint64(len(h.buf))-(a-h.addr) {
		return fmt.Errorf("%w: buffer [%#x, +%d) outside its memory handle [%#x, +%d): %w", ErrInvalid, a, len(buf), h.addr, len(h.buf), mreg.ErrBounds)
	}
	return nil
}

// addrOf returns the address of buf's first byte (0 for a nil buffer).
func addrOf(buf []byte) uint64 {
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
}

// Allocator is an optional ability of a verbs.Provider: memory of its own
// for registration. The same-host provider offers one (shm.Provider.Alloc
// and Free): memory that peers on the host map, so that they write it with
// a plain copy, without a system call. Stack.Alloc and the stream buffers
// use it; an Allocator should return memory already faulted in, as the
// same-host provider's does.
type Allocator interface {
	Alloc(n int) ([]byte, error)
	Free(b []byte) error
}

// Alloc returns n bytes of zeroed, page-aligned memory for Mregister: from
// the allocator of the first of the stack's providers (in the order of
// their schemes) that offers one (Allocator), otherwise, or if that
// allocator fails (the same-host provider's outside Linux, or without
// memfd), from mreg.Alloc. On Linux both populate the memory before they
// return it (every page allocated and mapped, and mapped likewise by a peer
// that maps it), so that the first transfers run at full speed: the page
// faults a first write would take, about 1-3 ms per MiB on a virtual
// machine, are taken by Alloc instead. Allocate once and reuse. Return it
// with Free once every handle on it is deregistered. Alloc returns an error matching ErrInvalid if n is not
// positive, and ErrClosed after Stack.Close (Free still takes memory back
// then).
func (st *Stack) Alloc(n int) ([]byte, error) {
	if n <= 0 {
		return nil, opErr("alloc", "", fmt.Errorf("%w: allocate %d bytes", ErrInvalid, n))
	}
	st.mu.Lock()
	closed := st.closed
	st.mu.Unlock()
	if closed {
		return nil, opErr("alloc", "", ErrClosed)
	}
	for _, d := range st.devs {
		if a, ok := d.dev.Provider().(Allocator); ok {
			if b, err := a.Alloc(n); err == nil {
				return b, nil
			}
			break
		}
	}
	b, err := mreg.Alloc(n)
	return b, opErr("alloc", "", err)
}

// Free returns memory from Alloc (b starting at its first byte). It
// returns an error matching ErrBusy (and mreg.ErrBusy) if the provider's
// allocator still sees the memory registered, and one matching ErrInvalid
// (and mreg.ErrInvalid) for memory Alloc did not return or already freed.
func (st *Stack) Free(b []byte) error {
	for _, d := range st.devs {
		if a, ok := d.dev.Provider().(Allocator); ok {
			err := a.Free(b)
			switch {
			case err == nil:
				return nil
			case errors.Is(err, mreg.ErrBusy):
				return opErr("free", "", fmt.Errorf("%w: %w", ErrBusy, err))
			case !errors.Is(err, mreg.ErrInvalid):
				return opErr("free", "", err)
			}
			break
		}
	}
	if err := mreg.Free(b); err != nil {
		return opErr("free", "", err) // matches ErrInvalid (mreg.ErrInvalid is the same value)
	}
	return nil
}
