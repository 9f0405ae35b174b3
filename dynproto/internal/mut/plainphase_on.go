//go:build mut_plainphase

package mut

// PlainPhaseCompare is on: phases compare as plain numbers instead of in serial arithmetic, so the phase after 2^32-1 is 0 but counts as older.
const PlainPhaseCompare = true

// Active names the mutant compiled in.
const Active = "mut_plainphase"
