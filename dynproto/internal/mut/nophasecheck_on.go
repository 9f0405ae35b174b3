//go:build mut_nophasecheck

package mut

// NoPhaseCheck is on: the sender accepts an ADVERT from an older phase (P_A < P_S) while in an indirect phase.
const NoPhaseCheck = true

// Active names the mutant compiled in.
const Active = "mut_nophasecheck"
