package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/exsgo/exs/cmd/exsperf/internal/measure"
)

// beside is what runs beside a stream command's measurements: the UCX
// anchor (nil if off or absent) and a busy neighbour (nil without
// --neighbour).
type beside struct {
	ucx       *measure.UCX
	neighbour *measure.Neighbour
	notes     []string
}

// openBeside finds the UCX anchor with --ucx auto, and starts the
// neighbour if asked to; notes say what was found and started.
func openBeside(ctx context.Context, o *streamOpts) (*beside, error) {
	b := &beside{}
	if o.ucx == "auto" {
		u, err := measure.FindUCX()
		if err != nil {
			b.notes = append(b.notes, fmt.Sprintf("UCX anchor absent: %v; not measured", err))
		} else {
			b.ucx = u
			b.notes = append(b.notes, measure.UCXNote)
		}
	}
	if o.neighbour {
		n, err := measure.StartNeighbour(ctx)
		if err != nil {
			return nil, err
		}
		b.neighbour = n
		b.notes = append(b.notes, fmt.Sprintf("a busy neighbour: one CPU-bound process (pid %d, one thread computing without pause) runs beside the whole run (--neighbour)", n.Pid))
	}
	return b, nil
}

// close stops the neighbour and says how much of a CPU it had.
func (b *beside) close() string {
	if b.neighbour == nil {
		return ""
	}
	share, err := b.neighbour.Close()
	b.neighbour = nil
	if err != nil {
		return fmt.Sprintf("the neighbour: %v", err)
	}
	return fmt.Sprintf("the neighbour had %.2f of a CPU over the run", share)
}

// ucxPoints are the UCX anchor's points at base's size whose tests are
// among tests (all of them if none are named).
func (b *beside) ucxPoints(base measure.Params, tests ...string) []measure.Point {
	if b.ucx == nil {
		return nil
	}
	var pts []measure.Point
	for _, pt := range b.ucx.Points(base) {
		for _, t := range tests {
			if pt.Run != measure.UCXRunName(t) {
				continue
			}
			pts = append(pts, pt)
		}
		if len(tests) == 0 {
			pts = append(pts, pt)
		}
	}
	return pts
}

// ucxLines are the lines after a table that give the UCX latency figures
// and the commands that measured the last round.
type ucxLines struct {
	lat  []string
	cmds []string
}

// add takes one size's UCX points.
func (l *ucxLines) add(size int, pts []measure.Point, rs []measure.Result) {
	for i, pt := range pts {
		if !strings.HasPrefix(pt.Run, "UCX ") {
			continue
		}
		r := rs[i]
		if r.Latency > 0 {
			lo, hi := float64(size)/(r.MaxGBps*1e9)*1e6, float64(size)/(r.MinGBps*1e9)*1e6
			l.lat = append(l.lat, fmt.Sprintf("%s %s: one-way latency %s us (median of %d rounds, %s..%s)",
				pt.Run, measure.SizeName(size), sig(float64(r.Latency)/1e3), max(1, r.Rounds), sig(lo), sig(hi)))
		}
		l.cmds = append(l.cmds, fmt.Sprintf("%s %s: %s", pt.Run, measure.SizeName(size), r.Note))
	}
}

func (l *ucxLines) write(w io.Writer) {
	for _, s := range l.lat {
		fmt.Fprintln(w, s)
	}
	if len(l.cmds) > 0 {
		fmt.Fprintln(w, "ucx commands (the median round's):")
		for _, s := range l.cmds {
			fmt.Fprintf(w, "  %s\n", s)
		}
	}
}
