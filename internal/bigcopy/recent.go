package bigcopy

// Non-temporal stores pay when the destination is not in the cache: a
// stream into many buffers, each written again only after tens of MiB of
// other copies. Into a buffer written moments before (one-sided writes
// into one target again and again, as into a RECV buffer posted again),
// they write around the lines that are already there, and a copy through
// the cache runs 1.4-1.5 times as fast (BenchmarkHot; the other way round,
// into 24 buffers, Copy is 1.6-1.7 times as fast). Recent tells the two apart by
// the destinations of a copier's last transfers.

// HotWindow is how many bytes a copier may copy after writing a
// destination for that destination still to count as in the cache: an
// eighth of a 32 MiB last-level cache, and several times Min.
const HotWindow = 4 << 20

// recentLen is how many destinations Recent remembers: the transfers of
// Min bytes or more that fit in HotWindow.
const recentLen = HotWindow / Min

// Recent remembers the destinations of a copier's recent large transfers.
// It is not safe for concurrent use: each copier keeps its own, under its
// own lock.
type Recent struct {
	spans [recentLen]span
	next  int    // the slot the next span takes
	clock uint64 // bytes of large transfers copied so far
}

type span struct {
	lo, hi uintptr // [lo, hi); hi == 0 for an empty slot
	at     uint64  // clock at the end of the write
}

// Copier returns how to copy a transfer of n bytes (in one or more pieces)
// whose destination starts at addr and is contiguous: Copy if n >= Min and
// no part of it was written within the last HotWindow bytes, else
// CopyCached. It records the transfer as written.
func (r *Recent) Copier(addr uintptr, n int) func(dst, src []byte) int {
	if n < Min {
		return CopyCached
	}
	lo, hi := addr, addr+uintptr(n)
	hot := false
	for i := range r.spans {
		s := &r.spans[i]
		if s.hi != 0 && s.lo < hi && lo < s.hi && r.clock-s.at < HotWindow {
			hot = true
			break
		}
	}
	r.clock += uint64(n)
	r.spans[r.next] = span{lo: lo, hi: hi, at: r.clock}
	r.next = (r.next + 1) % recentLen
	if hot {
		return CopyCached
	}
	return Copy
}

// cachedPiece is the largest piece CopyCached hands to copy(): below Min,
// from which runtime.memmove writes around the cache.
const cachedPiece = Min / 2

// CopyCached copies min(len(dst), len(src)) bytes from src to dst through
// the cache, in pieces under Min, and returns that count. Overlapping
// slices are handled as copy() handles them.
func CopyCached(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n < Min {
		return copy(dst, src)
	}
	if overlap(dst[:n], src[:n]) {
		return copy(dst, src)
	}
	for off := 0; off < n; off += cachedPiece {
		end := min(off+cachedPiece, n)
		copy(dst[off:end], src[off:end])
	}
	return n
}
