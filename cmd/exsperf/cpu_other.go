//go:build !linux

package main

import "time"

const cpuAccounting = "unavailable on this platform"

func processCPU() time.Duration { return -1 }

func threadCPU() time.Duration { return -1 }
