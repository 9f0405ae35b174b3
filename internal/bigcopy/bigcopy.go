// Package bigcopy copies large blocks the way runtime.memmove copies one
// block of 1 MiB or more: on amd64 with non-temporal stores, which write
// around the cache instead of evicting the working set into it. A copying
// provider that moves a large transfer as several pieces (one per
// scatter/gather entry) calls Copy for each piece, so that the pieces are
// copied like one block of their total length; runtime.memmove alone
// would copy each piece below 1 MiB through the cache.
//
// Elsewhere, and in race-detector builds (whose instrumentation sees only
// copy()), Copy is copy().
package bigcopy

import "unsafe"

// Min is the total length of a transfer from which runtime.memmove uses
// non-temporal stores for one block (memmove_amd64.s), and from which a
// provider should copy the transfer's pieces with Copy.
const Min = 1 << 20

// Copy copies min(len(dst), len(src)) bytes from src to dst, as copy()
// does, and returns that count. Overlapping slices are handled as copy()
// handles them.
func Copy(dst, src []byte) int { return bigCopy(dst, src) }

// overlap reports whether a and b (both non-empty) share memory.
func overlap(a, b []byte) bool {
	pa, pb := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}
