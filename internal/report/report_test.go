package report

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func collectFile(t *testing.T, path string, opts Options) *Report {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := NewCollector(opts)
	if err := ReadCSV(f, c); err != nil {
		t.Fatal(err)
	}
	return c.Report()
}

// svgStats parses an SVG with encoding/xml and counts its row groups and
// the outcome names in its legend.
type svgStats struct {
	rows    int
	legend  []string
	titles  []string
	polylns int
}

func parseSVG(t *testing.T, data []byte) svgStats {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	var st svgStats
	var stack []string
	inRow := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not valid XML: %v", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			class := ""
			for _, a := range el.Attr {
				if a.Name.Local == "class" {
					class = a.Value
				}
			}
			stack = append(stack, class)
			if el.Name.Local == "g" && class == "row" {
				st.rows++
				inRow = true
			}
			if el.Name.Local == "polyline" {
				st.polylns++
			}
		case xml.EndElement:
			if stack[len(stack)-1] == "row" {
				inRow = false
			}
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 && stack[len(stack)-1] == "outcome" {
				st.legend = append(st.legend, string(el))
			}
			if inRow {
				st.titles = append(st.titles, string(el))
			}
		}
	}
	if len(stack) != 0 {
		t.Fatalf("unbalanced SVG")
	}
	return st
}

func TestSVGOneBarPerRowAndLegend(t *testing.T) {
	rep := collectFile(t, "testdata/small.csv", Options{Title: "small"})
	var buf bytes.Buffer
	if err := rep.SVG(&buf); err != nil {
		t.Fatal(err)
	}
	st := parseSVG(t, buf.Bytes())
	if st.rows != 9 {
		t.Errorf("%d row bars, want 9", st.rows)
	}
	legend := strings.Join(st.legend, "\n")
	for _, o := range []string{"success (3)", "fallback (1)", "invalid_input (1)", "upstream_timeout (1)",
		"upstream_rate_limited (1)", "upstream_failed (1)", "not_attempted (1)"} {
		if !strings.Contains(legend, o) {
			t.Errorf("legend lacks %q:\n%s", o, legend)
		}
	}
	if strings.Contains(legend, "circuit_open") {
		t.Errorf("legend names an outcome that did not happen")
	}
	if !strings.Contains(strings.Join(st.titles, "\n"), "<b>&amp;") {
		t.Errorf("the id with markup did not round-trip through escaping: %q", st.titles)
	}
	if st.polylns != 2 {
		t.Errorf("%d lines in the chart, want 2 (in flight, waiting)", st.polylns)
	}
	if rep.P50 != 30 || rep.P95 != 120 || rep.P99 != 120 || rep.Max != 120 || rep.Sent != 7 {
		t.Errorf("p50=%d p95=%d p99=%d max=%d sent=%d, want 30 120 120 120 7", rep.P50, rep.P95, rep.P99, rep.Max, rep.Sent)
	}
}

func TestGolden(t *testing.T) {
	rep := collectFile(t, "testdata/small.csv", Options{Title: "small.csv"})
	for _, f := range []Format{FormatSVG, FormatHTML} {
		var buf bytes.Buffer
		if err := rep.Write(&buf, f); err != nil {
			t.Fatal(err)
		}
		golden := filepath.Join("testdata", "small."+string(f))
		if *update {
			if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run go test ./internal/report -update to create it)", err)
		}
		if !bytes.Equal(buf.Bytes(), want) {
			t.Errorf("%s differs from the golden file; if the change is intended, run go test ./internal/report -update and look at the picture", golden)
		}
	}
}

func TestHTMLHoldsSVGAndTables(t *testing.T) {
	rep := collectFile(t, "testdata/small.csv", Options{})
	var buf bytes.Buffer
	if err := rep.HTML(&buf); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	for _, want := range []string{"<svg ", `<table class="outcomes">`, "<td>p95</td>", "upstream_timeout"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(page, "http://") && !strings.Contains(page, `xmlns="http://www.w3.org/2000/svg"`) || strings.Contains(page, "https://") || strings.Contains(page, "<script") {
		t.Errorf("page refers to the network or runs scripts: it must be self-contained")
	}
}

// A big run keeps a bounded picture: a fair sample of bars where rare
// outcomes survive, exact counts, and the note saying so.
func TestLargeRunIsSampled(t *testing.T) {
	c := NewCollector(Options{MaxBars: 200})
	const n = 50_000
	for i := range n {
		o := "success"
		switch {
		case i%10_000 == 5:
			o = "upstream_timeout" // 5 rows
		case i%100 == 1:
			o = "upstream_rate_limited" // ~500 rows
		}
		q := int64(i / 10)
		c.Add(Record{RequestID: fmt.Sprint(i), Outcome: o, Sent: true, QueuedMs: q, StartedMs: q + 1, FinishedMs: q + 30, LatencyMs: 29})
	}
	rep := c.Report()
	if !rep.Sampled || len(rep.Bars) != 200 {
		t.Fatalf("sampled=%v bars=%d, want a sample of 200", rep.Sampled, len(rep.Bars))
	}
	per := map[string]int{}
	for i, b := range rep.Bars {
		per[b.Outcome]++
		if i > 0 && b.seq <= rep.Bars[i-1].seq {
			t.Fatalf("bars not in input order")
		}
	}
	if per["upstream_timeout"] != 5 {
		t.Errorf("%d timeout bars, want all 5", per["upstream_timeout"])
	}
	if per["upstream_rate_limited"] < 60 || per["success"] < 60 {
		t.Errorf("unfair share: %v", per)
	}
	var total int64
	for _, cnt := range rep.Counts {
		total += cnt.Rows
	}
	if total != n || rep.Rows != n {
		t.Errorf("counts cover %d rows, want %d", total, n)
	}
	var buf bytes.Buffer
	if err := rep.SVG(&buf); err != nil {
		t.Fatal(err)
	}
	if st := parseSVG(t, buf.Bytes()); st.rows != 200 {
		t.Errorf("%d bars drawn, want 200", st.rows)
	}
	if !strings.Contains(buf.String(), "a sample of 200 of the 50000 rows") {
		t.Errorf("the picture does not say it is a sample")
	}
	if buf.Len() > 200_000 {
		t.Errorf("SVG is %d bytes for 200 bars", buf.Len())
	}
	// The in-flight line: about 3 calls in flight (29ms calls, 10 per ms... queued 10 per ms).
	if len(rep.Flight) == 0 || len(rep.Flight) > seriesBuckets {
		t.Errorf("%d slices in the in-flight series", len(rep.Flight))
	}
}

func TestSeriesAverages(t *testing.T) {
	s := newSeries(4)
	s.add(0, 4) // one interval over everything
	s.add(1, 3)
	if got := s.averages(4); fmt.Sprint(got) != "[1 2 2 1]" {
		t.Errorf("averages = %v, want [1 2 2 1]", got)
	}
	s.add(0, 8) // forces the width to double
	if got := s.averages(8); s.width != 2 || fmt.Sprint(got) != "[2.5 2.5 1 1]" {
		t.Errorf("width %d averages %v, want 2 [2.5 2.5 1 1]", s.width, got)
	}
}

func TestReadCSVErrors(t *testing.T) {
	for name, in := range map[string]string{
		"empty":       "",
		"not results": "request_id,text\na,hello\n",
		"bad number":  "request_id,outcome,latency_ms,queued_ms,started_ms,finished_ms\na,success,x,0,0,1\n",
		"ragged":      "request_id,outcome,latency_ms,queued_ms,started_ms,finished_ms\na,success,1,0,0\n",
		"bare quote":  "request_id,outcome,latency_ms,queued_ms,started_ms,finished_ms\na\"b,success,1,0,0,1\n",
	} {
		if err := ReadCSV(strings.NewReader(in), NewCollector(Options{})); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestReadCSVBoundsAndLines: a time out of range or out of order is an
// error naming the line the record starts on (a quoted field may span
// lines), never a picture that takes for ever: finished_ms at the int64
// limit used to spin for ever.
func TestReadCSVBoundsAndLines(t *testing.T) {
	const h = "request_id,status,label,score,outcome,model,attempts,latency_ms,error,queued_ms,started_ms,finished_ms,text\n"
	const ok = "a,200,P,0.9,success,m,1,5,,0,1,6,\"two\nlines\"\n" // lines 2-3
	for name, c := range map[string]struct {
		row, want string
	}{
		"int64 max":          {"b,200,P,0.9,success,m,1,5,,0,1,9223372036854775807,x\n", "line 4: finished_ms 9223372036854775807 is out of range"},
		"past a year":        {"b,200,P,0.9,success,m,1,5,,0,1,31536000001,x\n", "line 4: finished_ms 31536000001 is out of range"},
		"negative queued":    {"b,503,,,not_attempted,,0,,,-5,,1,x\n", "line 4: queued_ms -5 is out of range"},
		"negative latency":   {"b,200,P,0.9,success,m,1,-5,,0,1,6,x\n", "line 4: latency_ms -5 is out of range"},
		"started < queued":   {"b,200,P,0.9,success,m,1,5,,10,3,20,x\n", "line 4: started_ms 3 is before queued_ms 10"},
		"finished < started": {"b,200,P,0.9,success,m,1,5,,0,9,4,x\n", "line 4: finished_ms 4 is before started_ms 9"},
		"finished < queued":  {"b,503,,,not_attempted,,0,,,9,,4,x\n", "line 4: finished_ms 4 is before queued_ms 9"},
		"not a number":       {"b,200,P,0.9,success,m,1,x,,0,1,6,x\n", `line 4: latency_ms "x" is not a whole number`},
		"empty finished":     {"b,503,,,not_attempted,,0,,,0,,,x\n", "line 4: finished_ms is empty"},
		"ragged":             {"b,200\n", "line 4: wrong number of fields"},
		"bare quote":         {"b\"c,200,P,0.9,success,m,1,5,,0,1,6,x\n", "line 4:"},
	} {
		err := ReadCSV(strings.NewReader(h+ok+c.row+ok), NewCollector(Options{}))
		var le *LineError
		if !errors.As(err, &le) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: error %v, want a LineError starting %q", name, err, c.want)
		}
	}
	// The bounds themselves are fine, and a row never sent has no start.
	c := NewCollector(Options{})
	in := h + ok + "b,200,P,0.9,success,m,1,0,,0,31536000000,31536000000,x\nc,503,,,not_attempted,,0,,,7,,7,x\n"
	if err := ReadCSV(strings.NewReader(in), c); err != nil {
		t.Fatal(err)
	}
	if rep := c.Report(); rep.Rows != 3 || rep.EndMs != MaxMs {
		t.Fatalf("rows %d end %d", rep.Rows, rep.EndMs)
	}
}

func TestEmptyResults(t *testing.T) {
	c := NewCollector(Options{})
	if err := ReadCSV(strings.NewReader("request_id,outcome,latency_ms,queued_ms,started_ms,finished_ms\n"), c); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := c.Report().SVG(&buf); err != nil {
		t.Fatal(err)
	}
	if st := parseSVG(t, buf.Bytes()); st.rows != 0 {
		t.Errorf("%d bars for no rows", st.rows)
	}
}

// FuzzReadCSV feeds arbitrary bytes to the report reader: it must never
// panic, and a file it accepts must draw.
func FuzzReadCSV(f *testing.F) {
	f.Add([]byte("request_id,status,label,score,outcome,model,attempts,latency_ms,error,queued_ms,started_ms,finished_ms\na,200,P,0.9,success,m,1,5,,0,1,6\nb,422,,,invalid_input,,0,,blank,2,,2\n"))
	f.Add([]byte("request_id,outcome\n"))
	f.Add([]byte("request_id,status,label,score,outcome,model,attempts,latency_ms,error,queued_ms,started_ms,finished_ms\na,200,P,0.9,success,m,1,-5,,9,1,-6\n"))
	f.Add([]byte(""))
	f.Add([]byte("request_id,status,label,score,outcome,model,attempts,latency_ms,error,queued_ms,started_ms,finished_ms\na,200,P,0.9,success,m,1,5,,0,1,9223372036854775807\n"))
	f.Add([]byte("request_id,outcome,latency_ms,queued_ms,started_ms,finished_ms\n\"a\nb\",success,1,0,31535999999,31536000000\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c := NewCollector(Options{})
		if err := ReadCSV(bytes.NewReader(data), c); err != nil {
			var le *LineError
			if errors.As(err, &le) && le.Line < 1 {
				t.Fatalf("error names line %d: %v", le.Line, err)
			}
			return
		}
		if rep := c.Report(); rep.EndMs < 0 || rep.EndMs > MaxMs {
			t.Fatalf("an accepted file ends at %d ms", rep.EndMs)
		}
		var buf bytes.Buffer
		for _, format := range []Format{FormatSVG, FormatHTML} {
			buf.Reset()
			if err := c.Report().Write(&buf, format); err != nil {
				t.Fatalf("an accepted file does not draw as %s: %v", format, err)
			}
		}
	})
}
