//go:build !mut_noleavedirect

package mut

// NoLeaveDirect, when on (build tag mut_noleavedirect), makes the receiver stays in its direct phase when an indirect transfer arrives.
const NoLeaveDirect = false
