package inproc

import (
	"errors"
	"testing"

	"github.com/exsgo/exs/verbs"
)

// FuzzParse: an address is accepted exactly when it is "inproc:" and a
// non-empty name, which parse returns; anything else is ErrInvalid.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"inproc:a", "inproc:", "inproc", "shm:/x", "", "inproc:inproc:", "INPROC:a", "inproc:\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		name, err := parse(s)
		want := len(s) > len(Scheme) && s[:len(Scheme)] == Scheme
		if (err == nil) != want || (err == nil && Scheme+name != s) {
			t.Fatalf("parse(%q) = %q, %v", s, name, err)
		}
		if err != nil && !errors.Is(err, verbs.ErrInvalid) {
			t.Fatalf("parse(%q): %v does not match ErrInvalid", s, err)
		}
	})
}
