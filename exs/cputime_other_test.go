//go:build !unix

package exs_test

import "time"

// processCPU is not known here.
func processCPU() time.Duration { return -1 }
