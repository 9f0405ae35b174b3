// Package mut holds the deliberate faults ("mutants") that proofs/ compiles into the
// dynproto engine to show that its model checker catches each of them.
//
// Each mutant is a boolean constant that is false in every normal build and true only
// when the test binary is built with the mutant's build tag, for example
//
//	go test -tags mut_nophasejump -run TestMutant ./proofs/
//
// Because the switches are constants, the faulty branches are removed by the compiler
// from normal builds: the engine that runs in production is exactly the engine that the
// checker explores, and a mutant alters that real code path rather than a copy of it.
// At most one mutant tag may be set at a time; Active names it ("" when none is).
package mut
