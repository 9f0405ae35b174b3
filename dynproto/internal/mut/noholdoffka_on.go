//go:build mut_noholdoffka

package mut

// NoHoldOffKa is on: the receiver advertises while k_a > 0 (stale advertised recvs still pending).
const NoHoldOffKa = true

// Active names the mutant compiled in.
const Active = "mut_noholdoffka"
