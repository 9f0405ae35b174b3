//go:build !mut_ringoverrun

package mut

// RingOverrun, when on (build tag mut_ringoverrun), makes the sender does not stop at the stream buffer's credits (b_s).
const RingOverrun = false
