//go:build !mut_nocorrection

package mut

// NoEstimateCorrection, when on (build tag mut_nocorrection), makes the receiver does not correct S'_r by n-1 when a direct transfer of n bytes completes a recv.
const NoEstimateCorrection = false
