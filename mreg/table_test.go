package mreg_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/exsgo/exs/mreg"
	"github.com/google/go-cmp/cmp"
)

func TestAccessString(t *testing.T) {
	got := map[mreg.Access]string{}
	for _, a := range []mreg.Access{0, mreg.LocalWrite, mreg.RemoteRead, mreg.LocalWrite | mreg.RemoteWrite,
		mreg.LocalWrite | mreg.RemoteRead | mreg.RemoteWrite, 1 << 4, mreg.RemoteRead | 1<<5} {
		got[a] = a.String()
	}
	want := map[mreg.Access]string{
		0:                                  "LocalRead",
		mreg.LocalWrite:                    "LocalWrite",
		mreg.RemoteRead:                    "RemoteRead",
		mreg.LocalWrite | mreg.RemoteWrite: "LocalWrite|RemoteWrite",
		mreg.LocalWrite | mreg.RemoteRead | mreg.RemoteWrite: "LocalWrite|RemoteRead|RemoteWrite",
		1 << 4:                 "0x10",
		mreg.RemoteRead | 1<<5: "RemoteRead|0x20",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Access.String (-want +got):\n%s", diff)
	}
}

func TestRegister(t *testing.T) {
	type result struct {
		Err    string
		Len    int
		Access mreg.Access
	}
	for _, tc := range []struct {
		name   string
		buf    []byte
		access mreg.Access
		want   result
	}{
		{"nil buffer", nil, mreg.LocalWrite, result{Err: "ErrInvalid"}},
		{"empty buffer", make([]byte, 0, 8), mreg.LocalWrite, result{Err: "ErrInvalid"}},
		{"unknown access bit", make([]byte, 8), 1 << 3, result{Err: "ErrInvalid"}},
		{"high access bit", make([]byte, 8), mreg.LocalWrite | 1<<31, result{Err: "ErrInvalid"}},
		{"RemoteWrite without LocalWrite", make([]byte, 8), mreg.RemoteWrite, result{Err: "ErrInvalid"}},
		{"RemoteWrite|RemoteRead without LocalWrite", make([]byte, 8), mreg.RemoteWrite | mreg.RemoteRead, result{Err: "ErrInvalid"}},
		{"local read only", make([]byte, 8), 0, result{Err: "nil", Len: 8, Access: 0}},
		{"LocalWrite", make([]byte, 1), mreg.LocalWrite, result{Err: "nil", Len: 1, Access: mreg.LocalWrite}},
		{"RemoteRead alone", make([]byte, 8), mreg.RemoteRead, result{Err: "nil", Len: 8, Access: mreg.RemoteRead}},
		{"all rights", make([]byte, 4096), mreg.LocalWrite | mreg.RemoteRead | mreg.RemoteWrite,
			result{Err: "nil", Len: 4096, Access: mreg.LocalWrite | mreg.RemoteRead | mreg.RemoteWrite}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := mreg.NewTable()
			r, err := tab.Register(tc.buf, tc.access)
			got := result{Err: errName(err)}
			if err != nil && strings.Contains(err.Error(), "exs:") {
				t.Errorf("error %q names exs: only the exs package's API names itself", err)
			}
			if r != nil {
				got.Len, got.Access = r.Len(), r.Access()
				if r.LKey() == 0 || r.RKey() == 0 || r.LKey() == r.RKey() {
					t.Errorf("keys lkey=%v rkey=%v: want two distinct non-zero keys", r.LKey(), r.RKey())
				}
				if want := uint64(uintptr(unsafe.Pointer(&tc.buf[0]))); r.Addr() != want {
					t.Errorf("Addr() = %#x, want %#x", r.Addr(), want)
				}
				if b := r.Bytes(); len(b) != len(tc.buf) || &b[0] != &tc.buf[0] {
					t.Errorf("Bytes() is not the registered buffer")
				}
				if tab.Len() != 1 {
					t.Errorf("Len() = %d, want 1", tab.Len())
				}
			} else if err == nil {
				t.Errorf("Register returned a nil region and no error")
			} else if tab.Len() != 0 {
				t.Errorf("Len() = %d after a failed Register, want 0", tab.Len())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Register (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLookup(t *testing.T) {
	const all = mreg.LocalWrite | mreg.RemoteRead | mreg.RemoteWrite
	tab := mreg.NewTable()
	type fixture struct {
		buf []byte
		r   *mreg.Region
	}
	mk := func(n int, acc mreg.Access) fixture {
		buf := make([]byte, n)
		return fixture{buf, mustRegister(t, tab, buf, acc)}
	}
	rw := mk(64, all)             // every right
	ro := mk(32, 0)               // local read only
	rr := mk(16, mreg.RemoteRead) // remote read, no local write
	lw := mk(16, mreg.LocalWrite) // local write, nothing remote
	stale := mk(16, all)          // deregistered below
	staleL, staleR := stale.r.LKey(), stale.r.RKey()
	if err := tab.Deregister(stale.r); err != nil {
		t.Fatal(err)
	}

	// forge changes the tag of a live key, keeping its slot.
	forge := func(k mreg.Key) mreg.Key { return k ^ 1<<mreg.SlotBits }
	// unused is a key whose slot holds no region.
	unused := mreg.Key(123<<mreg.SlotBits | 4000)

	type result struct {
		Err    string
		Region string // which fixture
		Off    uint64 // of the returned slice in the region
		Len    int
		Cap    int
	}
	base := rw.r.Addr()
	names := map[*mreg.Region]string{rw.r: "rw", ro.r: "ro", rr.r: "rr", lw.r: "lw", nil: ""}
	for _, tc := range []struct {
		name   string
		key    mreg.Key
		addr   uint64
		n      uint64
		access mreg.Access
		want   result
	}{
		{"rkey remote write", rw.r.RKey(), base + 8, 16, mreg.RemoteWrite, result{"nil", "rw", 8, 16, 16}},
		{"rkey remote read", rw.r.RKey(), base, 64, mreg.RemoteRead, result{"nil", "rw", 0, 64, 64}},
		{"rkey remote read and write", rw.r.RKey(), base, 1, mreg.RemoteRead | mreg.RemoteWrite, result{"nil", "rw", 0, 1, 1}},
		{"lkey local read", rw.r.LKey(), base + 63, 1, 0, result{"nil", "rw", 63, 1, 1}},
		{"lkey local write", rw.r.LKey(), base, 64, mreg.LocalWrite, result{"nil", "rw", 0, 64, 64}},
		{"lkey local read of read-only region", ro.r.LKey(), ro.r.Addr() + 4, 4, 0, result{"nil", "ro", 4, 4, 4}},
		{"rkey remote read of remote-read region", rr.r.RKey(), rr.r.Addr(), 16, mreg.RemoteRead, result{"nil", "rr", 0, 16, 16}},

		// Keys.
		{"zero key", 0, base, 1, 0, result{Err: "ErrInvalidKey"}},
		{"forged lkey", forge(rw.r.LKey()), base, 1, 0, result{Err: "ErrInvalidKey"}},
		{"forged rkey", forge(rw.r.RKey()), base, 1, mreg.RemoteWrite, result{Err: "ErrInvalidKey"}},
		{"key of empty slot", unused, base, 1, 0, result{Err: "ErrInvalidKey"}},
		{"stale lkey", staleL, stale.r.Addr(), 1, 0, result{Err: "ErrInvalidKey"}},
		{"stale rkey", staleR, stale.r.Addr(), 1, mreg.RemoteWrite, result{Err: "ErrInvalidKey"}},
		{"key of another region with this region's address", ro.r.RKey(), base, 1, mreg.RemoteRead, result{Err: "ErrBounds"}},

		// Bounds, at both ends.
		{"one byte before", rw.r.RKey(), base - 1, 1, mreg.RemoteWrite, result{Err: "ErrBounds"}},
		{"starts before, ends inside", rw.r.RKey(), base - 1, 2, mreg.RemoteWrite, result{Err: "ErrBounds"}},
		{"last byte", rw.r.RKey(), base + 63, 1, mreg.RemoteWrite, result{"nil", "rw", 63, 1, 1}},
		{"one byte past the end", rw.r.RKey(), base + 63, 2, mreg.RemoteWrite, result{Err: "ErrBounds"}},
		{"whole region plus one", rw.r.RKey(), base, 65, mreg.RemoteWrite, result{Err: "ErrBounds"}},
		{"starts at the end", rw.r.RKey(), base + 64, 1, mreg.RemoteWrite, result{Err: "ErrBounds"}},
		{"n == 0 at the start", rw.r.RKey(), base, 0, mreg.RemoteWrite, result{"nil", "rw", 0, 0, 0}},
		{"n == 0 inside", rw.r.RKey(), base + 10, 0, mreg.RemoteWrite, result{"nil", "rw", 10, 0, 0}},
		{"n == 0 at the end", rw.r.RKey(), base + 64, 0, mreg.RemoteWrite, result{"nil", "rw", 64, 0, 0}},
		{"n == 0 past the end", rw.r.RKey(), base + 65, 0, mreg.RemoteWrite, result{Err: "ErrBounds"}},
		{"n == 0 before", rw.r.RKey(), base - 1, 0, mreg.RemoteWrite, result{Err: "ErrBounds"}},
		{"addr+n overflows uint64", rw.r.RKey(), base + 8, math.MaxUint64 - base - 4, mreg.RemoteWrite, result{Err: "ErrBounds"}},
		{"n is MaxUint64", rw.r.RKey(), base, math.MaxUint64, mreg.RemoteWrite, result{Err: "ErrBounds"}},
		{"addr is MaxUint64", rw.r.RKey(), math.MaxUint64, 1, mreg.RemoteWrite, result{Err: "ErrBounds"}},
		{"addr 0", rw.r.RKey(), 0, 1, mreg.RemoteWrite, result{Err: "ErrBounds"}},

		// Rights and kinds of key.
		{"lkey used for remote write", rw.r.LKey(), base, 1, mreg.RemoteWrite, result{Err: "ErrAccess"}},
		{"lkey used for remote read", rw.r.LKey(), base, 1, mreg.RemoteRead, result{Err: "ErrAccess"}},
		{"rkey used for local read", rw.r.RKey(), base, 1, 0, result{Err: "ErrAccess"}},
		{"rkey used for local write", rw.r.RKey(), base, 1, mreg.LocalWrite, result{Err: "ErrAccess"}},
		{"local write to read-only region", ro.r.LKey(), ro.r.Addr(), 1, mreg.LocalWrite, result{Err: "ErrAccess"}},
		{"remote read of read-only region", ro.r.RKey(), ro.r.Addr(), 1, mreg.RemoteRead, result{Err: "ErrAccess"}},
		{"remote write to remote-read region", rr.r.RKey(), rr.r.Addr(), 1, mreg.RemoteWrite, result{Err: "ErrAccess"}},
		{"local write to remote-read region", rr.r.LKey(), rr.r.Addr(), 1, mreg.LocalWrite, result{Err: "ErrAccess"}},
		{"remote read of local-write region", lw.r.RKey(), lw.r.Addr(), 1, mreg.RemoteRead, result{Err: "ErrAccess"}},
		{"remote write to local-write region", lw.r.RKey(), lw.r.Addr(), 1, mreg.RemoteWrite, result{Err: "ErrAccess"}},
		{"remote write and local write", rw.r.RKey(), base, 1, mreg.RemoteWrite | mreg.LocalWrite, result{"nil", "rw", 0, 1, 1}},
		{"unknown access bit", rw.r.RKey(), base, 1, 1 << 3, result{Err: "ErrInvalid"}},

		// Order of checks: key, bounds, rights.
		{"forged key and bad bounds", forge(rw.r.RKey()), base - 1, 1, mreg.RemoteWrite, result{Err: "ErrInvalidKey"}},
		{"stale key and missing right", staleL, stale.r.Addr(), 1, mreg.RemoteWrite, result{Err: "ErrInvalidKey"}},
		{"bad bounds and wrong kind of key", rw.r.LKey(), base + 64, 1, mreg.RemoteWrite, result{Err: "ErrBounds"}},
		{"bad bounds and missing right", ro.r.LKey(), ro.r.Addr() - 1, 1, mreg.LocalWrite, result{Err: "ErrBounds"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, b, err := tab.Lookup(tc.key, tc.addr, tc.n, tc.access)
			got := result{Err: errName(err), Region: names[r]}
			if r != nil {
				got.Off = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) - r.Addr()
				if cap(b) == 0 {
					// A zero-capacity slice may point anywhere; use the address asked.
					got.Off = tc.addr - r.Addr()
				}
				got.Len, got.Cap = len(b), cap(b)
				if n, closed := refs(r); n != 1 || closed {
					t.Errorf("after Lookup: refs %d closed %v, want 1 false", n, closed)
				}
				r.Release()
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Lookup(%v, %#x, %d, %v) (-want +got):\n%s", tc.key, tc.addr, tc.n, tc.access, diff)
			}
			for _, f := range []fixture{rw, ro, rr, lw} {
				if n, _ := refs(f.r); n != 0 {
					t.Errorf("region %v holds %d references after the case, want 0", f.r.LKey(), n)
				}
			}
		})
	}
}

// TestLookupSliceAliases checks that the slice Lookup returns is the
// registered memory itself.
func TestLookupSliceAliases(t *testing.T) {
	tab := mreg.NewTable()
	buf := make([]byte, 32)
	r := mustRegister(t, tab, buf, mreg.LocalWrite|mreg.RemoteWrite)
	_, b, err := tab.Lookup(r.RKey(), r.Addr()+4, 3, mreg.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	copy(b, "abc")
	r.Release()
	want := append(make([]byte, 4), "abc"...)
	want = append(want, make([]byte, 25)...)
	if diff := cmp.Diff(want, buf); diff != "" {
		t.Errorf("buffer after a write through Lookup's slice (-want +got):\n%s", diff)
	}
}

func TestDeregister(t *testing.T) {
	tab := mreg.NewTable()
	other := mreg.NewTable()
	buf := make([]byte, 64)
	r := mustRegister(t, tab, buf, mreg.LocalWrite|mreg.RemoteWrite)
	lkey, rkey := r.LKey(), r.RKey()

	type step struct {
		Op   string
		Err  string
		Refs uint64
		Dead bool
	}
	var got []step
	do := func(op string, err error) {
		n, closed := refs(r)
		got = append(got, step{op, errName(err), n, closed})
	}
	do("Deregister(nil)", tab.Deregister(nil))
	do("other.Deregister", other.Deregister(r))
	do("Acquire", r.Acquire())
	do("Deregister while referenced", tab.Deregister(r))
	_, _, err := tab.Lookup(rkey, r.Addr(), 64, mreg.RemoteWrite)
	do("Lookup while Deregister refused", err)
	r.Release()
	do("Release", nil)
	r.Release()
	do("Release", nil)
	do("Deregister", tab.Deregister(r))
	do("Deregister again", tab.Deregister(r))
	do("Acquire after Deregister", r.Acquire())
	_, _, err = tab.Lookup(rkey, r.Addr(), 1, mreg.RemoteWrite)
	do("Lookup rkey after Deregister", err)
	_, _, err = tab.Lookup(lkey, r.Addr(), 1, 0)
	do("Lookup lkey after Deregister", err)
	_, err = r.Slice(r.Addr(), 1)
	do("Slice after Deregister", err)

	want := []step{
		{"Deregister(nil)", "ErrInvalid", 0, false},
		{"other.Deregister", "ErrInvalid", 0, false},
		{"Acquire", "nil", 1, false},
		{"Deregister while referenced", "ErrBusy", 1, false},
		{"Lookup while Deregister refused", "nil", 2, false},
		{"Release", "nil", 1, false},
		{"Release", "nil", 0, false},
		{"Deregister", "nil", 0, true},
		{"Deregister again", "ErrDeregistered", 0, true},
		{"Acquire after Deregister", "ErrDeregistered", 0, true},
		{"Lookup rkey after Deregister", "ErrInvalidKey", 0, true},
		{"Lookup lkey after Deregister", "ErrInvalidKey", 0, true},
		{"Slice after Deregister", "ErrDeregistered", 0, true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	if r.Bytes() != nil {
		t.Errorf("Bytes() after Deregister is not nil")
	}
	if r.LKey() != lkey || r.RKey() != rkey || r.Len() != 64 {
		t.Errorf("LKey, RKey or Len changed by Deregister")
	}
	if tab.Len() != 0 || other.Len() != 0 {
		t.Errorf("Len() = %d, %d; want 0, 0", tab.Len(), other.Len())
	}
	if !panics(r.Release) {
		t.Errorf("Release of a deregistered region did not panic")
	}
}

// TestRegionStates gives each transition of the region's lifetime its own
// row: the state before, the operation, the result and the state after.
func TestRegionStates(t *testing.T) {
	type state struct {
		Refs   uint64
		Closed bool
	}
	type result struct {
		Err   string
		Panic bool
		After state
	}
	ops := map[string]func(*mreg.Table, *mreg.Region) error{
		"Acquire":    func(_ *mreg.Table, r *mreg.Region) error { return r.Acquire() },
		"Release":    func(_ *mreg.Table, r *mreg.Region) error { r.Release(); return nil },
		"Deregister": func(tab *mreg.Table, r *mreg.Region) error { return tab.Deregister(r) },
		"Lookup": func(tab *mreg.Table, r *mreg.Region) error {
			_, _, err := tab.Lookup(r.RKey(), r.Addr(), 1, mreg.RemoteRead)
			return err
		},
	}
	for _, row := range []struct {
		from state
		op   string
		want result
	}{
		{state{0, false}, "Acquire", result{"nil", false, state{1, false}}},
		{state{1, false}, "Acquire", result{"nil", false, state{2, false}}},
		{state{0, false}, "Lookup", result{"nil", false, state{1, false}}},
		{state{2, false}, "Lookup", result{"nil", false, state{3, false}}},
		{state{1, false}, "Release", result{"nil", false, state{0, false}}},
		{state{2, false}, "Release", result{"nil", false, state{1, false}}},
		{state{0, false}, "Release", result{"nil", true, state{0, false}}},
		{state{0, false}, "Deregister", result{"nil", false, state{0, true}}},
		{state{1, false}, "Deregister", result{"ErrBusy", false, state{1, false}}},
		{state{0, true}, "Acquire", result{"ErrDeregistered", false, state{0, true}}},
		{state{0, true}, "Lookup", result{"ErrInvalidKey", false, state{0, true}}},
		{state{0, true}, "Release", result{"nil", true, state{0, true}}},
		{state{0, true}, "Deregister", result{"ErrDeregistered", false, state{0, true}}},
	} {
		t.Run(row.op+"/from", func(t *testing.T) {
			tab := mreg.NewTable()
			r := mustRegister(t, tab, make([]byte, 8), mreg.RemoteRead)
			for range row.from.Refs {
				if err := r.Acquire(); err != nil {
					t.Fatal(err)
				}
			}
			if row.from.Closed {
				if err := tab.Deregister(r); err != nil {
					t.Fatal(err)
				}
			}
			var err error
			got := result{Panic: panics(func() { err = ops[row.op](tab, r) })}
			got.Err = errName(err)
			got.After.Refs, got.After.Closed = refs(r)
			if diff := cmp.Diff(row.want, got); diff != "" {
				t.Errorf("%+v %s (-want +got):\n%s", row.from, row.op, diff)
			}
		})
	}
}

func TestSlice(t *testing.T) {
	tab := mreg.NewTable()
	buf := make([]byte, 16)
	r := mustRegister(t, tab, buf, 0) // Slice ignores rights
	type result struct {
		Err      string
		Off      int
		Len, Cap int
	}
	for _, tc := range []struct {
		name string
		addr uint64
		n    uint64
		want result
	}{
		{"whole", r.Addr(), 16, result{"nil", 0, 16, 16}},
		{"middle", r.Addr() + 3, 5, result{"nil", 3, 5, 5}},
		{"empty at end", r.Addr() + 16, 0, result{"nil", 16, 0, 0}},
		{"before", r.Addr() - 1, 1, result{Err: "ErrBounds"}},
		{"past end", r.Addr() + 15, 2, result{Err: "ErrBounds"}},
		{"overflow", r.Addr() + 1, math.MaxUint64, result{Err: "ErrBounds"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := r.Slice(tc.addr, tc.n)
			got := result{Err: errName(err)}
			if err == nil {
				got.Off = int(tc.addr - r.Addr())
				got.Len, got.Cap = len(b), cap(b)
				if len(b) > 0 && &b[0] != &buf[got.Off] {
					t.Errorf("slice does not alias the buffer at offset %d", got.Off)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Slice(%#x, %d) (-want +got):\n%s", tc.addr, tc.n, diff)
			}
		})
	}
}

// TestTableFullAndSlotReuse fills a table, checks ErrTableFull, and checks
// that reusing a slot does not revive its old keys.
func TestTableFullAndSlotReuse(t *testing.T) {
	tab := mreg.NewTable()
	buf := make([]byte, 8)
	regions := make([]*mreg.Region, 0, mreg.MaxRegions)
	seen := make(map[mreg.Key]bool, 2*mreg.MaxRegions)
	for range mreg.MaxRegions {
		r := mustRegister(t, tab, buf, mreg.LocalWrite|mreg.RemoteWrite)
		for _, k := range []mreg.Key{r.LKey(), r.RKey()} {
			if k == 0 || uint32(k)&(1<<mreg.SlotBits-1) == 0 {
				t.Fatalf("key %v: zero or in slot 0", k)
			}
			if seen[k] {
				t.Fatalf("key %v issued twice", k)
			}
			seen[k] = true
		}
		regions = append(regions, r)
	}
	if tab.Len() != mreg.MaxRegions {
		t.Fatalf("Len() = %d, want %d", tab.Len(), mreg.MaxRegions)
	}
	if _, err := tab.Register(buf, 0); !errors.Is(err, mreg.ErrTableFull) {
		t.Fatalf("Register on a full table: %v, want ErrTableFull", err)
	}

	// Free one slot and reuse it many times: only it is free, so every
	// registration lands in it.
	old := regions[100]
	slot := old.Slot()
	if err := tab.Deregister(old); err != nil {
		t.Fatal(err)
	}
	dead := []mreg.Key{old.LKey(), old.RKey()}
	n := 3000
	if testing.Short() {
		n = 300
	}
	for i := range n {
		r := mustRegister(t, tab, buf, mreg.LocalWrite|mreg.RemoteWrite)
		if r.Slot() != slot {
			t.Fatalf("registration %d went to slot %d, want %d", i, r.Slot(), slot)
		}
		for _, k := range dead {
			if _, _, err := tab.Lookup(k, r.Addr(), 1, 0); !errors.Is(err, mreg.ErrInvalidKey) {
				t.Fatalf("stale key %v after %d reuses: %v, want ErrInvalidKey", k, i+1, err)
			}
			if _, _, err := tab.Lookup(k, r.Addr(), 1, mreg.RemoteWrite); !errors.Is(err, mreg.ErrInvalidKey) {
				t.Fatalf("stale key %v after %d reuses: %v, want ErrInvalidKey", k, i+1, err)
			}
		}
		for _, k := range []mreg.Key{r.LKey(), r.RKey()} {
			if seen[k] {
				t.Fatalf("key %v revived by reuse %d of slot %d", k, i+1, slot)
			}
			seen[k] = true
		}
		if err := tab.Deregister(r); err != nil {
			t.Fatal(err)
		}
		dead = append(dead, r.LKey(), r.RKey())
	}
	for _, r := range regions {
		if r == old {
			continue
		}
		if err := tab.Deregister(r); err != nil {
			t.Fatal(err)
		}
	}
	if tab.Len() != 0 {
		t.Fatalf("Len() = %d after deregistering everything", tab.Len())
	}
}

// TestSlotsReusedOldestFirst checks that a freed slot waits for the others.
func TestSlotsReusedOldestFirst(t *testing.T) {
	tab := mreg.NewTable()
	buf := make([]byte, 8)
	var regions []*mreg.Region
	for range mreg.MaxRegions {
		regions = append(regions, mustRegister(t, tab, buf, 0))
	}
	order := []int{7, 3, 900, 5}
	for _, i := range order {
		if err := tab.Deregister(regions[i]); err != nil {
			t.Fatal(err)
		}
	}
	var got, want []uint32
	for _, i := range order {
		want = append(want, regions[i].Slot())
		got = append(got, mustRegister(t, tab, buf, 0).Slot())
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("slots reused (-want +got):\n%s", diff)
	}
}

// TestPermutation checks that the key permutation is a bijection of the tag
// space for a few slots and epochs, and that it depends on the slot, the
// epoch and the table.
func TestPermutation(t *testing.T) {
	tab, other := mreg.NewTable(), mreg.NewTable()
	size := uint32(1) << mreg.TagBits
	perm := func(tab *mreg.Table, idx, epoch uint32) []uint32 {
		p := make([]uint32, size)
		for x := range size {
			p[x] = tab.Permute(idx, epoch, x)
		}
		return p
	}
	cases := [][2]uint32{{1, 0}, {1, 1}, {2, 0}}
	if !testing.Short() {
		cases = append(cases, [2]uint32{mreg.MaxRegions, 1<<(32-mreg.EpochBits) - 1})
	}
	var perms [][]uint32
	for _, c := range cases {
		p := perm(tab, c[0], c[1])
		hit := make([]bool, size)
		for x, y := range p {
			if y >= size {
				t.Fatalf("slot %d epoch %d: tag %#x of %#x is out of range", c[0], c[1], y, x)
			}
			if hit[y] {
				t.Fatalf("slot %d epoch %d: tag %#x issued twice", c[0], c[1], y)
			}
			hit[y] = true
		}
		perms = append(perms, p)
	}
	if slices.Equal(perms[0], perms[1]) || slices.Equal(perms[0], perms[2]) {
		t.Errorf("the permutation does not depend on the epoch or the slot")
	}
	if slices.Equal(perms[0], perm(other, 1, 0)) {
		t.Errorf("two tables share a permutation")
	}
}

// TestKeysFollowGeneration checks the keys of registrations across an epoch
// boundary against the permutation: the lkey and rkey of generation g are the
// tags of 2*(g mod 2^17) and 2*(g mod 2^17)+1 in epoch g/2^17.
func TestKeysFollowGeneration(t *testing.T) {
	tab := mreg.NewTable()
	buf := make([]byte, 8)
	r := mustRegister(t, tab, buf, 0)
	idx := r.Slot()
	if err := tab.Deregister(r); err != nil {
		t.Fatal(err)
	}
	// Fill every other slot so that idx is reused.
	for range mreg.MaxRegions - 1 {
		mustRegister(t, tab, buf, 0)
	}
	for _, start := range []uint32{1<<mreg.EpochBits - 3, 3<<mreg.EpochBits - 2, math.MaxUint32 - 2} {
		tab.SetGen(idx, start)
		type keys struct{ L, R mreg.Key }
		var got, want []keys
		for g := start + 1; g != start+6; g++ {
			r := mustRegister(t, tab, buf, 0)
			if r.Slot() != idx {
				t.Fatalf("slot %d, want %d", r.Slot(), idx)
			}
			got = append(got, keys{r.LKey(), r.RKey()})
			epoch, x := g>>mreg.EpochBits, g&(1<<mreg.EpochBits-1)*2
			want = append(want, keys{
				mreg.Key(tab.Permute(idx, epoch, x)<<mreg.SlotBits | idx),
				mreg.Key(tab.Permute(idx, epoch, x+1)<<mreg.SlotBits | idx),
			})
			if err := tab.Deregister(r); err != nil {
				t.Fatal(err)
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("keys from generation %d (-want +got):\n%s", start+1, diff)
		}
	}
}

// TestZeroTable checks that the zero Table is usable.
func TestZeroTable(t *testing.T) {
	var tab mreg.Table
	if _, _, err := tab.Lookup(1, 0, 0, 0); !errors.Is(err, mreg.ErrInvalidKey) {
		t.Fatalf("Lookup on a zero Table: %v", err)
	}
	r := mustRegister(t, &tab, make([]byte, 4), 0)
	if _, _, err := tab.Lookup(r.LKey(), r.Addr(), 4, 0); err != nil {
		t.Fatal(err)
	}
	r.Release()
	if err := tab.Deregister(r); err != nil {
		t.Fatal(err)
	}
}
