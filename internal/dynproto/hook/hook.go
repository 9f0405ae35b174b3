// Package hook gives the module's simulator (internal/dynproto/sim) and
// model checker (proofs) what they need of the dynproto engine beyond its
// API: an independent copy of an engine, to branch on; a canonical encoding
// of its state, to recognise states already visited; and the deliberate
// fault (mutant) compiled in, if any. None of it is of use to a program that
// runs connections, so dynproto does not export it: dynproto registers it
// here in its init, and, this package being internal, only packages of this
// module can reach it.
//
// Since dynproto imports this package, this package cannot name dynproto's
// Engine type: Register and Engine take it as a type parameter. Every
// package that reads what is registered here also imports dynproto, whose
// init has therefore run before that package's code.
package hook

import "fmt"

// Ops are the operations on an engine of type E that dynproto keeps out of
// its API.
type Ops[E any] struct {
	// Clone returns an independent copy of e, sharing no mutable state
	// with it.
	Clone func(e *E) *E
	// AppendKey appends a canonical encoding of e's state to b: two
	// engines with the same configuration behave identically from then on
	// if and only if their keys are equal (statistics excluded).
	AppendKey func(e *E, b []byte) []byte
	// GrantFrames gives e as many frame credits as its peer has frame
	// buffers. Only for a copy made to probe what the engine would do:
	// the simulation asks a copy which ADVERT it would send, whether or
	// not it holds a credit now.
	GrantFrames func(e *E)
}

var ops any

// Register records dynproto's operations; dynproto calls it in its init.
func Register[E any](o Ops[E]) { ops = o }

// Engine returns the operations registered for engines of type E. It
// panics if none were: the program does not import dynproto.
func Engine[E any]() Ops[E] {
	o, ok := ops.(Ops[E])
	if !ok {
		panic(fmt.Sprintf("hook: no engine operations registered for %T", (*E)(nil)))
	}
	return o
}

// Mutant describes one deliberate fault that dynproto can be built with.
type Mutant struct {
	Tag         string // the build tag that switches it on
	Description string
}

// Set by dynproto's init.
var (
	// Active names the mutant compiled into this build ("" in every
	// normal build, where no fault exists).
	Active string
	// Mutants lists every mutant, in the order docs/proofs.md presents
	// them.
	Mutants []Mutant
)
