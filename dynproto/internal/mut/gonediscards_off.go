//go:build !mut_gonediscards

package mut

// GoneDiscards, when on (build tag mut_gonediscards), makes PeerGone discard what the stream buffer holds, as Abort does.
const GoneDiscards = false
