//go:build !mut_advertpastsmall

package mut

// AdvertPastSmall, when on (build tag mut_advertpastsmall), makes the receiver advertise the recvs after one shorter than AdvertMin, which waits unadvertised (departure 12).
const AdvertPastSmall = false
