package main

import (
	"bytes"
	"encoding/binary"
	"math"
	"net"
	"strings"
	"testing"

	"github.com/exsgo/exs/exs"
)

// FuzzParseFlags gives every parser of exsperf's command line the same
// string: each accepts it with a value inside its documented bounds, or
// refuses it, and never panics or hangs (a range "2..2G:N" whose step
// overflowed looped for ever, appending zeros; "nan" was a bandwidth).
func FuzzParseFlags(f *testing.F) {
	for _, s := range []string{"64", "4K", "1MiB", "2G", "0", "-1", "1..1M", "64..1M:4", "2..2G:4611686018427387904",
		"1,2,3", "10G", "10Gbit/s", "500M", "nan", "inf", "direct-only,dynamic", "indirect", "tcp:host:5201",
		"[::1]:80", "shm:/tmp/x", "exs+inproc:a", "host", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n, err := parseSize(s); err == nil && (n < 1 || n > 1<<31) {
			t.Errorf("parseSize(%q) = %d", s, n)
		}
		if ns, err := parseSizes(s); err == nil {
			if len(ns) > 32*(strings.Count(s, ",")+1) {
				t.Errorf("parseSizes(%q): %d sizes", s, len(ns))
			}
			for _, n := range ns {
				if n < 1 || n > 1<<31 {
					t.Errorf("parseSizes(%q) holds %d", s, n)
				}
			}
		}
		if v, err := parseBandwidth(s); err == nil && (!(v >= 0) || math.IsInf(v, 0)) {
			t.Errorf("parseBandwidth(%q) = %v", s, v)
		}
		if ms, err := parseModes(s); err == nil {
			if len(ms) != strings.Count(s, ",")+1 {
				t.Errorf("parseModes(%q) = %v", s, ms)
			}
			for _, m := range ms {
				if !strings.Contains(m.String(), "direct") && m.String() != "dynamic" {
					t.Errorf("parseModes(%q) holds %v", s, m)
				}
			}
		}
		for _, listen := range []bool{false, true} {
			if a, err := parsePeerAddr(s, listen); err == nil {
				if _, _, err := net.SplitHostPort(a.host); err != nil || a.scheme != "tcp" {
					t.Errorf("parsePeerAddr(%q, %v) = %+v (%v)", s, listen, a, err)
				}
			}
		}
	})
}

// FuzzControlMessage feeds the control channel's reader what a peer could
// send: a length and a JSON body. It never reads past the length it
// accepted (at most maxHeader), and a request of exs's server passes its
// checks only with parameters inside their bounds.
func FuzzControlMessage(f *testing.F) {
	add := func(v any) {
		var b bytes.Buffer
		writeMsg(&b, v)
		f.Add(b.Bytes())
	}
	add(request{Test: "stream", Size: 1 << 20})
	add(exsRequest{request: request{Test: "pingpong", Size: 64}, Mode: "dynamic", Sends: 4, Recvs: 4, Ring: 1 << 20})
	add(exsRequest{request: request{Test: "stream", Size: 1 << 26, Wait: "adaptive"}, Mode: "direct-only", Sends: 4096, Recvs: 4096, Ring: 1})
	add(reply{Bytes: 10, Elapsed: 3})
	f.Add([]byte{0, 0, 0, 2, '{', '}'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 10, '{'})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		var req exsRequest
		if err := readMsg(r, &req); err != nil {
			return
		}
		if n := len(data) - r.Len(); n > 4+maxHeader || n != 4+int(binary.BigEndian.Uint32(data)) {
			t.Fatalf("read %d bytes of a %d-byte message", n, binary.BigEndian.Uint32(data))
		}
		p, _, err := req.params()
		if err != nil {
			return
		}
		if p.Size < 1 || p.Size > 64<<20 || p.Sends < 1 || p.Sends > 4096 || p.Recvs < 1 || p.Recvs > 4096 ||
			p.Ring < 1 || p.Ring > exs.MaxStreamBuffer || int64(p.Size)*int64(p.Sends+p.Recvs) > 4<<30 {
			t.Fatalf("params of %+v passed: %+v", req, p)
		}
	})
}
