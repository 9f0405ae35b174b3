//go:build !mut_noringoffcheck

package mut

// NoRingOffCheck, when on (build tag mut_noringoffcheck): the receiver does not check an indirect transfer's stream-buffer offset against where the next one must be written.
const NoRingOffCheck = false
