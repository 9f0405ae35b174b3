package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"strings"

	"github.com/exsgo/exs/cmd/exsperf/internal/measure"
)

// series is one line of a plot. NaN values leave a gap.
type series struct {
	name  string
	xs    []float64
	ys    []float64
	color string
	dash  string // SVG stroke-dasharray; "" for a solid line
}

// plot is a line chart with a log2 x axis of message sizes (or a linear one)
// and a linear y axis from zero (or a log10 one), written as a standalone SVG
// document.
type plot struct {
	title  string
	note   string // a smaller line under the title
	xlabel string
	ylabel string
	logX   bool
	logY   bool    // log10 y axis over the decades the data spans
	yMax   float64 // if positive, the top of a linear y axis (100 for percentages)
	xSizes bool    // label x ticks as byte sizes
	series []series
}

const (
	svgW, svgH                   = 760, 460
	padL, padR, padT, padB       = 72, 190, 56, 56
	plotW, plotH                 = svgW - padL - padR, svgH - padT - padB
	legendX                      = svgW - padR + 16
	fontAttrs                    = `font-family="sans-serif" font-size="12"`
	gridColor, axisColor, txtCol = "#e5e5e5", "#333", "#222"
)

var modeColors = map[string]string{
	"direct-only": "#1f77b4", "indirect-only": "#ff7f0e", "dynamic": "#2ca02c",
}

// lineColors are used for series without a color of their own.
var lineColors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"}

func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}

// niceMax rounds v up to 1, 2, 2.5 or 5 times a power of ten, and returns it
// with a tick step.
func niceMax(v float64) (top, step float64) {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1, 0.2
	}
	mag := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if v <= m*mag*1.0000001 {
			top = m * mag
			break
		}
	}
	step = top / 5
	if top/mag == 2.5 {
		step = top / 5
	}
	return top, step
}

func (p *plot) svg() []byte {
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	p.write(&b, -1)
	return b.Bytes()
}

// panels writes plots as one SVG document, stacked top to bottom.
func panels(ps []*plot) []byte {
	if len(ps) == 1 {
		return ps[0].svg()
	}
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	h := svgH * len(ps)
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" %s>`+"\n", svgW, h, svgW, h, fontAttrs)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", svgW, h)
	for i, p := range ps {
		p.write(&b, i*svgH)
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// axes map a plot's data onto its area: x from xmin to xmax (log2 or
// linear), y from 0 to top in steps (linear) or over the decades 10^lo to
// 10^hi (log10).
type axes struct {
	logX, logY bool
	xmin, xmax float64
	top, step  float64
	lo, hi     float64
}

// axes fits the axes to the plot's data.
func (p *plot) axes() axes {
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), 0.0
	for _, s := range p.series {
		for i, x := range s.xs {
			y := s.ys[i]
			if math.IsNaN(y) || (p.logY && y <= 0) {
				continue
			}
			xmin, xmax, ymax = math.Min(xmin, x), math.Max(xmax, x), math.Max(ymax, y)
			ymin = math.Min(ymin, y)
		}
	}
	if math.IsInf(xmin, 0) {
		xmin, xmax = 1, 2
	}
	if xmax == xmin {
		xmax = xmin * 2
	}
	a := axes{logX: p.logX, logY: p.logY, xmin: xmin, xmax: xmax}
	a.top, a.step = niceMax(ymax * 1.05)
	if p.yMax > 0 {
		a.top, a.step = niceMax(p.yMax)
	}
	// Log y: whole decades around the data.
	if p.logY {
		if math.IsInf(ymin, 0) {
			ymin, ymax = 1, 10
		}
		a.lo, a.hi = math.Floor(math.Log10(ymin)), math.Ceil(math.Log10(ymax))
		if a.hi == a.lo {
			a.hi++
		}
	}
	return a
}

// x is the horizontal position of x.
func (a axes) x(x float64) float64 {
	if a.logX {
		return padL + plotW*(math.Log2(x)-math.Log2(a.xmin))/(math.Log2(a.xmax)-math.Log2(a.xmin))
	}
	return padL + plotW*(x-a.xmin)/(a.xmax-a.xmin)
}

// y is the vertical position of y.
func (a axes) y(y float64) float64 {
	if a.logY {
		return padT + plotH*(1-(math.Log10(y)-a.lo)/(a.hi-a.lo))
	}
	return padT + plotH*(1-y/a.top)
}

func (a axes) yTicks() []float64 {
	var ts []float64
	if a.logY {
		for e := a.lo; e <= a.hi; e++ {
			ts = append(ts, math.Pow(10, e))
		}
		return ts
	}
	for y := 0.0; y <= a.top*1.0000001; y += a.step {
		ts = append(ts, y)
	}
	return ts
}

// write writes the plot as an svg element: the document's root if y0 is
// negative, else a panel nested at y0 in a larger document.
func (p *plot) write(b *bytes.Buffer, y0 int) {
	a := p.axes()
	if y0 < 0 {
		fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" %s>`+"\n", svgW, svgH, svgW, svgH, fontAttrs)
	} else {
		fmt.Fprintf(b, `<svg x="0" y="%d" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", y0, svgW, svgH, svgW, svgH)
	}
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="white"/>`+"\n", svgW, svgH)
	fmt.Fprintf(b, `<text x="%d" y="22" font-size="15" font-weight="bold" fill="%s">%s</text>`+"\n", padL, txtCol, esc(p.title))
	if p.note != "" {
		fmt.Fprintf(b, `<text x="%d" y="40" fill="#555">%s</text>`+"\n", padL, esc(p.note))
	}
	p.writeAxes(b, a)
	// Lines, with a marker at each point, and the legend.
	for i := range p.series {
		p.writeSeries(b, a, i)
	}
	b.WriteString("</svg>\n")
}

// writeAxes writes the grid, the ticks, the frame and the axes' labels.
func (p *plot) writeAxes(b *bytes.Buffer, a axes) {
	for _, y := range a.yTicks() {
		py := a.y(y)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", padL, py, padL+plotW, py, gridColor)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" fill="%s">%s</text>`+"\n", padL-6, py+4, txtCol, esc(tickLabel(y)))
	}
	for _, x := range p.xTicks(a.xmin, a.xmax) {
		px := a.x(x)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", px, padT, px, padT+plotH, gridColor)
		label := tickLabel(x)
		if p.xSizes {
			label = strings.ReplaceAll(measure.SizeName(int(x)), " ", "")
			label = strings.TrimSuffix(strings.TrimSuffix(label, "iB"), "B")
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" fill="%s">%s</text>`+"\n", px, padT+plotH+18, txtCol, esc(label))
	}
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="%s"/>`+"\n", padL, padT, plotW, plotH, axisColor)
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle" fill="%s">%s</text>`+"\n", padL+plotW/2, svgH-14, txtCol, esc(p.xlabel))
	fmt.Fprintf(b, `<text transform="translate(18 %d) rotate(-90)" text-anchor="middle" fill="%s">%s</text>`+"\n", padT+plotH/2, txtCol, esc(p.ylabel))
}

// writeSeries writes the i-th series: its line, broken where a value is
// missing, a marker at each point, and its legend entry.
func (p *plot) writeSeries(b *bytes.Buffer, a axes, i int) {
	s := p.series[i]
	color := s.color
	if color == "" {
		color = lineColors[i%len(lineColors)]
	}
	dash := ""
	if s.dash != "" {
		dash = fmt.Sprintf(` stroke-dasharray="%s"`, s.dash)
	}
	// Earlier lines are drawn wider, so that a line lying on top of
	// another leaves it visible.
	width := 2 + 2.5*float64(len(p.series)-1-i)/float64(max(1, len(p.series)-1))
	var pts []string
	flush := func() {
		if len(pts) > 1 {
			fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="%.1f" stroke-opacity="0.85"%s points="%s"/>`+"\n", color, width, dash, strings.Join(pts, " "))
		}
		pts = pts[:0]
	}
	for j, x := range s.xs {
		y := s.ys[j]
		if math.IsNaN(y) || (p.logY && y <= 0) {
			flush()
			continue
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", a.x(x), a.y(y)))
		fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>`+"\n", a.x(x), a.y(y), color)
	}
	flush()
	ly := padT + 8 + 20*i
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", legendX, ly, legendX+24, ly, color, dash)
	fmt.Fprintf(b, `<text x="%d" y="%d" fill="%s">%s</text>`+"\n", legendX+30, ly+4, txtCol, esc(s.name))
}

func (p *plot) xTicks(xmin, xmax float64) []float64 {
	var ts []float64
	if !p.logX {
		_, step := niceMax(xmax - xmin)
		for x := math.Ceil(xmin/step) * step; x <= xmax; x += step {
			ts = append(ts, x)
		}
		return ts
	}
	lo, hi := math.Ceil(math.Log2(xmin)), math.Floor(math.Log2(xmax))
	stride := math.Max(1, math.Ceil((hi-lo+1)/12))
	for e := lo; e <= hi; e += stride {
		ts = append(ts, math.Pow(2, e))
	}
	return ts
}

func tickLabel(v float64) string {
	if v != 0 && (math.Abs(v) < 0.001 || math.Abs(v) >= 1e6) {
		return fmt.Sprintf("%g", v)
	}
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	s := fmt.Sprintf("%.3f", v)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}
