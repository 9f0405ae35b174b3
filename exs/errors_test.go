package exs_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/exsgo/exs/eventq"
	"github.com/exsgo/exs/exs"
	"github.com/exsgo/exs/verbs"
)

func TestErrorsMatchErrno(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		errno syscall.Errno
	}{
		{"ErrWouldBlock", exs.ErrWouldBlock, syscall.EAGAIN},
		{"ErrBusy", exs.ErrBusy, syscall.EBUSY},
		{"ErrInvalid", exs.ErrInvalid, syscall.EINVAL},
		{"ErrNotConnected", exs.ErrNotConnected, syscall.ENOTCONN},
		{"ErrAccess", exs.ErrAccess, syscall.EACCES},
		{"ErrMismatch", exs.ErrMismatch, syscall.ECONNREFUSED},
		{"ErrCanceled", exs.ErrCanceled, syscall.ECANCELED},
		{"ErrConnReset", exs.ErrConnReset, syscall.ECONNRESET},
		{"ErrConnAborted", exs.ErrConnAborted, syscall.ECONNABORTED},
		{"ErrNotFound", exs.ErrNotFound, syscall.ENOENT},
	}
	for _, tt := range tests {
		wrapped := &exs.OpError{Op: "send", Addr: "inproc:x", Err: fmt.Errorf("%w: detail", tt.err)}
		if !errors.Is(wrapped, tt.errno) || !errors.Is(wrapped, tt.err) {
			t.Errorf("%s: errors.Is(%v, %v) = %v, errors.Is(sentinel) = %v", tt.name, wrapped, tt.errno, errors.Is(wrapped, tt.errno), errors.Is(wrapped, tt.err))
		}
		// The sentinel names no layer; the OpError names exs, once.
		if strings.Contains(tt.err.Error(), "exs") || strings.Count(wrapped.Error(), "exs:") != 1 {
			t.Errorf("%s: message %q, wrapped %q: exs must be named once, by the OpError", tt.name, tt.err, wrapped)
		}
	}
	if exs.ErrClosed != eventq.ErrClosed || exs.ErrClosed != verbs.ErrClosed {
		t.Error("ErrClosed differs from eventq.ErrClosed or verbs.ErrClosed")
	}
	if !errors.Is(exs.ErrTimeout, os.ErrDeadlineExceeded) {
		t.Error("ErrTimeout does not match os.ErrDeadlineExceeded")
	}
}

func TestOpErrorFormat(t *testing.T) {
	tests := []struct {
		err  *exs.OpError
		want string
	}{
		{&exs.OpError{Op: "send", Addr: "inproc:a", Err: exs.ErrConnReset}, "exs: send inproc:a: connection reset by peer"},
		{&exs.OpError{Op: "mregister", Err: fmt.Errorf("%w: empty buffer", exs.ErrInvalid)}, "exs: mregister: invalid argument: empty buffer"},
		{&exs.OpError{Op: "recv", Addr: "inproc:b", Err: syscall.EMSGSIZE}, "exs: recv inproc:b: message too long"},
	}
	var got, want []string
	for _, tt := range tests {
		got = append(got, tt.err.Error())
		want = append(want, tt.want)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
	var timeout interface{ Timeout() bool }
	if !errors.As(error(&exs.OpError{Op: "dequeue", Err: exs.ErrTimeout}), &timeout) || !timeout.Timeout() {
		t.Error("an OpError of a timeout is not a timeout")
	}
}
