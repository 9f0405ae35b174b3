package shm

// The records of the rings: their layout, and the outcome codes and
// termination kinds they carry.

import (
	"errors"
	"fmt"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// Request record layout (after the 8-byte header, whose bytes 5, 6 and 7
// hold the opcode, the payload mode and the number of iovecs):
//
//	8  id     uint32   the initiator's sequence number of the message
//	12 imm    uint32
//	16 rkey   uint32
//	24 raddr  uint64
//	32 len    uint64   bytes sent, written or read
//	40 body   inline bytes (modeInline) or iovecs of 16 bytes (modeIov)
const reqHdr = 40

// Payload modes of a request.
const (
	modeInline = 1 + iota // bytes in the record and in recFrag records after it
	modeIov               // the initiator's memory, for cross-memory attach
	modeRData             // READ: the target sends the bytes back in recRData records
)

// Response records: recAck and recDone are 16 bytes (id, code); recRData
// has id at 8 and bytes from 16; recTerm has the kind at 8 and a text
// from 16.
const respHdr = 16

// Outcome codes carried by recDone, so that errors.Is keeps working on
// the initiator's side.
const (
	codeOther = 1 + iota
	codeInvalidKey
	codeBounds
	codeAccess
	codeNoRecv
	codeTooLong
	codeRemoteOp
	codeInvalid
	codeClosed
)

var codeErrs = [...]error{
	codeInvalidKey: mreg.ErrInvalidKey,
	codeBounds:     mreg.ErrBounds,
	codeAccess:     mreg.ErrAccess,
	codeNoRecv:     verbs.ErrNoRecv,
	codeTooLong:    verbs.ErrTooLong,
	codeRemoteOp:   verbs.ErrRemoteOperation,
	codeInvalid:    verbs.ErrInvalid,
	codeClosed:     verbs.ErrClosed,
}

func codeOf(err error) uint32 {
	for c, e := range codeErrs {
		if e != nil && errors.Is(err, e) {
			return uint32(c)
		}
	}
	return codeOther
}

// errOf returns the error the initiator reports for an outcome code.
func errOf(code uint32) error {
	if code < uint32(len(codeErrs)) && codeErrs[code] != nil {
		return fmt.Errorf("shm: refused by peer: %w", codeErrs[code])
	}
	return errors.New("shm: the peer failed the operation")
}

// Termination kinds carried by recTerm.
const (
	termDisconnect = 1 + iota
	termError
)

// errProtocol reports a peer that broke the rules of the shared rings or
// of the handshake.
var errProtocol = errors.New("shm: protocol violation by peer")
