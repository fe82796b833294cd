package report

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/quality"
)

// check is run by the browser on the page it laid out: it reads the
// confusion matrix and the reliability diagram as the browser parsed and
// drew them, and writes what it found as JSON into the DOM, which
// --dump-dom prints.
const check = `<script>
window.addEventListener('load', () => {
  const out = {cells: [], rowsAligned: true, right: [], other: [], bars: [], plot: 0};
  const t = document.getElementById('confusion');
  for (const tr of (t ? t.rows : [])) {
    const row = [];
    let top = null;
    for (const c of tr.cells) {
      const r = c.getBoundingClientRect();
      if (top === null) top = r.top;
      if (Math.abs(r.top - top) > 1 || r.width <= 0 || r.height <= 0) out.rowsAligned = false;
      row.push(c.textContent.trim());
      if (c.classList.contains('right')) out.right.push(getComputedStyle(c).backgroundColor);
      else if (c.tagName === 'TD') out.other.push(getComputedStyle(c).backgroundColor);
    }
    out.cells.push(row);
  }
  const svg = document.getElementById('reliability');
  if (svg) {
    out.plot = svg.querySelector('rect:not(.bin)').getBoundingClientRect().height;
    for (const b of svg.querySelectorAll('rect.bin')) out.bars.push(b.getBoundingClientRect().height);
  }
  const pre = document.createElement('pre');
  pre.id = 'browser-check';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
`

type browserCheck struct {
	Cells       [][]string `json:"cells"`
	RowsAligned bool       `json:"rowsAligned"`
	Right       []string   `json:"right"`
	Other       []string   `json:"other"`
	Bars        []float64  `json:"bars"`
	Plot        float64    `json:"plot"`
}

// TestQualityInBrowser draws a page with a known confusion matrix and has
// a real browser (headless Chromium, HFSENT_TEST_CHROMIUM) lay it out: the
// matrix it shows must be the one counted, row by row on one line each,
// with the right answers marked; the reliability bars must stand at the
// accuracy of their bins. CI sets the variable (.ci/run installs
// Chromium), so there it runs rather than skips.
func TestQualityInBrowser(t *testing.T) {
	bin := os.Getenv("HFSENT_TEST_CHROMIUM")
	if bin == "" {
		t.Skip("HFSENT_TEST_CHROMIUM is not set: the path of a Chromium to lay out the report page (e.g. /usr/bin/chromium)")
	}
	// gold → answered: pos→pos 3, pos→neg 1, neg→neg 2, neu→pos 1;
	// scores put the right ones at 0.95 (bin 9) and the wrong at 0.55.
	var e quality.Eval
	add := func(gold, label string, score float64, n int) {
		for range n {
			e.Add(quality.Obs{Gold: gold, Success: true, Label: label, Score: score})
		}
	}
	add("pos", "pos", 0.95, 3)
	add("pos", "neg", 0.55, 1)
	add("neg", "neg", 0.95, 2)
	add("neu", "pos", 0.55, 1)
	q := e.Report(0.9)
	rep := collectFile(t, filepath.Join("testdata", "small.csv"), Options{Title: "browser"})
	rep.Quality = &q
	var page bytes.Buffer
	if err := rep.HTML(&page); err != nil {
		t.Fatal(err)
	}
	html := strings.Replace(page.String(), "</body>", check+"</body>", 1)
	got := runBrowser(t, bin, html)

	want := [][]string{
		{"gold \\ answered", "neg", "neu", "pos", "rows"},
		{"neg", "2", "0", "0", "2"},
		{"neu", "0", "0", "1", "1"},
		{"pos", "1", "0", "3", "4"},
	}
	if !equalCells(got.Cells, want) {
		t.Errorf("the browser shows the matrix\n%v\nwant\n%v", got.Cells, want)
	}
	if !got.RowsAligned {
		t.Error("a row of the matrix is not laid out on one line, or a cell has no size")
	}
	if len(got.Right) != 3 || len(got.Other) == 0 || got.Right[0] == got.Other[0] {
		t.Errorf("right answers not marked apart: right %v, other %v", got.Right, got.Other)
	}
	// Bins: [0.5, 0.6) accuracy 0, [0.9, 1] accuracy 1: one bar of no
	// height, one of the plot's.
	if len(got.Bars) != 2 || got.Plot <= 0 || got.Bars[0] > 0.5 || math.Abs(got.Bars[1]-got.Plot) > 1 {
		t.Errorf("reliability bars %v in a plot of height %v: want 0 and the plot's", got.Bars, got.Plot)
	}
}

func equalCells(a, b [][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if strings.Join(a[i], "|") != strings.Join(b[i], "|") {
			return false
		}
	}
	return true
}

// runBrowser loads html in headless Chromium and returns what check
// found.
func runBrowser(t *testing.T, bin, html string) browserCheck {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "page.html")
	if err := os.WriteFile(path, []byte(html), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--window-size=1200,2000",
		"--virtual-time-budget=5000", "--dump-dom", "file://"+path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	dom, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, stderr.String())
	}
	m := regexp.MustCompile(`(?s)<pre id="browser-check">(.*?)</pre>`).FindSubmatch(dom)
	if m == nil {
		t.Fatalf("the page's check did not run; the DOM:\n%.2000s\nstderr:\n%.2000s", dom, stderr.String())
	}
	var got browserCheck
	text := strings.NewReplacer("&quot;", `"`, "&amp;", "&", "&lt;", "<", "&gt;", ">").Replace(string(m[1]))
	if err := json.Unmarshal([]byte(text), &got); err != nil {
		t.Fatalf("%v: %s", err, text)
	}
	return got
}
