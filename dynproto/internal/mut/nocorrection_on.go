//go:build mut_nocorrection

package mut

// NoEstimateCorrection is on: the receiver does not correct S'_r by n-1 when a direct transfer of n bytes completes a recv.
const NoEstimateCorrection = true

// Active names the mutant compiled in.
const Active = "mut_nocorrection"
