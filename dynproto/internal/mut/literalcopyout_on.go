//go:build mut_literalcopyout

package mut

// LiteralCopyOut is on: the slides' literal copy-out: S'_r is not advanced for a recv that was never advertised.
const LiteralCopyOut = true

// Active names the mutant compiled in.
const Active = "mut_literalcopyout"
