package report

import (
	"bufio"
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// Format is an output format.
type Format string

const (
	FormatSVG  Format = "svg"
	FormatHTML Format = "html"
)

// FormatFor picks the format from a file name's extension.
func FormatFor(path string) (Format, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg":
		return FormatSVG, nil
	case ".html", ".htm":
		return FormatHTML, nil
	}
	return "", fmt.Errorf("%s: want a .svg or .html file name", path)
}

// Write writes the report in format f.
func (r *Report) Write(w io.Writer, f Format) error {
	if f == FormatHTML {
		return r.HTML(w)
	}
	return r.SVG(w)
}

// HTML writes a self-contained page: the SVG inline, then the counts and
// latency tables as HTML (selectable, readable by screen readers).
func (r *Report) HTML(w io.Writer) error {
	s := &svgWriter{w: bufio.NewWriter(w)}
	title := esc("hfsent run: " + r.Title)
	s.printf(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>%s</title>
<style>
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 1em 2em 1em 0; display: inline-table; vertical-align: top; }
th, td { padding: 0.2em 0.8em; border-bottom: 1px solid #ddd; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
td.right { background: #dcefd9; font-weight: bold; }
caption { text-align: left; color: #555; }
.sw { display: inline-block; width: 0.8em; height: 0.8em; margin-right: 0.4em; }
svg { max-width: 100%%; height: auto; }
</style>
</head>
<body>
<h1>%s</h1>
<p>%s<br>%s</p>
`, title, title, esc(r.subtitle()), esc(r.barsNote()))
	r.svg(s)
	s.printf("<table class=\"outcomes\">\n<tr><th>outcome</th><th>rows</th><th>share</th></tr>\n")
	for _, c := range r.Counts {
		s.printf(`<tr><td><span class="sw" style="background:%s"></span>%s</td><td class="n">%d</td><td class="n">%s</td></tr>`+"\n",
			colour(c.Outcome), esc(c.Outcome), c.Rows, fmtShare(c.Share))
	}
	s.printf("</table>\n<table class=\"latency\">\n<tr><th colspan=\"2\">%s</th></tr>\n", esc(r.latencyHeading()))
	for _, p := range r.Percentiles() {
		s.printf(`<tr><td>%s</td><td class="n">%s</td></tr>`+"\n", p.Name, fmtMs(p.Ms))
	}
	s.printf("</table>\n")
	r.qualityHTML(s)
	s.printf("</body>\n</html>\n")
	if s.err != nil {
		return s.err
	}
	return s.w.Flush()
}
