//go:build mut_noresume

package mut

// NoResume is on: the receiver never answers a PAUSE with FlagResume.
const NoResume = true

// Active names the mutant compiled in.
const Active = "mut_noresume"
