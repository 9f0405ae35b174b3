//go:build !mut_ownring

package mut

// OwnRing, when on (build tag mut_ownring): the sender bounds an indirect transfer by its own stream buffer's size where its peer's is meant.
const OwnRing = false
