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

// write writes the plot as an svg element: the document's root if y0 is
// negative, else a panel nested at y0 in a larger document.
func (p *plot) write(b *bytes.Buffer, y0 int) {
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
	top, step := niceMax(ymax * 1.05)
	if p.yMax > 0 {
		top, step = niceMax(p.yMax)
	}
	// Log y: whole decades around the data.
	lo, hi := 0.0, 0.0
	if p.logY {
		if math.IsInf(ymin, 0) {
			ymin, ymax = 1, 10
		}
		lo, hi = math.Floor(math.Log10(ymin)), math.Ceil(math.Log10(ymax))
		if hi == lo {
			hi++
		}
	}
	fx := func(x float64) float64 {
		if p.logX {
			return padL + plotW*(math.Log2(x)-math.Log2(xmin))/(math.Log2(xmax)-math.Log2(xmin))
		}
		return padL + plotW*(x-xmin)/(xmax-xmin)
	}
	fy := func(y float64) float64 {
		if p.logY {
			return padT + plotH*(1-(math.Log10(y)-lo)/(hi-lo))
		}
		return padT + plotH*(1-y/top)
	}
	var yTicks []float64
	if p.logY {
		for e := lo; e <= hi; e++ {
			yTicks = append(yTicks, math.Pow(10, e))
		}
	} else {
		for y := 0.0; y <= top*1.0000001; y += step {
			yTicks = append(yTicks, y)
		}
	}

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
	// Y grid and ticks.
	for _, y := range yTicks {
		py := fy(y)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", padL, py, padL+plotW, py, gridColor)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" fill="%s">%s</text>`+"\n", padL-6, py+4, txtCol, esc(tickLabel(y)))
	}
	// X ticks.
	for _, x := range p.xTicks(xmin, xmax) {
		px := fx(x)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", px, padT, px, padT+plotH, gridColor)
		label := tickLabel(x)
		if p.xSizes {
			label = strings.ReplaceAll(measure.SizeName(int(x)), " ", "")
			label = strings.TrimSuffix(strings.TrimSuffix(label, "iB"), "B")
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" fill="%s">%s</text>`+"\n", px, padT+plotH+18, txtCol, esc(label))
	}
	// Axes and labels.
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="%s"/>`+"\n", padL, padT, plotW, plotH, axisColor)
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle" fill="%s">%s</text>`+"\n", padL+plotW/2, svgH-14, txtCol, esc(p.xlabel))
	fmt.Fprintf(b, `<text transform="translate(18 %d) rotate(-90)" text-anchor="middle" fill="%s">%s</text>`+"\n", padT+plotH/2, txtCol, esc(p.ylabel))
	// Lines, with a marker at each point, and the legend.
	for i, s := range p.series {
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
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", fx(x), fy(y)))
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>`+"\n", fx(x), fy(y), color)
		}
		flush()
		ly := padT + 8 + 20*i
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", legendX, ly, legendX+24, ly, color, dash)
		fmt.Fprintf(b, `<text x="%d" y="%d" fill="%s">%s</text>`+"\n", legendX+30, ly+4, txtCol, esc(s.name))
	}
	b.WriteString("</svg>\n")
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
