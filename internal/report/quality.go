package report

import (
	"fmt"
	"strconv"

	"github.com/hfsent/hfsent/internal/quality"
)

// maxMatrixLabels bounds the confusion matrix drawn: past it the page
// says so and shows the per-label table alone (a matrix of a thousand
// labels is no picture).
const maxMatrixLabels = 40

// qualityHTML writes the quality against the gold labels: the figures,
// the confusion matrix, the per-label table, the reliability diagram and
// the coverage table.
func (r *Report) qualityHTML(s *svgWriter) {
	q := r.Quality
	if q == nil {
		return
	}
	s.printf("<section id=\"quality\">\n<h2>Quality against the gold labels</h2>\n")
	s.printf("<p id=\"quality-figures\">accuracy <b>%s</b>, macro-F1 <b>%s</b>, ECE <b>%s</b> over %d scored rows (%d correct); not scored: %d with a blank gold label, %d that did not end in success.</p>\n",
		fig(q.Accuracy), fig(q.MacroF1), fig(q.ECE), q.Scored, q.Correct, q.Unscored[quality.UnscoredBlankGold], q.Unscored[quality.UnscoredNotSuccess])
	r.matrixHTML(s)
	s.printf("<table class=\"per-label\">\n<tr><th>label</th><th>precision</th><th>recall</th><th>F1</th><th>support</th><th>answered</th></tr>\n")
	for _, l := range q.Labels {
		p := q.PerLabel[l]
		s.printf("<tr><td>%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%d</td><td class=\"n\">%d</td></tr>\n",
			esc(l), f4(p.Precision), f4(p.Recall), f4(p.F1), p.Support, p.Predicted)
	}
	s.printf("</table>\n")
	reliabilitySVG(s, q.Reliability)
	s.printf("<table class=\"coverage\">\n<tr><th>score at least</th><th>rows kept</th><th>share</th><th>accuracy</th></tr>\n")
	for _, k := range q.Coverage {
		s.printf("<tr><td class=\"n\">%s</td><td class=\"n\">%d</td><td class=\"n\">%s</td><td class=\"n\">%s</td></tr>\n",
			strconv.FormatFloat(k.Threshold, 'f', 2, 64), k.Rows, fmtShare(k.Share), fig(k.Accuracy))
	}
	s.printf("</table>\n")
	if t := q.Target; t != nil && t.Reached {
		s.printf("<p id=\"quality-target\">Accuracy %s is reached by the rows scored %s or more: %d rows (%s), at accuracy %s.</p>\n",
			f4(t.Accuracy), strconv.FormatFloat(t.Threshold, 'f', -1, 64), t.Kept.Rows, fmtShare(t.Kept.Share), fig(t.Kept.Accuracy))
	} else if t != nil {
		s.printf("<p id=\"quality-target\">No score threshold keeps rows at accuracy %s or more.</p>\n", f4(t.Accuracy))
	}
	s.printf("</section>\n")
}

// matrixHTML writes the confusion matrix: a row per gold label, a column
// per label answered, each cell the scored rows with that pair, the
// diagonal (right answers) marked.
func (r *Report) matrixHTML(s *svgWriter) {
	q := r.Quality
	if len(q.Labels) > maxMatrixLabels {
		s.printf("<p>%d labels: too many for a confusion matrix; --summary-json holds it.</p>\n", len(q.Labels))
		return
	}
	s.printf("<table class=\"confusion\" id=\"confusion\">\n<caption>confusion matrix: gold label (rows) by label answered (columns)</caption>\n<tr><th>gold \\ answered</th>")
	for _, l := range q.Labels {
		s.printf("<th scope=\"col\">%s</th>", esc(l))
	}
	s.printf("<th>rows</th></tr>\n")
	for _, g := range q.Labels {
		s.printf("<tr><th scope=\"row\">%s</th>", esc(g))
		for _, p := range q.Labels {
			cls := "n"
			if g == p {
				cls = "n right"
			}
			s.printf("<td class=\"%s\">%d</td>", cls, q.Confusion[g][p])
		}
		s.printf("<td class=\"n\">%d</td></tr>\n", q.PerLabel[g].Support)
	}
	s.printf("</table>\n")
}

// Layout of the reliability diagram.
const (
	relSize   = 260 // the plot's side
	relMargin = 40
)

// reliabilitySVG draws the reliability diagram: for each bin of score,
// a bar up to the accuracy of its rows, the diagonal where accuracy equals
// the score, and a dot at the bin's mean score; an empty bin has no bar.
func reliabilitySVG(s *svgWriter, bins []quality.Bin) {
	side := relSize + 2*relMargin
	s.printf(`<svg class="reliability" id="reliability" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="reliability diagram">`+"\n", side, side, side, side)
	s.printf(`<text x="%d" y="16" font-size="13" font-family="sans-serif">reliability: accuracy (bars) by score</text>`+"\n", relMargin)
	x := func(v float64) string { return num(relMargin + v*relSize) }
	y := func(v float64) string { return num(relMargin + (1-v)*relSize) }
	s.printf(`<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", relMargin, relMargin, relSize, relSize)
	for _, b := range bins {
		if b.Rows == 0 {
			continue
		}
		s.printf(`<rect class="bin" x="%s" y="%s" width="%s" height="%s" fill="#4e79a7" fill-opacity="0.7"><title>%s</title></rect>`+"\n",
			x(b.Lo+0.005), y(b.Accuracy), num((b.Hi-b.Lo-0.01)*relSize), num(b.Accuracy*relSize),
			esc(fmt.Sprintf("score %.1f-%.1f: %d rows, mean score %.4f, accuracy %.4f", b.Lo, b.Hi, b.Rows, b.Confidence, b.Accuracy)))
		s.printf(`<circle cx="%s" cy="%s" r="3" fill="#e15759"/>`+"\n", x(b.Confidence), y(b.Confidence))
	}
	s.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#e15759" stroke-dasharray="4 3"/>`+"\n", x(0), y(0), x(1), y(1))
	for _, t := range []float64{0, 0.5, 1} {
		s.printf(`<text x="%s" y="%d" font-size="11" text-anchor="middle" font-family="sans-serif">%s</text>`+"\n", x(t), relMargin+relSize+14, num(t))
		s.printf(`<text x="%d" y="%s" font-size="11" text-anchor="end" font-family="sans-serif">%s</text>`+"\n", relMargin-4, y(t), num(t))
	}
	s.printf("</svg>\n")
}

// fig is a figure to 4 places, "none" when there is none.
func fig(f *float64) string {
	if f == nil {
		return "none"
	}
	return f4(*f)
}

func f4(f float64) string { return strconv.FormatFloat(f, 'f', 4, 64) }
