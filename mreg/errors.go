package mreg

import (
	"errors"

	"github.com/exsgo/exs/internal/errno"
)

// Errors returned by this package. Compare with errors.Is: functions that
// add context wrap these sentinels with %w.
var (
	// ErrInvalid reports a bad argument: a nil or empty buffer, unknown
	// access bits, RemoteWrite without LocalWrite, a region of another
	// table, a non-positive allocation size, or memory Alloc did not return.
	// It is the invalid-argument error every layer of exs shares, and it
	// matches syscall.EINVAL.
	ErrInvalid error = errno.Invalid

	// ErrInvalidKey reports that no live region has the key: it was forged,
	// or its region was deregistered.
	ErrInvalidKey = errors.New("invalid memory key")

	// ErrBounds reports an address range that does not lie inside the
	// region, including one whose end overflows uint64.
	ErrBounds = errors.New("address range outside memory region")

	// ErrAccess reports that the region lacks a requested right, or that a
	// local key was used for remote access or a remote key for local access.
	ErrAccess = errors.New("memory region access denied")

	// ErrBusy reports a Deregister refused because references to the
	// region are held. The region stays registered and usable.
	ErrBusy = errors.New("memory region in use")

	// ErrDeregistered reports a region that was already deregistered.
	ErrDeregistered = errors.New("memory region deregistered")

	// ErrTableFull reports that the table holds MaxRegions live regions.
	ErrTableFull = errors.New("memory registration table full")
)
