//go:build mut_heldsmall

package mut

// HeldSmall is on: the receiver sets FlagHeld for a waiting recv shorter than AdvertMin, which it will never advertise (departure 12).
const HeldSmall = true

// Active names the mutant compiled in.
const Active = "mut_heldsmall"
