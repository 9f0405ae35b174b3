package verbs

import (
	"strconv"

	"github.com/exsgo/exs/mreg"
)

// Opcode is the operation of a send work request. The zero Opcode is not
// an operation: PostSend refuses it with ErrInvalid.
type Opcode uint8

// Send work request opcodes, as in verbs.
const (
	// OpSend sends the gathered bytes into the next RECV posted at the
	// peer.
	OpSend Opcode = iota + 1
	// OpSendWithImm is OpSend carrying 32 bits of immediate data, which
	// the peer's RECV completion reports.
	OpSendWithImm
	// OpWrite writes the gathered bytes into the peer's memory at
	// (RKey, RemoteAddr), which must lie in a region registered with
	// mreg.RemoteWrite. The peer's application takes no part.
	OpWrite
	// OpWriteWithImm is OpWrite followed by a notification: it consumes
	// the next RECV posted at the peer, which completes with the
	// immediate data and the number of bytes written (its scatter list is
	// not touched).
	OpWriteWithImm
	// OpRead reads bytes from the peer's memory at (RKey, RemoteAddr),
	// which must lie in a region registered with mreg.RemoteRead, into
	// the local scatter list (regions registered with mreg.LocalWrite).
	OpRead
)

// String returns the opcode's verbs name, such as "SEND" or
// "RDMA_WRITE_WITH_IMM".
func (o Opcode) String() string {
	switch o {
	case OpSend:
		return "SEND"
	case OpSendWithImm:
		return "SEND_WITH_IMM"
	case OpWrite:
		return "RDMA_WRITE"
	case OpWriteWithImm:
		return "RDMA_WRITE_WITH_IMM"
	case OpRead:
		return "RDMA_READ"
	}
	return "Opcode(" + strconv.Itoa(int(o)) + ")"
}

// valid reports whether o is a defined opcode.
func (o Opcode) valid() bool { return o >= OpSend && o <= OpRead }

// consumesRecv reports whether an operation with opcode o consumes a RECV
// at the target.
func (o Opcode) consumesRecv() bool {
	return o == OpSend || o == OpSendWithImm || o == OpWriteWithImm
}

// hasImm reports whether o carries immediate data.
func (o Opcode) hasImm() bool { return o == OpSendWithImm || o == OpWriteWithImm }

// SGE is one element of a scatter/gather list: Len bytes at virtual
// address Addr of the local region whose lkey is LKey (mreg.Region.Addr
// names a region's first byte). It is a plain value. The zero SGE names no
// region; an SGE with Len 0 is allowed and moves nothing, but its key and
// address are still checked.
type SGE struct {
	Addr uint64
	Len  uint32
	LKey mreg.Key
}

// SendFlags modify a send work request.
type SendFlags uint8

const (
	// Signaled asks for a completion when the work request succeeds.
	// Without it (an unsignaled work request) only a failure, including a
	// flush, produces a completion. QPConfig.SignalAll signals every work
	// request.
	Signaled SendFlags = 1 << iota
)

// SendWR is a send work request. It is a plain value; PostSend copies what
// it needs, so the caller may reuse the SendWR and its SGL as soon as
// PostSend returns (the memory the SGL names must stay registered and
// untouched until the completion). The zero SendWR is not valid: it has no
// opcode.
type SendWR struct {
	// WRID is returned in the work request's completion.
	WRID uint64
	// Opcode is the operation.
	Opcode Opcode
	// Flags modify the request.
	Flags SendFlags
	// Imm is the immediate data of OpSendWithImm and OpWriteWithImm.
	Imm uint32
	// SGL is the gather list (send, write) or scatter list (read), at most
	// QPConfig.MaxSendSGE elements. It may be empty: a zero-length
	// operation.
	SGL []SGE
	// RemoteAddr and RKey name the peer's memory for OpWrite,
	// OpWriteWithImm and OpRead.
	RemoteAddr uint64
	RKey       mreg.Key
}

// RecvWR is a receive work request: a scatter list for one incoming SEND
// (or for nothing: an RDMA WRITE with immediate data consumes a RECV
// without touching its memory). It is a plain value; PostRecv copies it.
type RecvWR struct {
	// WRID is returned in the work request's completion.
	WRID uint64
	// SGL is the scatter list, at most QPConfig.MaxRecvSGE elements, in
	// regions registered with mreg.LocalWrite. It may be empty.
	SGL []SGE
}

// Status is the outcome of a work request, reported in its WC. The zero
// Status is not a status.
type Status uint8

// Completion statuses, named after their verbs counterparts (IBV_WC_*).
const (
	// StatusSuccess: the work request completed.
	StatusSuccess Status = iota + 1
	// StatusLocalLengthError: a RECV was too short for the SEND that
	// consumed it (the receiver's side of ErrTooLong), or a local scatter
	// or gather list is longer than a message may be.
	StatusLocalLengthError
	// StatusLocalProtectionError: an SGE of the work request named memory
	// that its lkey, bounds or rights do not cover.
	StatusLocalProtectionError
	// StatusLocalQPOperationError: the local queue pair failed the work
	// request for a reason of its own (a transport failure while it was
	// carried).
	StatusLocalQPOperationError
	// StatusFlushed: the work request was outstanding when the queue pair
	// entered the Error state (disconnect, destroy, an error of an earlier
	// work request, the peer's error) or was posted in that state. Its
	// memory may or may not have been touched.
	StatusFlushed
	// StatusRemoteAccessError: the peer refused a one-sided operation
	// (RDMA WRITE, READ): the rkey was invalid or stale, the range was
	// outside the region, or the region lacks the right. Nothing was
	// placed.
	StatusRemoteAccessError
	// StatusRemoteInvalidRequest: the peer could not accept the request: a
	// SEND longer than the RECV it consumed.
	StatusRemoteInvalidRequest
	// StatusRemoteOperationError: the peer failed the request for a reason
	// of its own, such as a RECV whose scatter list it may not write.
	StatusRemoteOperationError
	// StatusRNRRetryExceeded: no RECV was posted at the peer for a SEND or
	// RDMA WRITE with immediate data, and the queue pair's RNRPolicy is
	// RNRFail.
	StatusRNRRetryExceeded
)

var statusNames = [...]string{
	StatusSuccess:               "success",
	StatusLocalLengthError:      "local length error",
	StatusLocalProtectionError:  "local protection error",
	StatusLocalQPOperationError: "local QP operation error",
	StatusFlushed:               "work request flushed",
	StatusRemoteAccessError:     "remote access error",
	StatusRemoteInvalidRequest:  "remote invalid request",
	StatusRemoteOperationError:  "remote operation error",
	StatusRNRRetryExceeded:      "receiver-not-ready retry exceeded",
}

// String returns a short description of the status.
func (s Status) String() string {
	if int(s) < len(statusNames) && statusNames[s] != "" {
		return statusNames[s]
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

// Err returns nil for StatusSuccess and otherwise an error describing the
// status, which satisfies errors.As with *StatusError.
func (s Status) Err() error {
	if s == StatusSuccess {
		return nil
	}
	return &StatusError{Status: s}
}

// StatusError is the error form of a Status other than StatusSuccess.
type StatusError struct {
	Status Status
}

// Error describes the status.
func (e *StatusError) Error() string { return "work request failed: " + e.Status.String() }

// WCOpcode says which kind of work request a WC completes.
type WCOpcode uint8

// Completion opcodes.
const (
	WCSend        WCOpcode = iota + 1 // a SEND or SEND_WITH_IMM
	WCWrite                           // an RDMA_WRITE or RDMA_WRITE_WITH_IMM
	WCRead                            // an RDMA_READ
	WCRecv                            // a RECV consumed by a SEND (or flushed)
	WCRecvWithImm                     // a RECV consumed by an RDMA_WRITE_WITH_IMM
)

// String returns the completion opcode's name.
func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCWrite:
		return "RDMA_WRITE"
	case WCRead:
		return "RDMA_READ"
	case WCRecv:
		return "RECV"
	case WCRecvWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return "WCOpcode(" + strconv.Itoa(int(o)) + ")"
}

// WCFlags qualify a completion.
type WCFlags uint8

const (
	// WCWithImm says WC.Imm holds immediate data.
	WCWithImm WCFlags = 1 << iota
)

// WC is a work completion. It is a plain, comparable value.
type WC struct {
	// WRID is the work request's WRID.
	WRID uint64
	// Status is the outcome.
	Status Status
	// Opcode is the kind of work request completed.
	Opcode WCOpcode
	// Flags qualify the completion.
	Flags WCFlags
	// QPNum is the number of the queue pair the work request was posted
	// on (QP.Num).
	QPNum uint32
	// ByteLen is, for a successful RECV, the number of bytes received (of
	// the SEND, or written by the RDMA_WRITE_WITH_IMM); for a successful
	// RDMA_READ, the number of bytes read; otherwise 0.
	ByteLen uint32
	// Imm is the immediate data, valid when Flags has WCWithImm.
	Imm uint32
}

// WCOpcode returns the completion opcode of a send work request with
// opcode o.
func (o Opcode) WCOpcode() WCOpcode {
	switch o {
	case OpWrite, OpWriteWithImm:
		return WCWrite
	case OpRead:
		return WCRead
	}
	return WCSend
}
