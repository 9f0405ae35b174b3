//go:build unix

package spin

import "golang.org/x/sys/unix"

// preemptions is the process's count of involuntary context switches.
func preemptions() (int64, bool) {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0, false
	}
	return int64(ru.Nivcsw), true
}
