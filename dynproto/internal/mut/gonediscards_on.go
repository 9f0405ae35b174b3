//go:build mut_gonediscards

package mut

// GoneDiscards is on: PeerGone discards what the stream buffer holds, as
// Abort does.
const GoneDiscards = true

// Active names the mutant compiled in.
const Active = "mut_gonediscards"
