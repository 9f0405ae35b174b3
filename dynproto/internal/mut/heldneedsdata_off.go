//go:build !mut_heldneedsdata

package mut

// HeldNeedsData, when on (build tag mut_heldneedsdata), makes the receiver say it holds recvs (FlagHeld) even when a recv before them needs more data from the stream buffer.
const HeldNeedsData = false
