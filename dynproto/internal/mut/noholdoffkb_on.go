//go:build mut_noholdoffkb

package mut

// NoHoldOffKb is on: the receiver advertises while k_b > 0 (held-off recvs still pending).
const NoHoldOffKb = true

// Active names the mutant compiled in.
const Active = "mut_noholdoffkb"
