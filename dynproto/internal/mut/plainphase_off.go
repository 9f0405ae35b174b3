//go:build !mut_plainphase

package mut

// PlainPhaseCompare, when on (build tag mut_plainphase): phases compare as plain numbers instead of in serial arithmetic, so the phase after 2^32-1 is 0 but counts as older.
const PlainPhaseCompare = false
