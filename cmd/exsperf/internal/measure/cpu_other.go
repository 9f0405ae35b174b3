//go:build !linux

package measure

import (
	"errors"
	"time"
)

// CPUAccounting says how CPU time is measured on this platform.
const CPUAccounting = "unavailable on this platform"

func processCPU() time.Duration { return -1 }

func threadCPU() time.Duration { return -1 }

// pinThread cannot bind threads to CPUs on this platform.
func pinThread(int) error { return errors.ErrUnsupported }
