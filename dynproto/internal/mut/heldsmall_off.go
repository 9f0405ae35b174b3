//go:build !mut_heldsmall

package mut

// HeldSmall, when on (build tag mut_heldsmall), makes the receiver set FlagHeld for a waiting recv shorter than AdvertMin, which it will never advertise (departure 12).
const HeldSmall = false
