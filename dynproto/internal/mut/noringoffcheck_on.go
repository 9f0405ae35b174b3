//go:build mut_noringoffcheck

package mut

// NoRingOffCheck is on: the receiver does not check an indirect transfer's stream-buffer offset against where the next one must be written.
const NoRingOffCheck = true

// Active names the mutant compiled in.
const Active = "mut_noringoffcheck"
