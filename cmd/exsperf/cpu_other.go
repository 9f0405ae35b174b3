//go:build !linux

package main

import (
	"errors"
	"time"
)

const cpuAccounting = "unavailable on this platform"

func processCPU() time.Duration { return -1 }

func threadCPU() time.Duration { return -1 }

// pinThread cannot bind threads to CPUs on this platform.
func pinThread(int) error { return errors.ErrUnsupported }
