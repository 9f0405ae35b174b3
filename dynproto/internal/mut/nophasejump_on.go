//go:build mut_nophasejump

package mut

// NoPhaseJump is on: the sender drops a stale ADVERT without jumping its phase past the ADVERT's phase.
const NoPhaseJump = true

// Active names the mutant compiled in.
const Active = "mut_nophasejump"
