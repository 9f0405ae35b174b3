package verbs

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/exsgo/exs/eventq"
	"github.com/exsgo/exs/mreg"
)

func TestErrorsMatchErrno(t *testing.T) {
	tests := []struct {
		err    error
		target error
	}{
		{ErrQueueFull, syscall.EAGAIN},
		{fmt.Errorf("wrapped: %w", ErrQueueFull), syscall.EAGAIN},
		{ErrDisconnected, syscall.ECONNRESET},
		{ErrTerminated, syscall.ECONNABORTED},
		{&RejectError{}, ErrRejected},
		{&RejectError{}, syscall.ECONNREFUSED},
		{ErrClosed, eventq.ErrClosed},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, tt.target) {
			t.Errorf("errors.Is(%v, %v) = false", tt.err, tt.target)
		}
	}
	if errors.Is(ErrQueueFull, syscall.EINTR) || errors.Is(ErrDisconnected, syscall.ECONNABORTED) {
		t.Errorf("sentinel matches the wrong errno")
	}
}

// TestStatusOf is the table from the outcome of a work request to its
// completion status.
func TestStatusOf(t *testing.T) {
	tests := []struct {
		err  error
		want Status
	}{
		{nil, StatusSuccess},
		{&localError{mreg.ErrInvalidKey}, StatusLocalProtectionError},
		{mreg.ErrInvalidKey, StatusRemoteAccessError},
		{mreg.ErrBounds, StatusRemoteAccessError},
		{fmt.Errorf("x: %w", mreg.ErrAccess), StatusRemoteAccessError},
		{ErrNoRecv, StatusRNRRetryExceeded},
		{ErrTooLong, StatusRemoteInvalidRequest},
		{ErrInvalid, StatusRemoteInvalidRequest},
		{ErrRemoteOperation, StatusRemoteOperationError},
		{ErrClosed, StatusFlushed},
		{ErrDisconnected, StatusFlushed},
		{ErrTerminated, StatusFlushed},
		{errors.New("connection reset"), StatusLocalQPOperationError},
	}
	for _, tt := range tests {
		if got := statusOf(tt.err); got != tt.want {
			t.Errorf("statusOf(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestStrings(t *testing.T) {
	got := []string{
		StatusSuccess.String(), StatusRNRRetryExceeded.String(), Status(0).String(), Status(200).String(),
		OpWriteWithImm.String(), Opcode(0).String(), WCRecvWithImm.String(), WCOpcode(9).String(),
		StateReadyToSend.String(), State(0).String(), RNRFail.String(), RNRPolicy(7).String(),
	}
	want := []string{
		"success", "receiver-not-ready retry exceeded", "Status(0)", "Status(200)",
		"RDMA_WRITE_WITH_IMM", "Opcode(0)", "RECV_RDMA_WITH_IMM", "WCOpcode(9)",
		"ReadyToSend", "State(0)", "RNRFail", "RNRPolicy(7)",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("strings (-want +got):\n%s", diff)
	}
	if StatusSuccess.Err() != nil {
		t.Errorf("StatusSuccess.Err() != nil")
	}
	var se *StatusError
	if err := StatusFlushed.Err(); !errors.As(err, &se) || se.Status != StatusFlushed {
		t.Errorf("StatusFlushed.Err() = %v", err)
	}
}
