//go:build !mut_acceptoldseq

package mut

// AcceptOldSeq, when on (build tag mut_acceptoldseq), makes the sender accepts an ADVERT whose S_A < S_S while in an indirect phase.
const AcceptOldSeq = false
