//go:build amd64 && !race && !purego

package bigcopy

import "unsafe"

// ntMin is the length below which a copy goes through copy(): short
// blocks gain nothing from the aligned head, the loop and the fence.
const ntMin = 512

// ntcopy copies n bytes (a multiple of 64, at least 64) from src to dst,
// dst 16-byte aligned, with non-temporal stores, and ends with an SFENCE.
//
//go:noescape
func ntcopy(dst, src *byte, n uintptr)

func bigCopy(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n < ntMin {
		return copy(dst, src)
	}
	if overlap(dst[:n], src[:n]) {
		// Overlap: a forward copy is wrong for d > s.
		return copy(dst, src)
	}
	head := int(-uintptr(unsafe.Pointer(&dst[0])) & 15)
	copy(dst[:head], src[:head])
	body := (n - head) &^ 63
	ntcopy(&dst[head], &src[head], uintptr(body))
	copy(dst[head+body:n], src[head+body:n])
	return n
}
