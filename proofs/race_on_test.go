//go:build race

package proofs

// raceEnabled reports a test binary built with the race detector, in which
// the checker runs about ten times slower: only the smoke configurations run.
const raceEnabled = true
