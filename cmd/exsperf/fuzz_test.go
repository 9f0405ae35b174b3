package main

import (
	"math"
	"net"
	"strings"
	"testing"

	"github.com/exsgo/exs/cmd/exsperf/internal/measure"
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
		if ms, err := measure.ParseModes(s); err == nil {
			if len(ms) != strings.Count(s, ",")+1 {
				t.Errorf("ParseModes(%q) = %v", s, ms)
			}
			for _, m := range ms {
				if !strings.Contains(m.String(), "direct") && m.String() != "dynamic" {
					t.Errorf("ParseModes(%q) holds %v", s, m)
				}
			}
		}
		for _, listen := range []bool{false, true} {
			if a, err := measure.ParseTCPAddr(s, listen); err == nil {
				if _, _, err := net.SplitHostPort(a.Host); err != nil {
					t.Errorf("ParseTCPAddr(%q, %v) = %+v (%v)", s, listen, a, err)
				}
			}
		}
	})
}
