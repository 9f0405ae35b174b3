//go:build linux

package shm_test

import "os"

func osMkdirTemp() (string, error) { return os.MkdirTemp("", "shm") }
func osRemoveAll(dir string)       { os.RemoveAll(dir) }
