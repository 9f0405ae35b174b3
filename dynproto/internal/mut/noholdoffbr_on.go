//go:build mut_noholdoffbr

package mut

// NoHoldOffBr is on: the receiver advertises while its stream buffer holds data (b_r > 0).
const NoHoldOffBr = true

// Active names the mutant compiled in.
const Active = "mut_noholdoffbr"
