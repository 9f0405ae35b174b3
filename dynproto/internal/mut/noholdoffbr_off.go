//go:build !mut_noholdoffbr

package mut

// NoHoldOffBr, when on (build tag mut_noholdoffbr), makes the receiver advertises while its stream buffer holds data (b_r > 0).
const NoHoldOffBr = false
