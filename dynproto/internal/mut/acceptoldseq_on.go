//go:build mut_acceptoldseq

package mut

// AcceptOldSeq is on: the sender accepts an ADVERT whose S_A < S_S while in an indirect phase.
const AcceptOldSeq = true

// Active names the mutant compiled in.
const Active = "mut_acceptoldseq"
