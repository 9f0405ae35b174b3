//go:build !mut_noholdoffkb

package mut

// NoHoldOffKb, when on (build tag mut_noholdoffkb), makes the receiver advertises while k_b > 0 (held-off recvs still pending).
const NoHoldOffKb = false
