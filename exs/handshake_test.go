package exs

import (
	"bytes"
	"errors"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestHelloRoundTrip(t *testing.T) {
	tests := []hello{
		{version: helloVersion, mode: ModeDynamic, typ: SockStream, frames: 32, ringSize: 1 << 20, ringKey: 0xdeadbeef, ringAddr: 0x7f0000001000},
		{version: helloVersion, mode: ModeDirectOnly, typ: SockSeqPacket, frames: 1},
		{version: helloVersion, mode: ModeIndirectOnly, typ: SockStream, frames: MaxFrames, ringSize: MaxStreamBuffer, reason: rejectType},
	}
	for _, h := range tests {
		got, err := decodeHello(h.encode())
		if err != nil {
			t.Fatalf("decode(%+v): %v", h, err)
		}
		if diff := cmp.Diff(h, got, cmp.AllowUnexported(hello{})); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
	}
}

func TestHelloDecodeErrors(t *testing.T) {
	good := hello{version: helloVersion, mode: ModeDynamic, typ: SockStream, frames: 4, ringSize: 4096}
	tests := []struct {
		name string
		edit func(b []byte) []byte
	}{
		{"short", func(b []byte) []byte { return b[:helloSize-1] }},
		{"long", func(b []byte) []byte { return append(b, 0) }},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }},
		{"padding", func(b []byte) []byte { b[11] = 1; return b }},
		{"padding2", func(b []byte) []byte { b[23] = 1; return b }},
		{"mode0", func(b []byte) []byte { b[5] = 0; return b }},
		{"mode4", func(b []byte) []byte { b[5] = 4; return b }},
		{"type", func(b []byte) []byte { b[6] = 3; return b }},
		{"reason", func(b []byte) []byte { b[7] = uint8(rejectEnd); return b }},
		{"frames0", func(b []byte) []byte { b[8], b[9] = 0, 0; return b }},
		{"frames-big", func(b []byte) []byte { b[8], b[9] = 0xff, 0xff; return b }},
		{"no-ring", func(b []byte) []byte { b[12], b[13], b[14], b[15] = 0, 0, 0, 0; return b }},
		{"ring-big", func(b []byte) []byte { b[12] = 0x80; return b }},
		{"ring-direct", func(b []byte) []byte { b[5] = uint8(ModeDirectOnly); return b }},
	}
	// A rejection need not describe a stream buffer.
	rej := good
	rej.ringSize, rej.reason = 0, rejectMode
	if _, err := decodeHello(rej.encode()); err != nil {
		t.Errorf("rejection without a stream buffer: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeHello(tt.edit(good.encode()))
			if !errors.Is(err, errHello) {
				t.Errorf("got %v, want errHello", err)
			}
		})
	}
	// Another version is returned for the caller to report.
	b := good.encode()
	b[4] = 9
	b[5] = 77
	if h, err := decodeHello(b); err != nil || h.version != 9 {
		t.Errorf("other version: %+v %v", h, err)
	}
}

func FuzzHelloDecode(f *testing.F) {
	f.Add((&hello{version: helloVersion, mode: ModeDynamic, typ: SockStream, frames: 32, ringSize: 1 << 20, ringKey: 7, ringAddr: 4096}).encode())
	f.Add((&hello{version: helloVersion, mode: ModeDirectOnly, typ: SockSeqPacket, frames: 1, reason: rejectMode}).encode())
	f.Add([]byte("EXSP"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHello(b)
		if err != nil || h.version != helloVersion {
			return
		}
		// A valid hello re-encodes to the same bytes.
		if got := h.encode(); !bytes.Equal(got, b) {
			t.Fatalf("re-encoding %x gives %x", b, got)
		}
		if h.frames == 0 || h.mode < ModeDynamic || h.mode > ModeIndirectOnly || h.typ < SockStream || h.typ > SockSeqPacket {
			t.Fatalf("accepted invalid %+v", h)
		}
	})
}

func TestMismatchError(t *testing.T) {
	a := hello{version: 1, mode: ModeDynamic, typ: SockStream}
	b := hello{version: 1, mode: ModeDirectOnly, typ: SockSeqPacket}
	tests := []struct {
		r        rejectReason
		msg      string
		mismatch bool
	}{
		{rejectVersion, "connection parameters do not match the peer's: protocol version 1, peer 1", true},
		{rejectMode, "connection parameters do not match the peer's: protocol mode dynamic, peer direct-only", true},
		{rejectType, "connection parameters do not match the peer's: socket type stream, peer seqpacket", true},
		{rejectBad, "connection refused by peer: malformed request", false},
		{rejectResource, "connection refused by peer: no resources", false},
		{rejectEnd, "connection refused by peer: unknown reason", false},
	}
	for _, tt := range tests {
		err := mismatchError(tt.r, &a, &b)
		if err.Error() != tt.msg {
			t.Errorf("reason %d: %q, want %q", tt.r, err, tt.msg)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, ErrMismatch) != tt.mismatch {
			t.Errorf("reason %d: %v: ECONNREFUSED %v, ErrMismatch %v", tt.r, err, errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, ErrMismatch))
		}
	}
}
