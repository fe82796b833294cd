package cli

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/queue/pgtest"
)

// scripted is a fake model that answers each text with the label and score
// the text names ("LABEL_1 0.91 rest"); a text "fail" is refused (400).
func scripted(t *testing.T) *fakehf.Fake {
	t.Helper()
	return &fakehf.Fake{Script: func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
		f := strings.Fields(texts[0])
		if f[0] == "fail" {
			return fakehf.Reply{Status: 400, Immediate: true}
		}
		score, _ := strconv.ParseFloat(f[1], 64)
		other := "LABEL_0"
		if f[0] == "LABEL_0" {
			other = "LABEL_1"
		}
		return fakehf.Reply{Body: fmt.Sprintf(`[[{"label":%q,"score":%v},{"label":%q,"score":%v}]]`, f[0], score, other, 1-score)}
	}}
}

// goldInput: six rows, by hand. After LABEL_0=negative,LABEL_1=positive:
//
//	g1 positive, answered positive 0.95   right
//	g2 positive, answered negative 0.60   wrong
//	g3 negative, answered negative 0.85   right
//	g4 Negative, answered negative 0.70   right (case ignored)
//	g5 blank,    answered positive 0.99   not scored: blank_gold
//	g6 positive, refused (400)            not scored: not_success
//
// Scored 4, right 3: accuracy 0.75. positive: P 1/1, R 1/2, F1 2/3;
// negative: P 2/3, R 2/2, F1 0.8; macro-F1 (2/3+0.8)/2 = 0.7333...
const goldInput = `request_id,text,gold
g1,LABEL_1 0.95 a,positive
g2,LABEL_0 0.60 b,positive
g3,LABEL_0 0.85 c,negative
g4,LABEL_0 0.70 d,Negative
g5,LABEL_1 0.99 e,
g6,fail,positive
`

type summaryOut struct {
	ExitCode     int      `json:"exit_code"`
	ExitReason   string   `json:"exit_reason"`
	QualityShort string   `json:"quality_short"`
	Review       *int64   `json:"review"`
	CostUSD      *float64 `json:"cost_usd"`
	Quality      *struct {
		Accuracy  *float64                                       `json:"accuracy"`
		MacroF1   *float64                                       `json:"macro_f1"`
		Scored    int64                                          `json:"scored"`
		Unscored  map[string]int64                               `json:"unscored"`
		Confusion map[string]map[string]int64                    `json:"confusion"`
		PerLabel  map[string]struct{ Precision, Recall float64 } `json:"per_label"`
		ECE       *float64                                       `json:"ece"`
	} `json:"quality"`
}

func readSummary(t *testing.T, path string) summaryOut {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s summaryOut
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	return s
}

func goldRun(t *testing.T, extra ...string) (run, summaryOut, string) {
	t.Helper()
	r, out, sum := goldRunRaw(t, extra...)
	return r, readSummary(t, sum), out
}

// goldRunRaw is goldRun for a run that may stop before its summary.
func goldRunRaw(t *testing.T, extra ...string) (run, string, string) {
	t.Helper()
	srv := fakehf.Start(scripted(t))
	t.Cleanup(srv.Close)
	in := writeFile(t, "gold.csv", goldInput)
	dir := t.TempDir()
	sum, out := filepath.Join(dir, "summary.json"), filepath.Join(dir, "out.csv")
	args := append([]string{"classify", in, "--endpoint", srv.URL, "--retries", "0", "--no-cache", "-o", out,
		"--gold-column", "gold", "--label-map", "LABEL_0=negative,LABEL_1=positive", "--summary-json", sum}, extra...)
	r := runMain(t, map[string]string{"HF_TOKEN": token}, "", args...)
	return r, out, sum
}

func TestGoldEvaluationByHand(t *testing.T) {
	r, s, out := goldRun(t)
	if r.code != ExitRowsFailed {
		t.Fatalf("exit %d (a row failed: want 1)\n%s", r.code, r.stderr)
	}
	q := s.Quality
	if q == nil || q.Accuracy == nil || q.MacroF1 == nil {
		t.Fatalf("no quality in the summary: %+v", s)
	}
	if *q.Accuracy != 0.75 || math.Abs(*q.MacroF1-(2.0/3+0.8)/2) > 1e-12 || q.Scored != 4 ||
		q.Unscored["blank_gold"] != 1 || q.Unscored["not_success"] != 1 {
		t.Errorf("accuracy %v macro_f1 %v scored %d unscored %v", *q.Accuracy, *q.MacroF1, q.Scored, q.Unscored)
	}
	if q.Confusion["positive"]["negative"] != 1 || q.Confusion["negative"]["negative"] != 2 || q.PerLabel["negative"].Precision != 2.0/3 {
		t.Errorf("confusion %v per_label %v", q.Confusion, q.PerLabel)
	}
	if !strings.Contains(r.stderr, "accuracy=0.7500 macro_f1=0.7333") {
		t.Errorf("summary line: %s", r.stderr)
	}
	// The results show the mapped labels: what a reader compares.
	b, _ := os.ReadFile(out)
	rows := parseResults(t, string(b))
	if rows[0]["label"] != "positive" || rows[1]["label"] != "negative" {
		t.Errorf("labels not mapped in the results: %v %v", rows[0], rows[1])
	}
}

// Exit 3 for each gate when every row ended well; 1 still wins when a
// row failed; a gate met exits 0.
func TestQualityGates(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"--min-accuracy", "0.8"}, ExitRowsFailed}, // g6 failed: 1 wins
		{[]string{"--min-accuracy", "0.8", "--fail-on", "none"}, ExitQuality},
		{[]string{"--min-macro-f1", "0.74", "--fail-on", "none"}, ExitQuality},
		{[]string{"--min-accuracy", "0.75", "--min-macro-f1", "0.73", "--fail-on", "none"}, ExitOK},
	} {
		r, s, _ := goldRun(t, c.args...)
		if r.code != c.code || s.ExitCode != c.code {
			t.Errorf("%v: exit %d (summary %d), want %d\n%s", c.args, r.code, s.ExitCode, c.code, r.stderr)
		}
		if c.code == ExitQuality && (s.ExitReason != "quality_below" || s.QualityShort == "" || !strings.Contains(r.stderr, "under --min-")) {
			t.Errorf("%v: reason %q short %q\n%s", c.args, s.ExitReason, s.QualityShort, r.stderr)
		}
	}
}

// --review-below marks exactly the rows under it or without a score; the
// review file holds them with their text and an empty gold column, which
// --gold-column and calibrate read back.
func TestReviewRowsAndFileReadBack(t *testing.T) {
	review := filepath.Join(t.TempDir(), "review.csv")
	r, s, out := goldRun(t, "--review-below", "0.8", "--review-out", review)
	if s.Review == nil || *s.Review != 3 || !strings.Contains(r.stderr, "review=3") {
		t.Fatalf("review count %v\n%s", s.Review, r.stderr)
	}
	b, _ := os.ReadFile(out)
	want := map[string]string{"g1": "false", "g2": "true", "g3": "false", "g4": "true", "g5": "false", "g6": "true"}
	for _, row := range parseResults(t, string(b)) {
		if row["review"] != want[row["request_id"]] {
			t.Errorf("%s: score %s review %q, want %s", row["request_id"], row["score"], row["review"], want[row["request_id"]])
		}
	}
	b, _ = os.ReadFile(review)
	rows := parseResults(t, string(b))
	if len(rows) != 3 || rows[0]["request_id"] != "g2" || rows[0]["text"] != "LABEL_0 0.60 b" || rows[0]["gold"] != "" || rows[2]["request_id"] != "g6" {
		t.Fatalf("review file:\n%s", b)
	}
	// A person fills in the gold column; it is read back as gold.
	filled := strings.NewReplacer(",,LABEL_0 0.60 b", ",negative,LABEL_0 0.60 b", ",,LABEL_0 0.70 d", ",negative,LABEL_0 0.70 d", ",,fail", ",positive,fail").Replace(string(b))
	if filled == string(b) {
		t.Fatalf("nothing filled in:\n%s", b)
	}
	gold := writeFile(t, "filled.csv", filled)
	srv := fakehf.Start(scripted(t))
	defer srv.Close()
	sum := filepath.Join(t.TempDir(), "s.json")
	r = runMain(t, map[string]string{"HF_TOKEN": token}, "", "classify", gold, "--endpoint", srv.URL, "--no-cache", "--retries", "0",
		"--gold-column", "gold", "--label-map", "LABEL_0=negative", "--summary-json", sum, "--fail-on", "none", "-o", filepath.Join(t.TempDir(), "o.csv"))
	if q := readSummary(t, sum).Quality; r.code != 0 || q == nil || q.Scored != 2 || *q.Accuracy != 1 {
		t.Fatalf("--gold-column on the review file: exit %d %+v\n%s", r.code, q, r.stderr)
	}
	r = runMain(t, nil, "", "calibrate", out, "--gold", gold, "-o", filepath.Join(t.TempDir(), "cal.json"))
	if r.code != 0 || !strings.Contains(r.stderr, "rows=2 ") {
		t.Fatalf("calibrate on the review file: exit %d\n%s", r.code, r.stderr)
	}
}

// A calibration is refused, before any call, for a run of another model
// or another prompt; --calibration-force takes it with a warning.
func TestCalibrationRefusedForAnotherRun(t *testing.T) {
	dir := t.TempDir()
	res := writeFile(t, "res.csv", "request_id,status,label,score,outcome,model,attempts,latency_ms,error,queued_ms,started_ms,finished_ms\n"+
		"a,200,pos,0.9,success,m,1,1,,0,0,1\nb,200,neg,0.6,success,m,1,1,,0,0,1\nc,200,pos,0.7,success,m,1,1,,0,0,1\n")
	gold := writeFile(t, "g.csv", "request_id,gold\na,pos\nb,pos\nc,pos\n")
	p1, p2 := writeFile(t, "p1.txt", "Label {text} as one of {labels}."), writeFile(t, "p2.txt", "Say {labels} for: {text}")
	cal := filepath.Join(dir, "cal.json")
	chat := []string{"--provider", "chat", "--model", "m", "--labels", "pos,neg", "--endpoint", "http://127.0.0.1:1/v1/chat/completions"}
	r := runMain(t, nil, "", append([]string{"calibrate", res, "--gold", gold, "-o", cal, "--prompt-file", p1}, chat...)...)
	if r.code != 0 || !strings.Contains(r.stderr, "fewer than 300") {
		t.Fatalf("calibrate: exit %d\n%s", r.code, r.stderr)
	}
	in := writeFile(t, "in.csv", csvOf("x", "y"))
	env := map[string]string{"HF_TOKEN": token}
	dry := func(args ...string) run {
		return runMain(t, env, "", append([]string{"classify", in, "--dry-run", "--calibration", cal}, args...)...)
	}
	if r := dry(append(chat, "--prompt-file", p1)...); r.code != 0 {
		t.Fatalf("the run it was fitted for: exit %d\n%s", r.code, r.stderr)
	}
	for what, args := range map[string][]string{
		"the prompt": append(slicesClone(chat), "--prompt-file", p2),
		`model "m"`:  {"--provider", "chat", "--model", "other", "--labels", "pos,neg", "--endpoint", "http://127.0.0.1:1/v1/chat/completions", "--prompt-file", p1},
		"labels":     {"--provider", "chat", "--model", "m", "--labels", "neg,pos", "--endpoint", "http://127.0.0.1:1/v1/chat/completions", "--prompt-file", p1},
		"provider":   {"--provider", "local"},
	} {
		r := dry(args...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, "fitted for another run") || !strings.Contains(r.stderr, what) {
			t.Errorf("%s: exit %d, want 2 naming it\n%s", what, r.code, r.stderr)
		}
		r = dry(append(args, "--calibration-force")...)
		if r.code != 0 || !strings.Contains(r.stderr, "--calibration-force") {
			t.Errorf("%s with --calibration-force: exit %d\n%s", what, r.code, r.stderr)
		}
	}
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

// A run with --calibration writes the calibrated score and keeps the raw
// one in raw_score; the order of the raw scores is kept; a resume with
// another calibration is refused, and one with the same reads the file.
func TestCalibratedRun(t *testing.T) {
	r, _, out := goldRun(t, "--fail-on", "none")
	if r.code != 0 {
		t.Fatal(r.stderr)
	}
	cal := filepath.Join(t.TempDir(), "cal.json")
	gold := writeFile(t, "gold.csv", goldInput)
	if r := runMain(t, nil, "", "calibrate", out, "--gold", gold, "-o", cal); r.code != 0 {
		t.Fatalf("calibrate: %s", r.stderr)
	}
	r2, out2, _ := goldRunRaw(t, "--fail-on", "none", "--calibration", cal)
	if r2.code != 0 {
		t.Fatalf("the calibration is refused for the run it was fitted on (--label-map must match): %s", r2.stderr)
	}
	b, _ := os.ReadFile(out2)
	rows := parseResults(t, string(b))
	type pair struct{ raw, cal float64 }
	var ps []pair
	for _, row := range rows {
		if row["outcome"] != "success" {
			if row["raw_score"] != "" || row["score"] != "" {
				t.Errorf("failed row has scores: %v", row)
			}
			continue
		}
		raw, err1 := strconv.ParseFloat(row["raw_score"], 64)
		c, err2 := strconv.ParseFloat(row["score"], 64)
		if err1 != nil || err2 != nil || c <= 0 || c >= 1 {
			t.Fatalf("row %v", row)
		}
		ps = append(ps, pair{raw, c})
	}
	for _, a := range ps {
		for _, b := range ps {
			if a.raw < b.raw && a.cal > b.cal {
				t.Errorf("ranking reversed: raw %v < %v but calibrated %v > %v", a.raw, b.raw, a.cal, b.cal)
			}
		}
	}
}

// queue push --gold-column stores the gold labels; a worker with
// --review-below and --calibration writes the review and raw_score
// columns; export writes them and judges the batch (exit 3 under
// --min-accuracy).
func TestQueueGoldAndReview(t *testing.T) {
	db := pgtest.URL(t)
	srv := fakehf.Start(scripted(t))
	defer srv.Close()
	env := map[string]string{dbEnv: db, "HF_TOKEN": token}
	in := writeFile(t, "gold.csv", goldInput)
	if r := runMain(t, env, "", "queue", "push", in, "--batch", "q", "--gold-column", "gold", "--max-attempts", "1"); r.code != 0 {
		t.Fatalf("push: %s", r.stderr)
	}
	r := runMain(t, env, "", "worker", "--batch", "q", "--endpoint", srv.URL, "--retries", "0", "--no-cache", "--exit-when-done",
		"--label-map", "LABEL_0=negative,LABEL_1=positive", "--review-below", "0.8")
	if r.code != ExitRowsFailed || !strings.Contains(r.stderr, "review=3") {
		t.Fatalf("worker: exit %d\n%s", r.code, r.stderr)
	}
	r = runMain(t, env, "", "queue", "export", "--batch", "q", "--min-accuracy", "0.8")
	if r.code != ExitQuality || !strings.Contains(r.stderr, "accuracy=0.7500 macro_f1=0.7333") {
		t.Fatalf("export: exit %d\n%s", r.code, r.stderr)
	}
	rows := parseResults(t, r.stdout)
	if len(rows) != 6 || rows[1]["review"] != "true" || rows[0]["review"] != "false" || rows[0]["label"] != "positive" {
		t.Fatalf("export:\n%s", r.stdout)
	}
	if _, ok := rows[0]["raw_score"]; ok {
		t.Error("raw_score exported without a calibration")
	}
	if r := runMain(t, env, "", "queue", "export", "--batch", "q", "--min-accuracy", "0.75"); r.code != 0 {
		t.Fatalf("export, gate met: exit %d\n%s", r.code, r.stderr)
	}
}

// report --gold computes the same figures from the results and the gold
// file after the fact, and draws them on the page.
func TestReportWithGold(t *testing.T) {
	_, _, out := goldRun(t)
	gold := writeFile(t, "gold.csv", goldInput)
	page := filepath.Join(t.TempDir(), "run.html")
	r := runMain(t, nil, "", "report", out, "--gold", gold, "-o", page, "--target-accuracy", "0.9")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	b, _ := os.ReadFile(page)
	for _, want := range []string{"accuracy <b>0.7500</b>, macro-F1 <b>0.7333</b>", `id="confusion"`, `id="reliability"`, "1 with a blank gold label, 1 that did not end in success"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

// Bad quality flags are refused before any call, naming the flag.
func TestQualityFlagsRefused(t *testing.T) {
	in := writeFile(t, "in.csv", "request_id,text,gold\na,x,pos\n")
	bad := writeFile(t, "bad.json", `{"format":"hfsent-calibration/1","method":"isotonic-shrunk","pooled":{"points":[[0.5,1.5]]}}`)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--gold-column", "gold", "--min-accuracy", "1.5"}, "--min-accuracy must be between 0 and 1"},
		{[]string{"--gold-column", "gold", "--min-macro-f1", "NaN"}, "--min-macro-f1"},
		{[]string{"--review-below", "-0.1"}, "--review-below must be between 0 and 1"},
		{[]string{"--gold-column", "gold", "--target-accuracy", "2"}, "--target-accuracy"},
		{[]string{"--min-accuracy", "0.5"}, "--min-accuracy needs gold labels"},
		{[]string{"--review-out", "r.csv"}, "--review-out needs --review-below"},
		{[]string{"--gold-column", "nope"}, `no gold column "nope" (--gold-column`},
		{[]string{"--label-map", "a=b,A=c"}, "--label-map: pair 2"},
		{[]string{"--calibration-force"}, "--calibration-force needs --calibration"},
		{[]string{"--calibration", bad}, "--calibration " + bad + ": pooled map: point 1 (0.5, 1.5) is outside [0, 1]"},
		{[]string{"--calibration", filepath.Join(t.TempDir(), "none.json")}, "--calibration"},
	} {
		r := runMain(t, nil, "", append([]string{"classify", in, "--provider", "local", "-o", filepath.Join(t.TempDir(), "o.csv")}, c.args...)...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, want 2 naming %q\n%s", c.args, r.code, c.want, r.stderr)
		}
	}
}

// --resume reads a results file with the review column and keeps its
// rows; a resume that would write them otherwise (another
// --review-below) is refused, naming it.
func TestResumeWithReview(t *testing.T) {
	srv := fakehf.Start(scripted(t))
	defer srv.Close()
	in := writeFile(t, "gold.csv", goldInput)
	out := filepath.Join(t.TempDir(), "out.csv")
	env := map[string]string{"HF_TOKEN": token}
	args := func(extra ...string) []string {
		return append([]string{"classify", in, "--endpoint", srv.URL, "--retries", "0", "--no-cache", "-o", out, "--fail-on", "none"}, extra...)
	}
	if r := runMain(t, env, "", args("--review-below", "0.8")...); r.code != 0 {
		t.Fatal(r.stderr)
	}
	first, _ := os.ReadFile(out)
	r := runMain(t, env, "", args("--review-below", "0.8", "--resume")...)
	if r.code != 0 || !strings.Contains(r.stderr, "kept=6") || !strings.Contains(r.stderr, "review=3") {
		t.Fatalf("resume: exit %d\n%s", r.code, r.stderr)
	}
	again, _ := os.ReadFile(out)
	if strings.Count(string(again), "\n") != strings.Count(string(first), "\n") || !strings.HasPrefix(string(again), strings.SplitN(string(first), "\n", 2)[0]) {
		t.Fatalf("resumed file:\n%s\nfirst:\n%s", again, first)
	}
	r = runMain(t, env, "", args("--review-below", "0.9", "--resume")...)
	if r.code != ExitUsage || !strings.Contains(r.stderr, "--review-below 0.8") {
		t.Fatalf("resume with another --review-below: exit %d\n%s", r.code, r.stderr)
	}
}
