package dynproto

import "github.com/exsgo/exs/dynproto/internal/mut"

// ActiveMutant names the deliberate fault compiled into this build with a
// mut_* build tag, for the model checker in proofs/ to know which fault it is
// hunting. It is "" in every normal build, where no fault exists.
func ActiveMutant() string { return mut.Active }

// Mutants lists the build tags of every deliberate fault, each with a
// description.
func Mutants() [][2]string {
	out := make([][2]string, len(mut.All))
	for i, m := range mut.All {
		out[i] = [2]string{m.Tag, m.Description}
	}
	return out
}
