package mreg

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
)

// Key layout.
//
// A key is 32 bits: the slot index in the low slotBits bits and a tag in the
// high tagBits bits:
//
//	bit 31             14 13            0
//	    [ tag (18 bits)  ][ slot (14 bits)]
//
// Slot 0 is never used, so no key is 0. Each slot has a 32-bit generation
// counter that goes up by one at every registration in that slot. A
// registration of generation g uses two inputs of an 18-bit permutation:
// 2*(g mod 2^17) for the lkey and 2*(g mod 2^17)+1 for the rkey. The
// permutation is a Feistel network whose round function is AES-128 under a
// key drawn from crypto/rand when the table is first used, tweaked by the
// slot and by the epoch g / 2^17. So:
//
//   - the two keys of a region differ;
//   - within an epoch (2^17 registrations of one slot) no tag of the slot
//     repeats, so a deregistered key cannot come back in that slot;
//   - a new epoch draws a fresh, independent permutation, so an old key
//     comes back only by chance, with probability 2^-18: the same as a
//     blind guess;
//   - the generation counter itself wraps after 2^32 registrations of one
//     slot, which brings the epochs back in the same order. Slots are
//     reused first-in first-out, after every never-used slot, so this takes
//     about 2^32 * MaxRegions registrations.
//
// Keys are unpredictable to anyone who does not know the table's AES key, but
// a peer that guesses still has a 2^-18 chance per forged key: the slot is
// visible in the key, only the tag is secret.
const (
	slotBits  = 14
	slotMask  = 1<<slotBits - 1
	tagBits   = 32 - slotBits
	halfBits  = tagBits / 2
	halfMask  = 1<<halfBits - 1
	epochBits = tagBits - 1 // generations per epoch: 2^epochBits
	epochMask = 1<<epochBits - 1

	// feistelRounds is the number of Feistel rounds, as in NIST FF1.
	feistelRounds = 10
)

// MaxRegions is the capacity of a Table: the number of regions it can hold
// registered at once, 16383 (2^14 slots, of which slot 0 is reserved so that
// no key is 0).
const MaxRegions = 1<<slotBits - 1

// keyGen derives region keys. It is not safe for concurrent use: the Table
// uses it under its mutex.
type keyGen struct {
	block   cipher.Block
	in, out [aes.BlockSize]byte // scratch, kept here to avoid allocation
}

// init draws a fresh AES key from crypto/rand.
func (g *keyGen) init() {
	var k [16]byte
	rand.Read(k[:]) // never returns an error; it aborts the program instead
	b, err := aes.NewCipher(k[:])
	if err != nil {
		panic("mreg: " + err.Error()) // impossible: the key size is valid
	}
	g.block = b
}

// keys returns the lkey and the rkey of the registration of generation gen
// in slot idx.
func (g *keyGen) keys(idx, gen uint32) (lkey, rkey Key) {
	epoch := gen >> epochBits
	x := (gen & epochMask) << 1
	lkey = Key(g.permute(idx, epoch, x)<<slotBits | idx)
	rkey = Key(g.permute(idx, epoch, x|1)<<slotBits | idx)
	return lkey, rkey
}

// permute maps x (below 2^tagBits) to a tag through the Feistel network
// keyed by the table's AES key and tweaked by (idx, epoch). For fixed idx
// and epoch it is a permutation of [0, 2^tagBits).
func (g *keyGen) permute(idx, epoch, x uint32) uint32 {
	binary.LittleEndian.PutUint32(g.in[4:], idx)
	binary.LittleEndian.PutUint32(g.in[8:], epoch)
	l, r := x>>halfBits&halfMask, x&halfMask
	for round := range feistelRounds {
		g.in[0] = byte(round)
		binary.LittleEndian.PutUint32(g.in[12:], r)
		g.block.Encrypt(g.out[:], g.in[:])
		l, r = r, (l^binary.LittleEndian.Uint32(g.out[:]))&halfMask
	}
	return l<<halfBits | r
}
