package report

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/hfsent/hfsent/internal/outcome"
)

// colour is an outcome's colour, from the outcome table (a dark grey for
// a code it does not know).
func colour(o string) string { return outcome.Code(o).Colour() }

// Layout, in SVG user units (pixels).
const (
	width       = 1000
	left        = 84
	right       = 20
	plotW       = width - left - right
	maxTimeline = 560 // height of the timeline when rows are many
	rowPitch    = 8   // height per row when they are few
	chartH      = 120 // the in-flight chart
)

type svgWriter struct {
	w   *bufio.Writer
	err error
}

func (s *svgWriter) printf(format string, a ...any) {
	if s.err == nil {
		_, s.err = fmt.Fprintf(s.w, format, a...)
	}
}

// esc escapes text for XML (and replaces characters XML cannot hold).
func esc(v string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(v))
	return b.String()
}

// num formats a coordinate compactly and deterministically.
func num(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "0"
	}
	return strconv.FormatFloat(math.Round(f*100)/100, 'f', -1, 64)
}

// SVG writes the picture as a standalone SVG document.
func (r *Report) SVG(w io.Writer) error {
	s := &svgWriter{w: bufio.NewWriter(w)}
	r.svg(s)
	if s.err != nil {
		return s.err
	}
	return s.w.Flush()
}

func (r *Report) svg(s *svgWriter) {
	n := len(r.Bars)
	pitch := float64(rowPitch)
	if n*rowPitch > maxTimeline {
		pitch = float64(maxTimeline) / float64(n)
	}
	end := max(r.EndMs, 1)
	x := func(ms int64) float64 { return left + float64(ms)*plotW/float64(end) }

	legendRows := (len(r.Counts) + 3) / 4
	y0 := 78.0 + float64(legendRows)*18 + 26 // top of the timeline
	timelineH := max(pitch*float64(n), 24)
	chartTop := y0 + timelineH + 40
	tableTop := chartTop + chartH + 50
	tableRows := max(len(r.Counts), 5)
	height := tableTop + 18*float64(tableRows+1) + 20

	s.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%s" viewBox="0 0 %d %s" font-family="sans-serif" font-size="12">`+"\n",
		width, num(height), width, num(height))
	s.printf("<title>%s</title>\n", esc("hfsent run: "+r.Title))
	s.printf(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")

	// Heading.
	s.printf(`<text x="%d" y="24" font-size="16" font-weight="bold">%s</text>`+"\n", left, esc("hfsent run: "+r.Title))
	s.printf(`<text x="%d" y="42" fill="#333">%s</text>`+"\n", left, esc(r.subtitle()))
	s.printf(`<text x="%d" y="58" fill="#333">%s</text>`+"\n", left, esc(r.barsNote()))

	// Legend: one swatch per outcome present, then how to read the bars.
	s.printf(`<g class="legend">` + "\n")
	for i, c := range r.Counts {
		lx := float64(left + (i%4)*(plotW/4))
		ly := 70 + float64(i/4)*18
		s.printf(`<rect x="%s" y="%s" width="12" height="12" fill="%s"/><text x="%s" y="%s" class="outcome">%s</text>`+"\n",
			num(lx), num(ly), colour(c.Outcome), num(lx+16), num(ly+10), esc(fmt.Sprintf("%s (%d)", c.Outcome, c.Rows)))
	}
	ly := 70 + float64(legendRows)*18
	s.printf(`<rect x="%d" y="%s" width="24" height="10" fill="#555" fill-opacity="0.3"/><text x="%d" y="%s">waiting: for a slot, a limit or a cooldown (queued to first call; the whole bar for rows never sent)</text>`+"\n",
		left, num(ly), left+30, num(ly+9))
	s.printf(`<rect x="%d" y="%s" width="24" height="10" fill="#555"/><text x="%d" y="%s">at the provider, retries included (first call to finished)</text>`+"\n",
		left+520, num(ly), left+550, num(ly+9))
	s.printf("</g>\n")

	// Timeline: axis, grid, then one bar per row.
	ticks := timeTicks(end)
	s.printf(`<g class="grid" stroke="#e5e5e5">` + "\n")
	for _, t := range ticks {
		s.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n", num(x(t)), num(y0), num(x(t)), num(y0+timelineH))
	}
	s.printf("</g>\n")
	s.printf(`<text x="%d" y="%s" text-anchor="end" fill="#333" font-size="10">row 1</text>`+"\n", left-6, num(y0+min(pitch, 10)))
	if n > 1 {
		s.printf(`<text x="%d" y="%s" text-anchor="end" fill="#333" font-size="10">%s</text>`+"\n", left-6, num(y0+timelineH),
			esc(fmt.Sprintf("row %d", r.Bars[n-1].seq)))
	}
	s.printf(`<g class="timeline">` + "\n")
	gap := 0.0
	if pitch >= 4 {
		gap = 1
	}
	for i, b := range r.Bars {
		// Thinner than a pixel vanishes when drawn: let sampled bars overlap.
		top, h := y0+float64(i)*pitch, max(pitch-gap, 1)
		col := colour(b.Outcome)
		s.printf(`<g class="row"><title>%s</title>`, esc(b.tooltip()))
		waitEnd := b.FinishedMs
		if b.Sent {
			waitEnd = b.StartedMs
		}
		// At least a pixel wide: rows that finish at once (invalid_input)
		// must still show.
		wx, ww := x(b.QueuedMs), max(x(waitEnd)-x(b.QueuedMs), 0)
		if !b.Sent {
			ww = max(ww, 1)
		}
		if ww > 0 {
			s.printf(`<rect x="%s" y="%s" width="%s" height="%s" fill="%s" fill-opacity="0.3"/>`, num(wx), num(top), num(ww), num(h), col)
		}
		if b.Sent {
			px, pw := x(b.StartedMs), max(x(b.FinishedMs)-x(b.StartedMs), 1)
			s.printf(`<rect x="%s" y="%s" width="%s" height="%s" fill="%s"/>`, num(px), num(top), num(pw), num(h), col)
		}
		s.printf("</g>\n")
	}
	s.printf("</g>\n")
	r.axis(s, ticks, x, y0+timelineH)

	r.chart(s, chartTop, end, x)
	r.table(s, tableTop)
	s.printf("</svg>\n")
}

func (r *Report) subtitle() string {
	return fmt.Sprintf("%d rows, %d sent to the provider, last row finished at %s", r.Rows, r.Sent, fmtMs(r.EndMs))
}

func (r *Report) barsNote() string {
	if r.Sampled {
		return fmt.Sprintf("Bars: a sample of %d of the %d rows, in input order (each outcome keeps a fair share; rare outcomes are drawn in full).", len(r.Bars), r.Rows)
	}
	return "Bars: one per row, in input order."
}

func (b bar) tooltip() string {
	if !b.Sent {
		return fmt.Sprintf("row %d %s: %s, never sent, queued %s, finished %s", b.seq, b.RequestID, b.Outcome, fmtMs(b.QueuedMs), fmtMs(b.FinishedMs))
	}
	return fmt.Sprintf("row %d %s: %s, waited %s, provider %s", b.seq, b.RequestID, b.Outcome,
		fmtMs(b.StartedMs-b.QueuedMs), fmtMs(b.FinishedMs-b.StartedMs))
}

func (r *Report) axis(s *svgWriter, ticks []int64, x func(int64) float64, y float64) {
	s.printf(`<g class="axis" fill="#333">` + "\n")
	s.printf(`<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="#333"/>`+"\n", left, num(y), left+plotW, num(y))
	for _, t := range ticks {
		s.printf(`<text x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", num(x(t)), num(y+14), fmtMs(t))
	}
	s.printf("</g>\n")
}

// chart draws the average calls in flight per time slice (left scale) and
// the rows waiting for a slot (right scale): the two differ by orders of
// magnitude when the reader runs ahead, so each gets its own scale.
func (r *Report) chart(s *svgWriter, top float64, end int64, x func(int64) float64) {
	peakOf := func(vals []float64) float64 {
		p := 1.0
		for _, v := range vals {
			p = max(p, v)
		}
		return math.Ceil(p)
	}
	flightPeak, waitPeak := peakOf(r.Flight), peakOf(r.Waiting)
	s.printf(`<g class="chart">` + "\n")
	s.printf(`<text x="%d" y="%s" font-weight="bold">calls in flight (solid, left scale) and rows waiting (dashed, right scale), average per %s</text>`+"\n",
		left, num(top-8), fmtMs(r.SliceMs))
	s.printf(`<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="#e5e5e5"/>`+"\n", left, num(top), left+plotW, num(top))
	s.printf(`<text x="%d" y="%s" text-anchor="end" fill="#1f4e79">%s</text>`+"\n", left-6, num(top+4), num(flightPeak))
	s.printf(`<text x="%d" y="%s" text-anchor="end">0</text>`+"\n", left-6, num(top+chartH))
	s.printf(`<text x="%d" y="%s" text-anchor="end" fill="#777">%s</text>`+"\n", width-2, num(top+12), num(waitPeak))
	line := func(vals []float64, peak float64, attrs string) {
		if len(vals) == 0 {
			return
		}
		var pts strings.Builder
		for i, v := range vals {
			x0 := x(min(int64(i)*r.SliceMs, end))
			x1 := x(min(int64(i+1)*r.SliceMs, end))
			y := top + chartH - v*chartH/peak
			fmt.Fprintf(&pts, "%s,%s %s,%s ", num(x0), num(y), num(x1), num(y))
		}
		s.printf(`<polyline fill="none" %s points="%s"/>`+"\n", attrs, strings.TrimSpace(pts.String()))
	}
	line(r.Waiting, waitPeak, `stroke="#888" stroke-width="1.5" stroke-dasharray="4 3" class="waiting"`)
	line(r.Flight, flightPeak, `stroke="#1f4e79" stroke-width="2" class="inflight"`)
	s.printf("</g>\n")
	r.axis(s, timeTicks(end), x, top+chartH)
}

// table writes counts by outcome and latency percentiles as text.
func (r *Report) table(s *svgWriter, top float64) {
	s.printf(`<g class="table">` + "\n")
	s.printf(`<text x="%d" y="%s" font-weight="bold">outcome</text><text x="%d" y="%s" font-weight="bold" text-anchor="end">rows</text><text x="%d" y="%s" font-weight="bold" text-anchor="end">share</text>`+"\n",
		left, num(top), left+260, num(top), left+330, num(top))
	for i, c := range r.Counts {
		ty := top + 18*float64(i+1)
		s.printf(`<rect x="%d" y="%s" width="10" height="10" fill="%s"/><text x="%d" y="%s">%s</text><text x="%d" y="%s" text-anchor="end">%d</text><text x="%d" y="%s" text-anchor="end">%s</text>`+"\n",
			left, num(ty-9), colour(c.Outcome), left+16, num(ty), esc(c.Outcome), left+260, num(ty), c.Rows, left+330, num(ty), fmtShare(c.Share))
	}
	lx := left + 450
	s.printf(`<text x="%d" y="%s" font-weight="bold">%s</text>`+"\n", lx, num(top), esc(r.latencyHeading()))
	for i, p := range r.Percentiles() {
		ty := top + 18*float64(i+1)
		s.printf(`<text x="%d" y="%s">%s</text><text x="%d" y="%s" text-anchor="end">%s</text>`+"\n",
			lx, num(ty), p.Name, lx+160, num(ty), fmtMs(p.Ms))
	}
	s.printf("</g>\n")
}

func (r *Report) latencyHeading() string {
	switch {
	case r.Sent == 0:
		return "latency (no row was sent)"
	case r.LatencySampled:
		return fmt.Sprintf("latency, %d sent rows (estimated from a sample)", r.Sent)
	}
	return fmt.Sprintf("latency, %d sent rows", r.Sent)
}

// Percentile is one latency figure.
type Percentile struct {
	Name string
	Ms   int64
}

// Percentiles lists p50, p95, p99 and max latency of the rows sent.
func (r *Report) Percentiles() []Percentile {
	if r.Sent == 0 {
		return nil
	}
	return []Percentile{{"p50", r.P50}, {"p95", r.P95}, {"p99", r.P99}, {"max", r.Max}}
}

func fmtShare(f float64) string {
	if f > 0 && f < 0.001 {
		// 0.0% would hide that the outcome happened at all.
		return strconv.FormatFloat(f*100, 'g', 1, 64) + "%"
	}
	return strconv.FormatFloat(f*100, 'f', 1, 64) + "%"
}

// fmtMs formats milliseconds for axis labels and tooltips.
func fmtMs(ms int64) string {
	switch {
	case ms < 1000:
		return fmt.Sprintf("%dms", ms)
	case ms < 60_000:
		return strconv.FormatFloat(float64(ms)/1000, 'f', -1, 64) + "s"
	case ms < 3_600_000:
		return fmt.Sprintf("%dm%02ds", ms/60_000, ms%60_000/1000)
	}
	return fmt.Sprintf("%dh%02dm", ms/3_600_000, ms%3_600_000/60_000)
}

// timeTicks picks 1-2-5 steps giving about eight ticks over [0, end].
func timeTicks(end int64) []int64 {
	step := tickStep(end)
	var out []int64
	for t := int64(0); t <= end; t += step {
		out = append(out, t)
	}
	return out
}

func tickStep(end int64) int64 {
	target := float64(end) / 8
	base := int64(1)
	for ; base < 1e15; base *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if float64(base*m) >= target {
				return base * m
			}
		}
	}
	return base
}
