//go:build !mut_nophasecheck

package mut

// NoPhaseCheck, when on (build tag mut_nophasecheck), makes the sender accepts an ADVERT from an older phase (P_A < P_S) while in an indirect phase.
const NoPhaseCheck = false
