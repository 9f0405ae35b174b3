//go:build mut_noleavedirect

package mut

// NoLeaveDirect is on: the receiver stays in its direct phase when an indirect transfer arrives.
const NoLeaveDirect = true

// Active names the mutant compiled in.
const Active = "mut_noleavedirect"
