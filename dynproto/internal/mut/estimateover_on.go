//go:build mut_estimateover

package mut

// EstimateOver is on: a direct transfer of n bytes completing a recv advertised without MSG_WAITALL advances S'_r by n instead of n-1.
const EstimateOver = true

// Active names the mutant compiled in.
const Active = "mut_estimateover"
