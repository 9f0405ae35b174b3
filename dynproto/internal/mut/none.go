//go:build !mut_nophasejump && !mut_noholdoffka && !mut_noholdoffkb && !mut_noholdoffbr && !mut_nocorrection && !mut_acceptoldseq && !mut_noleavedirect && !mut_literalcopyout && !mut_nophasecheck && !mut_ringoverrun && !mut_noresume && !mut_heldneedsdata && !mut_heldsmall && !mut_advertpastsmall && !mut_gonediscards && !mut_goneeof && !mut_noringoffcheck && !mut_msgunitsbytes && !mut_plainphase && !mut_ownring && !mut_toolongfirst && !mut_emptysendqueued && !mut_estimateover

package mut

// Active names the mutant compiled in; it is empty in normal builds.
const Active = ""
