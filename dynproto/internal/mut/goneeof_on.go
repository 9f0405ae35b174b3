//go:build mut_goneeof

package mut

// GoneEOF is on: once the connection went and the stream buffer is
// drained, recvs report the end of the stream although no FIN arrived.
const GoneEOF = true

// Active names the mutant compiled in.
const Active = "mut_goneeof"
