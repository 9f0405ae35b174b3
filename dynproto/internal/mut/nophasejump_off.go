//go:build !mut_nophasejump

package mut

// NoPhaseJump, when on (build tag mut_nophasejump), makes the sender drops a stale ADVERT without jumping its phase past the ADVERT's phase.
const NoPhaseJump = false
