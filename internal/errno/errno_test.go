package errno

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
)

func TestIs(t *testing.T) {
	other := errors.New("other")
	timeout := NewTimeout("timed out", syscall.ETIMEDOUT, os.ErrDeadlineExceeded)
	both := New("two things", syscall.ECANCELED, other)
	tests := []struct {
		err    error
		target error
		want   bool
	}{
		{Invalid, syscall.EINVAL, true},
		{Invalid, syscall.EBUSY, false},
		{fmt.Errorf("detail: %w", Invalid), Invalid, true},
		{fmt.Errorf("detail: %w", Invalid), syscall.EINVAL, true},
		{Closed, net.ErrClosed, true},
		{Closed, syscall.Errno(0), false},
		{Busy, syscall.EBUSY, true},
		{timeout, os.ErrDeadlineExceeded, true},
		{timeout, syscall.ETIMEDOUT, true},
		{both, other, true},
		{both, syscall.ECANCELED, true},
		{both, Invalid, false},
	}
	for _, tt := range tests {
		if got := errors.Is(tt.err, tt.target); got != tt.want {
			t.Errorf("errors.Is(%v, %v) = %v, want %v", tt.err, tt.target, got, tt.want)
		}
	}
	if !timeout.Timeout() || Invalid.Timeout() {
		t.Errorf("Timeout: %v for a timeout, %v for Invalid", timeout.Timeout(), Invalid.Timeout())
	}
	if Invalid.Errno() != syscall.EINVAL || Closed.Errno() != 0 {
		t.Errorf("Errno: %v, %v", Invalid.Errno(), Closed.Errno())
	}
}
