//go:build mut_ringoverrun

package mut

// RingOverrun is on: the sender does not stop at the stream buffer's credits (b_s).
const RingOverrun = true

// Active names the mutant compiled in.
const Active = "mut_ringoverrun"
