// Package proofs is an explicit-state model checker for the dynproto engine.
//
// It drives two real dynproto engines, through the world of the module's
// internal/dynproto/sim, along every interleaving of application posts,
// copies, frame deliveries and write completions, breadth first from the
// initial state, and checks on every step and state:
//
//   - safety, as the simulation checks it: the receiver gets exactly the sent
//     stream, in order, each unit once; no direct write lands outside an
//     advertised buffer or in a recv filled from the stream buffer; the
//     stream buffer is never overrun; phases never decrease; sends complete
//     once with their full length; neither engine reports a protocol error;
//   - liveness: in every state with no move enabled, every send has
//     completed and every unit sent has been delivered; and the state graph
//     has no cycle, so that every execution reaches such a state;
//   - the efficiency invariant: a receiver that is caught up would advertise
//     its next recv at the next unit to deliver, in a phase not before the
//     sender's.
//
// What is checked is computed from the simulation (the units actually sent
// and delivered, the phases counted from the start of each stream with the
// simulation's own arithmetic), not from the bookkeeping of the engines
// being checked.
//
// Because the search is breadth first, the first violation found comes with
// a shortest trace. Traces have a text form (Trace) and are replayed with
// Replay. Check is safe for concurrent use on distinct Specs; its own
// goroutines have all returned when it returns.
//
// The tests of this package run bounded configurations (see
// docs/proofs.md), and, when the test binary is built with a mutant tag
// (go test -tags mut_nophasejump ...), hunt for that mutant's counterexample.
package proofs
