//go:build mut_toolongfirst

package mut

// TooLongFirst is on: an ACK of several messages whose last was too long fails the send of its first with EMSGSIZE instead.
const TooLongFirst = true

// Active names the mutant compiled in.
const Active = "mut_toolongfirst"
