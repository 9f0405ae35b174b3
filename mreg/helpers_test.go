package mreg_test

import (
	"errors"
	"testing"

	"github.com/exsgo/exs/mreg"
)

// errName names err by the sentinel it matches, so that results can be
// compared with cmp.Diff.
func errName(err error) string {
	if err == nil {
		return "nil"
	}
	for _, s := range []struct {
		err  error
		name string
	}{
		{mreg.ErrInvalid, "ErrInvalid"},
		{mreg.ErrInvalidKey, "ErrInvalidKey"},
		{mreg.ErrBounds, "ErrBounds"},
		{mreg.ErrAccess, "ErrAccess"},
		{mreg.ErrBusy, "ErrBusy"},
		{mreg.ErrDeregistered, "ErrDeregistered"},
		{mreg.ErrTableFull, "ErrTableFull"},
	} {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	return "other: " + err.Error()
}

// mustRegister registers buf or fails the test.
func mustRegister(t testing.TB, tab *mreg.Table, buf []byte, acc mreg.Access) *mreg.Region {
	t.Helper()
	r, err := tab.Register(buf, acc)
	if err != nil {
		t.Fatalf("Register(%d bytes, %v): %v", len(buf), acc, err)
	}
	return r
}

// refs returns r's reference count and closed flag.
func refs(r *mreg.Region) (uint64, bool) { return r.State() }

// panics reports whether f panics.
func panics(f func()) (p bool) {
	defer func() {
		if recover() != nil {
			p = true
		}
	}()
	f()
	return false
}
