package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/exsgo/exs/cmd/exsperf/internal/measure"
	"github.com/exsgo/exs/dynproto"
)

// parseSize parses a byte count: a number with an optional binary unit
// (B, K/KiB, M/MiB, G/GiB; case-insensitive).
func parseSize(s string) (int, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := 1
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"kb", 1 << 10}, {"mb", 1 << 20}, {"gb", 1 << 30}, {"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"b", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.Atoi(t)
	if err != nil || n < 1 || n > (1<<31)/mult {
		return 0, fmt.Errorf("bad size %q (want e.g. 64, 4K, 1MiB; at most 2 GiB)", s)
	}
	return n * mult, nil
}

// parseSizes parses a comma-separated list of sizes and ranges: "A..B" is A,
// 2A, 4A, ... up to B; "A..B:4" steps by a factor of 4.
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, item := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(item, "..")
		if !isRange {
			n, err := parseSize(item)
			if err != nil {
				return nil, err
			}
			out = append(out, n)
			continue
		}
		factor := 2
		if h, f, ok := strings.Cut(hi, ":"); ok {
			var err error
			if factor, err = strconv.Atoi(f); err != nil || factor < 2 {
				return nil, fmt.Errorf("bad step in %q (want A..B:N with N >= 2)", item)
			}
			hi = h
		}
		a, err := parseSize(lo)
		if err != nil {
			return nil, err
		}
		b, err := parseSize(hi)
		if err != nil {
			return nil, err
		}
		if b < a {
			return nil, fmt.Errorf("empty range %q", item)
		}
		for n := a; n <= b; n *= factor {
			out = append(out, n)
			if n > b/factor {
				break // the next step passes b (and would overflow for a large factor)
			}
		}
	}
	return out, nil
}

// parseBandwidth parses a bit rate in decimal units, iperf3-style: "10G",
// "10Gbit", "10Gbit/s", "500M", "0" (unlimited).
func parseBandwidth(s string) (float64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "/s"), "bit")
	t = strings.TrimSuffix(t, "bps")
	mult := 1.0
	switch {
	case strings.HasSuffix(t, "g"):
		mult, t = 1e9, strings.TrimSuffix(t, "g")
	case strings.HasSuffix(t, "m"):
		mult, t = 1e6, strings.TrimSuffix(t, "m")
	case strings.HasSuffix(t, "k"):
		mult, t = 1e3, strings.TrimSuffix(t, "k")
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || !(v >= 0) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("bad bandwidth %q (want e.g. 10G, 10Gbit/s, 500M; 0 for unlimited)", s)
	}
	return v * mult, nil
}

// Flag values.

type sizesFlag struct{ v *[]int }

func (f sizesFlag) String() string {
	if f.v == nil {
		return ""
	}
	var s []string
	for _, n := range *f.v {
		s = append(s, strings.ReplaceAll(measure.SizeName(n), " ", ""))
	}
	return strings.Join(s, ",")
}

func (f sizesFlag) Set(s string) error {
	v, err := parseSizes(s)
	if err != nil {
		return err
	}
	*f.v = v
	return nil
}

type sizeFlag struct{ v *int }

func (f sizeFlag) String() string {
	if f.v == nil {
		return ""
	}
	return strings.ReplaceAll(measure.SizeName(*f.v), " ", "")
}

func (f sizeFlag) Set(s string) error {
	v, err := parseSize(s)
	if err != nil {
		return err
	}
	*f.v = v
	return nil
}

type modesFlag struct{ v *[]dynproto.Mode }

func (f modesFlag) String() string {
	if f.v == nil {
		return ""
	}
	var s []string
	for _, m := range *f.v {
		s = append(s, m.String())
	}
	return strings.Join(s, ",")
}

func (f modesFlag) Set(s string) error {
	v, err := measure.ParseModes(s)
	if err != nil {
		return err
	}
	*f.v = v
	return nil
}

type bandwidthFlag struct{ v *float64 }

func (f bandwidthFlag) String() string {
	if f.v == nil {
		return ""
	}
	return measure.BitRate(*f.v)
}

func (f bandwidthFlag) Set(s string) error {
	v, err := parseBandwidth(s)
	if err != nil {
		return err
	}
	*f.v = v
	return nil
}

type intsFlag struct{ v *[]int }

func (f intsFlag) String() string {
	if f.v == nil {
		return ""
	}
	var s []string
	for _, n := range *f.v {
		s = append(s, strconv.Itoa(n))
	}
	return strings.Join(s, ",")
}

func (f intsFlag) Set(s string) error {
	var out []int
	for _, p := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 {
			return fmt.Errorf("bad count %q", p)
		}
		out = append(out, n)
	}
	*f.v = out
	return nil
}

type waitsFlag struct{ v *[]measure.WaitMode }

func (f waitsFlag) String() string {
	if f.v == nil {
		return ""
	}
	var s []string
	for _, w := range *f.v {
		s = append(s, w.String())
	}
	return strings.Join(s, ",")
}

func (f waitsFlag) Set(s string) error {
	var out []measure.WaitMode
	for _, p := range strings.Split(s, ",") {
		w, err := measure.ParseWait(p)
		if err != nil {
			return err
		}
		out = append(out, w)
	}
	*f.v = out
	return nil
}

// durationOK checks a duration flag.
func durationOK(name string, d time.Duration, zeroOK bool) error {
	if d < 0 || (d == 0 && !zeroOK) {
		return fmt.Errorf("--%s must be positive", name)
	}
	return nil
}
