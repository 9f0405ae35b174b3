//go:build !linux

package exs

import (
	"fmt"
	"os"
)

// dupFile fails: Sendfile duplicates the file's descriptor with fcntl,
// which this build does not use.
func dupFile(f *os.File) (*os.File, error) {
	return nil, fmt.Errorf("%w: sendfile is provided on Linux only", ErrInvalid)
}
