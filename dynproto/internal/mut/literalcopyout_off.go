//go:build !mut_literalcopyout

package mut

// LiteralCopyOut, when on (build tag mut_literalcopyout), makes the slides' literal copy-out: S'_r is not advanced for a recv that was never advertised.
const LiteralCopyOut = false
