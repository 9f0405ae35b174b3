// Package mreg registers memory for RDMA-style access: a table of regions
// with unguessable keys, access rights, bounds checks, a reference count that
// keeps memory in use from being deregistered, and an allocator of
// page-aligned memory to register.
//
// # Regions and keys
//
// A Table holds the regions of one protection domain. Table.Register
// registers a buffer with a set of rights and returns a Region with two
// 32-bit keys: the lkey, for local work requests, and the rkey, which an
// application hands to a peer so that the peer may RDMA READ from or WRITE
// into the region. A region's bytes are named by virtual addresses:
// Region.Addr is the address of its first byte.
//
// Keys carry the slot of the region in their low 14 bits (so a table holds at
// most MaxRegions regions) and an 18-bit tag in their high bits. The tag comes
// from a keyed pseudo-random permutation, seeded from crypto/rand for each
// table, of the slot's generation (its count of registrations). So keys
// cannot be predicted from other keys, the lkey and rkey of a region differ,
// and a stale key stays dead when its slot is reused: within 2^17
// registrations of one slot no tag repeats, and each later block of 2^17 uses
// a fresh permutation, under which an old key returns only by chance, as
// likely as a blind guess (2^-18). Freed slots are reused oldest first. The
// zero Key is never issued.
//
// # Rights
//
// Local read is always granted. LocalWrite allows local writes (a receive's
// scatter list, the sink of an RDMA READ); RemoteRead and RemoteWrite allow
// peers to read and write. As in verbs, RemoteWrite requires LocalWrite.
// Table.Lookup checks, in order, that the key names a live region, that the
// address range lies inside it, and that the region grants the access and
// that the kind of key fits it: remote access needs the rkey, local access
// the lkey. Every remote write is meant to pass through Lookup, which is
// lock-free and does not allocate.
//
// # Lifetime
//
// Work that uses a region's memory holds a reference: Lookup takes one on
// success, Region.Acquire takes one explicitly, and Region.Release drops it.
// Table.Deregister refuses with ErrBusy while references are held, and
// otherwise closes the region for good: its keys die, it refuses new
// references, and neither the table nor the region refers to the memory any
// more. A Lookup that races with Deregister either gets its reference first,
// making Deregister fail with ErrBusy, or fails with ErrInvalidKey; it never
// returns memory that has been given up.
//
// # Memory
//
// Alloc returns zeroed, page-aligned memory (an anonymous mapping on Linux,
// the Go heap elsewhere) for buffers that are registered for long; Free
// returns it once every region using it has been deregistered. Any []byte can
// be registered, though: the Go garbage collector does not move heap objects.
package mreg
