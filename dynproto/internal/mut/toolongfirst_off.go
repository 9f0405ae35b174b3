//go:build !mut_toolongfirst

package mut

// TooLongFirst, when on (build tag mut_toolongfirst): an ACK of several messages whose last was too long fails the send of its first with EMSGSIZE instead.
const TooLongFirst = false
