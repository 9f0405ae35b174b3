package mreg

import (
	"strconv"
	"strings"
)

// Access is a set of rights on a region. Local read is always granted, so
// the zero Access means "local read only". It is a plain value, safe to copy
// and to use concurrently.
type Access uint32

// The rights a region may grant. They follow the access flags of verbs.
const (
	// LocalWrite allows local writes into the region: a RECV's scatter
	// list, the sink of an RDMA READ.
	LocalWrite Access = 1 << iota
	// RemoteRead allows peers to RDMA READ from the region.
	RemoteRead
	// RemoteWrite allows peers to RDMA WRITE into the region. As in verbs,
	// it requires LocalWrite: Register refuses it alone.
	RemoteWrite
)

// accessAll holds every defined right.
const accessAll = LocalWrite | RemoteRead | RemoteWrite

// accessRemote holds the rights that need a remote key.
const accessRemote = RemoteRead | RemoteWrite

// String returns the rights joined by "|", such as "LocalWrite|RemoteWrite",
// "LocalRead" for the zero Access, and unknown bits in hexadecimal.
func (a Access) String() string {
	if a == 0 {
		return "LocalRead"
	}
	var parts []string
	for _, f := range [...]struct {
		bit  Access
		name string
	}{
		{LocalWrite, "LocalWrite"},
		{RemoteRead, "RemoteRead"},
		{RemoteWrite, "RemoteWrite"},
	} {
		if a&f.bit != 0 {
			parts = append(parts, f.name)
		}
	}
	if rest := a &^ accessAll; rest != 0 {
		parts = append(parts, "0x"+strconv.FormatUint(uint64(rest), 16))
	}
	return strings.Join(parts, "|")
}

// Key names a region: its local key (lkey) or its remote key (rkey). It is
// 32 bits wide, the width of an iWARP STag. The zero Key is never issued, so
// it is always invalid.
type Key uint32

// String returns the key in hexadecimal, as STags are usually printed.
func (k Key) String() string {
	return "0x" + strconv.FormatUint(uint64(k), 16)
}
