package mut

// Mutant describes one deliberate fault.
type Mutant struct {
	Tag         string // build tag that switches it on
	Description string
}

// All lists every mutant, in the order docs/proofs.md presents them.
var All = []Mutant{
	{"mut_nophasejump", "the sender drops a stale ADVERT without jumping its phase past the ADVERT's phase"},
	{"mut_noholdoffka", "the receiver advertises while k_a > 0 (stale advertised recvs still pending)"},
	{"mut_noholdoffkb", "the receiver advertises a recv while an earlier recv still waits unadvertised (k_b > 0)"},
	{"mut_noholdoffbr", "the receiver advertises while its stream buffer holds data (b_r > 0)"},
	{"mut_nocorrection", "the receiver does not correct S'_r by n-1 when a direct transfer of n bytes completes a recv"},
	{"mut_acceptoldseq", "the sender accepts an ADVERT whose S_A < S_S while in an indirect phase"},
	{"mut_noleavedirect", "the receiver stays in its direct phase when an indirect transfer arrives"},
	{"mut_literalcopyout", "the slides' literal copy-out: S'_r is not advanced for a recv that was never advertised"},
	{"mut_nophasecheck", "the sender accepts an ADVERT from an older phase (P_A < P_S) while in an indirect phase"},
	{"mut_ringoverrun", "the sender does not stop at the stream buffer's credits (b_s)"},
	{"mut_noresume", "the receiver never answers a PAUSE (departure 11), so a sender paused for FlagHeld waits forever once the receiver stops holding"},
	{"mut_heldneedsdata", "the receiver sets FlagHeld although a recv before the ones it would advertise needs more data from the stream buffer (departure 11)"},
	{"mut_heldsmall", "the receiver sets FlagHeld for a waiting recv shorter than AdvertMin, which it will never advertise (departure 12)"},
	{"mut_advertpastsmall", "the receiver advertises the recvs after one shorter than AdvertMin, which waits unadvertised (departure 12)"},
	{"mut_gonediscards", "when the connection goes, the receiver discards what its stream buffer holds, as a local abort does: bytes whose sends completed are lost"},
	{"mut_goneeof", "when the connection goes without the peer's FIN, the receiver reports the end of the stream instead of ECONNRESET once its stream buffer is drained"},
	{"mut_noringoffcheck", "the receiver does not check an indirect transfer's stream-buffer offset against where the next one must be written"},
	{"mut_msgunitsbytes", "copying a message out of the stream buffer advances S_r and S'_r by the message's bytes instead of by one message"},
	{"mut_plainphase", "phases compare as plain numbers instead of in serial arithmetic, so the phase after 2^32-1 is 0 but counts as older"},
	{"mut_ownring", "the sender bounds an indirect transfer by its own stream buffer's size where its peer's is meant"},
	{"mut_toolongfirst", "an ACK of several messages whose last was too long fails the send of its first with EMSGSIZE instead"},
	{"mut_emptysendqueued", "a zero-length send on a stream is queued for a transfer like any other instead of completing at once"},
	{"mut_estimateover", "a direct transfer of n bytes completing a recv advertised without MSG_WAITALL advances S'_r by n instead of n-1"},
}
