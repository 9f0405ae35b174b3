package shm

import "time"

// SetSleepCap sets the longest futex sleep of every receiver.
func SetSleepCap(d time.Duration) { sleepCap = d }
