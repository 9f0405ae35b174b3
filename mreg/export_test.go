package mreg

// Hooks for the external tests in package mreg_test.

const (
	SlotBits  = slotBits
	TagBits   = tagBits
	EpochBits = epochBits
)

// State returns r's reference count and whether it is closed.
func (r *Region) State() (refs uint64, closed bool) {
	s := r.state.Load()
	return s / stateRef, s&stateClosed != 0
}

// Slot returns the slot r occupies in its table.
func (r *Region) Slot() uint32 { return r.idx }

// Permute returns the tag the table's key permutation gives x in slot idx
// and the given epoch, drawing the table's secret if needed.
func (t *Table) Permute(idx, epoch, x uint32) uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.keys.block == nil {
		t.keys.init()
		t.fresh = 1
	}
	return t.keys.permute(idx, epoch, x)
}

// SetGen sets the generation of slot idx, which must have been used: the
// next registration in it has generation gen+1.
func (t *Table) SetGen(idx, gen uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.slot(idx, false).gen = gen
}
