package spin

import "golang.org/x/sys/unix"

// runnable is the number of threads the kernel has runnable now, the
// caller included: the fourth field of /proc/loadavg ("1.2 0.9 0.7 3/245
// 6789"), up to its slash. The file is opened for each reading (at most
// one per window), so that the process keeps no descriptor for it.
func runnable() (int64, bool) {
	fd, err := unix.Open("/proc/loadavg", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, false
	}
	var buf [128]byte
	n, err := unix.Read(fd, buf[:])
	unix.Close(fd)
	if err != nil || n <= 0 {
		return 0, false
	}
	return parseRunnable(buf[:n])
}
