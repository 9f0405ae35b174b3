//go:build !mut_noholdoffkb

package mut

// NoHoldOffKb, when on (build tag mut_noholdoffkb), makes the receiver advertises a recv while an earlier recv still waits unadvertised (k_b > 0).
const NoHoldOffKb = false
