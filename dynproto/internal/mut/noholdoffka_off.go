//go:build !mut_noholdoffka

package mut

// NoHoldOffKa, when on (build tag mut_noholdoffka), makes the receiver advertises while k_a > 0 (stale advertised recvs still pending).
const NoHoldOffKa = false
