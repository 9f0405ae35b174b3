//go:build !mut_estimateover

package mut

// EstimateOver, when on (build tag mut_estimateover): a direct transfer of n bytes completing a recv advertised without MSG_WAITALL advances S'_r by n instead of n-1.
const EstimateOver = false
