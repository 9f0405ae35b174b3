package spin

import (
	"os"
	"sync"
)

// loadavg is /proc/loadavg, opened once, and the buffer it is read into:
// only the detector's sampler reads it, one goroutine at a time.
var loadavg struct {
	once sync.Once
	f    *os.File
	buf  [128]byte
}

// runnable is the number of threads the kernel has runnable now, the
// caller included: the fourth field of /proc/loadavg ("1.2 0.9 0.7 3/245
// 6789"), up to its slash. One goroutine at a time calls it.
func runnable() (int64, bool) {
	loadavg.once.Do(func() { loadavg.f, _ = os.Open("/proc/loadavg") })
	if loadavg.f == nil {
		return 0, false
	}
	n, err := loadavg.f.ReadAt(loadavg.buf[:], 0)
	if n == 0 && err != nil {
		return 0, false
	}
	return parseRunnable(loadavg.buf[:n])
}
