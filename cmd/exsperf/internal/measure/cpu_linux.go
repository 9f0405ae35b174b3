package measure

import (
	"time"

	"golang.org/x/sys/unix"
)

// CPUAccounting says how CPU time is measured on this platform.
const CPUAccounting = "getrusage (RUSAGE_SELF, RUSAGE_THREAD)"

// processCPU returns the user plus system CPU time the whole process has used
// (getrusage RUSAGE_SELF), or -1 if it is unavailable.
func processCPU() time.Duration { return rusage(unix.RUSAGE_SELF) }

// threadCPU returns the user plus system CPU time the calling OS thread has
// used (getrusage RUSAGE_THREAD), or -1 if it is unavailable. The caller must
// hold its thread with runtime.LockOSThread for the figure to mean anything.
func threadCPU() time.Duration { return rusage(unix.RUSAGE_THREAD) }

func rusage(who int) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(who, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pinThread binds the calling thread to CPU cpu; the caller has locked its
// goroutine to the thread.
func pinThread(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	return unix.SchedSetaffinity(0, &set)
}
