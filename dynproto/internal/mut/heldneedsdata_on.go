//go:build mut_heldneedsdata

package mut

// HeldNeedsData is on: the receiver says it holds recvs (FlagHeld) even when a recv before them needs more data from the stream buffer.
const HeldNeedsData = true

// Active names the mutant compiled in.
const Active = "mut_heldneedsdata"
