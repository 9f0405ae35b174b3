package verbstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// wireMsgs are messages that exercise every field.
var wireMsgs = []msg{
	{Kind: kindRequest, ID: 1, Op: opPing},
	{Kind: kindRequest, ID: 2, Op: opConnect, Timeout: 12345, Addr: "shm:/x/y", Spec: QPSpec{SendDepth: 3, RecvDepth: 4, RNR: verbs.RNRFail, CQDepth: 9, RelaxedWritePlacement: true}, Data: []byte("private")},
	{Kind: kindRequest, ID: 3, Op: opServe, Reject: true, Data: bytes.Repeat([]byte{7}, verbs.MaxPrivateData)},
	{Kind: kindRequest, ID: 4, Op: opPostSend, Handle: 5, WRID: 1 << 63, Opcode: verbs.OpWriteWithImm, Signaled: true, Imm: 0xdeadbeef, RemoteAddr: 1<<64 - 1, RKey: 77,
		SGL: []wireSGE{{MR: 6, Off: 8, Len: 16}, {MR: 7, Off: -1, Len: 1 << 40, Key: 3}}},
	{Kind: kindRequest, ID: 5, Op: opRegister, Handle: 5, N: 4096, Access: mreg.LocalWrite | mreg.RemoteRead},
	{Kind: kindReply, ID: 5, Op: opRegister, Handle: 8, N: 4096, MRAddr: 0x7f0000001000, RKey: 0x1234, LKey: 0x5678},
	{Kind: kindReply, ID: 6, Op: opPoll, WCs: []verbs.WC{
		{WRID: 1, Status: verbs.StatusSuccess, Opcode: verbs.WCRecvWithImm, Flags: verbs.WCWithImm, QPNum: 9, ByteLen: 100, Imm: 5},
		{WRID: 2, Status: verbs.StatusFlushed, Opcode: verbs.WCSend},
	}, Err: &wireError{Msg: "verbstest: polled 2 of 3", Sentinels: []uint16{19}}},
	{Kind: kindReply, ID: 7, Op: opState, State: verbs.StateError},
	{Kind: kindReply, ID: 8, Op: opConnect, Err: &wireError{Msg: "rejected", Sentinels: []uint16{5}, Errnos: []uint32{111}, Reject: true, RejectData: []byte{1, 2}}},
	{Kind: kindCancel, ID: 9, Op: opServed},
}

// TestWireRoundTrip encodes and decodes messages, also through frames.
func TestWireRoundTrip(t *testing.T) {
	var stream []byte
	for _, m := range wireMsgs {
		got, err := unmarshal(m.marshal(nil))
		if err != nil {
			t.Fatalf("unmarshal(%v %v): %v", m.Kind, m.Op, err)
		}
		if diff := cmp.Diff(m, got); diff != "" {
			t.Errorf("%v %v round trip (-want +got):\n%s", m.Kind, m.Op, diff)
		}
		stream, err = appendFrame(stream, &m)
		if err != nil {
			t.Fatal(err)
		}
	}
	r := bytes.NewReader(stream)
	for _, want := range wireMsgs {
		got, err := readFrame(r)
		if err != nil {
			t.Fatalf("readFrame: %v", err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%v %v framed (-want +got):\n%s", want.Kind, want.Op, diff)
		}
	}
	if _, err := readFrame(r); err != io.EOF {
		t.Errorf("readFrame at the end: %v, want io.EOF", err)
	}
}

// TestWireMalformed checks that truncated, padded, oversized and invalid
// input is refused.
func TestWireMalformed(t *testing.T) {
	good := wireMsgs[3].marshal(nil)
	frame, _ := appendFrame(nil, &wireMsgs[3])
	huge := []byte{0xff, 0xff, 0xff, 0xff}
	big := []byte{0x01, 0x00, 0x00, 0x00, 1, 2, 3} // 16 MiB announced, 3 bytes sent
	badKind := bytes.Clone(good)
	badKind[0] = 9
	badBool := (&msg{Kind: kindRequest, Reject: true}).marshal(nil)
	// Reject follows kind, id, op, timeout, handle, n, access, an empty
	// address and the spec (depths, RNR, CQ depth, relaxed).
	const rejectAt = 1 + 8 + 1 + 8 + 8 + 8 + 4 + 4 + 8 + 8 + 1 + 8 + 1
	if badBool[rejectAt] != 1 {
		t.Fatalf("Reject is not at %d", rejectAt)
	}
	badBool[rejectAt] = 2
	badSentinel := (&msg{Kind: kindReply, Err: &wireError{Sentinels: []uint16{0}}}).marshal(nil)
	// The sentinel index is the error's last-but-five bytes (index, errno
	// count, reject flag, reject data count).
	badSentinel[len(badSentinel)-2-4-1-4] = 0xff
	tests := []struct {
		name    string
		payload []byte
		frame   []byte
	}{
		{name: "empty", payload: []byte{}},
		{name: "truncated", payload: good[:len(good)-1]},
		{name: "trailing", payload: append(bytes.Clone(good), 0)},
		{name: "kind", payload: badKind},
		{name: "bool", payload: badBool},
		{name: "sentinel", payload: badSentinel},
		{name: "frame truncated", frame: frame[:len(frame)-3]},
		{name: "frame header truncated", frame: frame[:2]},
		{name: "frame too long", frame: huge},
		{name: "frame big and short", frame: big},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.frame != nil {
				_, err = readFrame(bytes.NewReader(tc.frame))
			} else {
				_, err = unmarshal(tc.payload)
			}
			if err == nil || err == io.EOF {
				t.Errorf("decoded without error: %v", err)
			}
		})
	}
}

// TestWireErrors checks which identities an error keeps across the wire.
func TestWireErrors(t *testing.T) {
	type identity struct {
		Text                                                      string
		Closed, Rejected, Refused, QueueFull, Again, Deadline     bool
		Canceled, Deregistered, Terminated, Aborted, Reset, Inval bool
		RejectData                                                []byte
	}
	id := func(err error) identity {
		v := identity{
			Closed: errors.Is(err, verbs.ErrClosed), Rejected: errors.Is(err, verbs.ErrRejected),
			Refused: errors.Is(err, syscall.ECONNREFUSED), QueueFull: errors.Is(err, verbs.ErrQueueFull),
			Again: errors.Is(err, syscall.EAGAIN), Deadline: errors.Is(err, context.DeadlineExceeded),
			Canceled: errors.Is(err, context.Canceled), Deregistered: errors.Is(err, mreg.ErrDeregistered),
			Terminated: errors.Is(err, verbs.ErrTerminated), Aborted: errors.Is(err, syscall.ECONNABORTED),
			Reset: errors.Is(err, syscall.ECONNRESET), Inval: errors.Is(err, syscall.EINVAL),
		}
		if err != nil {
			v.Text = err.Error()
		}
		var re *verbs.RejectError
		if errors.As(err, &re) {
			v.RejectData = re.PrivateData
		}
		return v
	}
	tests := []error{
		nil,
		errors.New("plain"),
		fmt.Errorf("exs: wrapped: %w", verbs.ErrClosed),
		&verbs.RejectError{PrivateData: []byte("no")},
		fmt.Errorf("connect: %w", &verbs.RejectError{}),
		fmt.Errorf("post: %w", verbs.ErrQueueFull),
		fmt.Errorf("polled 1 of 2: %w", context.DeadlineExceeded),
		context.Canceled,
		mreg.ErrDeregistered,
		fmt.Errorf("qp: %w", verbs.ErrTerminated),
		verbs.ErrDisconnected,
		fmt.Errorf("dial: %w", syscall.EINVAL),
		errors.Join(verbs.ErrClosed, syscall.ECONNREFUSED),
	}
	for _, err := range tests {
		m := msg{Kind: kindReply, Err: encodeError(err)}
		back, derr := unmarshal(m.marshal(nil))
		if derr != nil {
			t.Fatalf("%v: %v", err, derr)
		}
		got := decodeError(back.Err)
		if diff := cmp.Diff(id(err), id(got)); diff != "" {
			t.Errorf("error %q across the wire (-want +got):\n%s", err, diff)
		}
	}
}

// TestCtxError checks that a remote context error takes the caller's.
func TestCtxError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	<-ctx.Done()
	remote := decodeError(encodeError(fmt.Errorf("polled: %w", context.Canceled)))
	err := ctxError(ctx, remote)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		t.Errorf("ctxError = %v; want DeadlineExceeded only", err)
	}
	if err.Error() != remote.Error() {
		t.Errorf("ctxError changed the text: %q", err)
	}
}

// FuzzDecodeMsg feeds arbitrary bytes to the decoders: they must return an
// error or a message that encodes back to the same bytes, never panic.
func FuzzDecodeMsg(f *testing.F) {
	for _, m := range wireMsgs {
		f.Add(m.marshal(nil))
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := unmarshal(b); err == nil {
			if again := m.marshal(nil); !bytes.Equal(again, b) {
				t.Errorf("decoded message encodes differently:\n%x\n%x", b, again)
			}
		}
		// The same bytes as a stream of frames.
		r := bytes.NewReader(b)
		for {
			if _, err := readFrame(r); err != nil {
				break
			}
		}
	})
}
