package verbs

import (
	"fmt"
	"sync"

	"github.com/exsgo/exs/mreg"
)

// PD is a protection domain: it owns a table of memory regions
// (mreg.Table), and only queue pairs created in it may use them, locally
// through lkeys and remotely, for their peers, through rkeys. It is safe
// for concurrent use. The zero PD is not usable: call Device.AllocPD.
type PD struct {
	dev   *Device
	table *mreg.Table

	mu     sync.Mutex
	closed bool
	nqp    int // live queue pairs
	nmr    int // live memory regions
}

func newPD(d *Device) *PD {
	return &PD{dev: d, table: mreg.NewTable()}
}

// Table returns the protection domain's registration table, against which
// incoming one-sided operations are checked. Register memory through
// RegisterMR, not through the table.
func (pd *PD) Table() *mreg.Table { return pd.table }

// RegisterMR registers buf with the given rights and returns its memory
// region. Local read is always granted; mreg.RemoteWrite requires
// mreg.LocalWrite. The caller must keep buf valid, and not free it, until
// Deregister succeeds. Errors are those of mreg.Table.Register (ErrInvalid,
// ErrTableFull of package mreg), ErrClosed after Close, and that of the
// provider's RegistrationFilter.
func (pd *PD) RegisterMR(buf []byte, access mreg.Access) (*MR, error) {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.closed {
		return nil, fmt.Errorf("verbs: protection domain: %w", ErrClosed)
	}
	if f := pd.dev.regFilter; f != nil {
		if err := f.FilterRegistration(pd, buf, access); err != nil {
			return nil, err
		}
	}
	r, err := pd.table.Register(buf, access)
	if err != nil {
		return nil, err
	}
	pd.nmr++
	mr := &MR{pd: pd, r: r}
	if o, ok := pd.dev.p.(RegistrationObserver); ok {
		o.MemoryRegistered(pd, mr)
	}
	return mr, nil
}

// Close deallocates the protection domain. It returns ErrBusy while queue
// pairs or memory regions created in it are alive, and ErrClosed the second
// time.
func (pd *PD) Close() error {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	switch {
	case pd.closed:
		return ErrClosed
	case pd.nqp > 0 || pd.nmr > 0:
		return fmt.Errorf("%w: protection domain has %d queue pairs and %d memory regions", ErrBusy, pd.nqp, pd.nmr)
	}
	pd.closed = true
	return nil
}

// MR is a registered memory region. It is safe for concurrent use. Its
// keys and address stay readable after Deregister, but name nothing. The
// zero MR is not usable: call PD.RegisterMR.
type MR struct {
	pd *PD
	r  *mreg.Region
}

// LKey returns the region's local key, for scatter/gather lists.
func (m *MR) LKey() mreg.Key { return m.r.LKey() }

// RKey returns the region's remote key, for peers' one-sided operations.
func (m *MR) RKey() mreg.Key { return m.r.RKey() }

// Addr returns the virtual address of the region's first byte.
func (m *MR) Addr() uint64 { return m.r.Addr() }

// Len returns the length of the region in bytes.
func (m *MR) Len() int { return m.r.Len() }

// Access returns the rights the region was registered with.
func (m *MR) Access() mreg.Access { return m.r.Access() }

// Bytes returns the registered memory, or nil after Deregister.
func (m *MR) Bytes() []byte { return m.r.Bytes() }

// Region returns the underlying registration.
func (m *MR) Region() *mreg.Region { return m.r }

// SGE returns the scatter/gather element for the n bytes at offset off of
// the region. It does not check bounds: an SGE outside the region fails
// when the work request runs (StatusLocalProtectionError).
func (m *MR) SGE(off, n int) SGE {
	return SGE{Addr: m.r.Addr() + uint64(off), Len: uint32(n), LKey: m.r.LKey()}
}

// Deregister removes the registration: its keys die at once and for good.
// It returns mreg.ErrBusy while posted work requests still use the region
// (they hold references until they complete), and mreg.ErrDeregistered the
// second time.
func (m *MR) Deregister() error {
	if err := m.pd.table.Deregister(m.r); err != nil {
		return err
	}
	m.pd.mu.Lock()
	m.pd.nmr--
	m.pd.mu.Unlock()
	if o, ok := m.pd.dev.p.(RegistrationObserver); ok {
		o.MemoryDeregistered(m.pd, m)
	}
	return nil
}
