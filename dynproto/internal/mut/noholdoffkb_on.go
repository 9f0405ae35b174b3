//go:build mut_noholdoffkb

package mut

// NoHoldOffKb is on: the receiver advertises a recv while an earlier recv still waits unadvertised (k_b > 0).
const NoHoldOffKb = true

// Active names the mutant compiled in.
const Active = "mut_noholdoffkb"
