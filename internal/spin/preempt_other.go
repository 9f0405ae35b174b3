//go:build !unix

package spin

// preemptions is not known here: spins are never cut.
func preemptions() (int64, bool) { return 0, false }
