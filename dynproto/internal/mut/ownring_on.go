//go:build mut_ownring

package mut

// OwnRing is on: the sender bounds an indirect transfer by its own stream buffer's size where its peer's is meant.
const OwnRing = true

// Active names the mutant compiled in.
const Active = "mut_ownring"
