//go:build !mut_noresume

package mut

// NoResume, when on (build tag mut_noresume), makes the receiver never answer a PAUSE with FlagResume.
const NoResume = false
