//go:build !mut_goneeof

package mut

// GoneEOF, when on (build tag mut_goneeof), makes recvs report the end of the stream once the connection went and the stream buffer is drained, although no FIN arrived.
const GoneEOF = false
