package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

// progress shows how far a long run has got on stderr: a line rewritten in
// place on a terminal, nothing otherwise. Not safe for concurrent use.
type progress struct {
	w     io.Writer
	tty   bool
	total int
	n     int
	start time.Time
	shown bool
}

func newProgress(w io.Writer, quiet bool, total int) *progress {
	p := &progress{w: w, total: total, start: time.Now()}
	if f, ok := w.(*os.File); ok && !quiet {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

// step announces the next point.
func (p *progress) step(label string) {
	p.n++
	if !p.tty {
		return
	}
	eta := ""
	if p.n > 1 {
		per := time.Since(p.start) / time.Duration(p.n-1)
		eta = fmt.Sprintf(", about %v left", (per * time.Duration(p.total-p.n+1)).Round(time.Second))
	}
	fmt.Fprintf(p.w, "\r\033[K[%d/%d%s] %s", p.n, p.total, eta, label)
	p.shown = true
}

// clear removes the progress line, before other output.
func (p *progress) clear() {
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
}

func (p *progress) done() { p.clear() }
