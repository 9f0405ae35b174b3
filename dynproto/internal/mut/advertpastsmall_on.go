//go:build mut_advertpastsmall

package mut

// AdvertPastSmall is on: the receiver advertises the recvs after one shorter than AdvertMin, which waits unadvertised (departure 12).
const AdvertPastSmall = true

// Active names the mutant compiled in.
const Active = "mut_advertpastsmall"
