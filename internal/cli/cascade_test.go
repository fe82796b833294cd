package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hfsent/hfsent/internal/calibration"
	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/queue/pgtest"
	"github.com/hfsent/hfsent/internal/stage"
)

// cascadeInput is a real CSV of feedback with gold labels: 4 rows the
// embedded model answers POSITIVE or NEGATIVE (right), 3 it answers
// NEUTRAL (wrong: each says how the visit went), which the chat fake
// labels by its words (fakehf.Label): POSITIVE, right for f3 and f5,
// wrong for f7.
const cascadeInput = `request_id,text,gold
f1,"I love it, the engineer was wonderful!",POSITIVE
f2,This was a terrible and awful experience.,NEGATIVE
f3,The visit is booked for Tuesday.,POSITIVE
f4,"Great service, very happy.",POSITIVE
f5,The boiler was replaced on Monday.,POSITIVE
f6,"Horrible, the worst repair ever.",NEGATIVE
f7,The invoice arrived by post.,NEGATIVE
`

// writeLocalCalibration writes, at path, a calibration of the embedded
// model that believes each label of probs with that probability
// (calibration.Constant): a stage that sends on, say, every NEUTRAL
// answer.
func writeLocalCalibration(t *testing.T, path string, probs map[string]float64) {
	t.Helper()
	f, err := (&stage.Config{Provider: "local"}).For()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := calibration.Constant(f, probs).Write(&b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeCascade writes a cascade file in dir: the embedded model, whose
// calibration believes its NEUTRAL answers 10% of the time (so they go
// on below escalate-below 0.5), then a chat model at url.
func writeCascade(t *testing.T, dir, url string, extra string) string {
	t.Helper()
	cal := filepath.Join(dir, "local.json")
	writeLocalCalibration(t, cal, map[string]float64{"NEUTRAL": 0.1, "POSITIVE": 0.95, "NEGATIVE": 0.9})
	c := fmt.Sprintf(`# cheap first: the embedded model, then a chat model for what it is unsure of
stages:
  - provider: local
    calibration: %s
    escalate-below: 0.5
  - provider: chat
    model: strong   # the strong model
    endpoint: %s/v1/chat/completions
    labels: [POSITIVE, NEGATIVE, NEUTRAL]
    price-in: 1
    price-out: 2
%s`, cal, url, extra)
	return writeFile(t, "cascade.yaml", c)
}

// A classify run through a cascade: the rows the embedded model answered
// NEUTRAL (calibrated under escalate-below) are the chat model's, with
// the stage column, both stages' calls and the chat call's cost; the
// summary line and --summary-json count each stage, and with
// --gold-column its accuracy on the rows it answered.
func TestCascadeClassify(t *testing.T) {
	chat := &fakehf.Chat{}
	srv := fakehf.StartChat(chat)
	defer srv.Close()
	dir := t.TempDir()
	in := writeFile(t, "in.csv", cascadeInput)
	out, sum := filepath.Join(dir, "out.csv"), filepath.Join(dir, "sum.json")
	r := runMain(t, nil, "", "classify", in, "--cascade", writeCascade(t, dir, srv.URL, ""), "-o", out,
		"--summary-json", sum, "--gold-column", "gold", "--no-cache")
	if r.code != ExitOK {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	b, _ := os.ReadFile(out)
	if !strings.HasPrefix(string(b), "request_id,status,label,score,outcome,model,attempts,latency_ms,error,queued_ms,started_ms,finished_ms,prompt_tokens,completion_tokens,cost_usd,cached,raw_score,stage,cached_prompt_tokens\n") {
		t.Fatalf("header: %s", strings.SplitN(string(b), "\n", 2)[0])
	}
	rows := parseResults(t, string(b))
	for _, row := range rows {
		up := row["request_id"] == "f3" || row["request_id"] == "f5" || row["request_id"] == "f7"
		switch {
		case up && (row["stage"] != "2" || row["model"] != "strong" || row["attempts"] != "2" || row["cost_usd"] == "" || row["cost_usd"] == "0" || row["prompt_tokens"] == ""):
			t.Errorf("escalated row %v: want stage 2, the chat model, 2 attempts, a cost and tokens", row)
		case !up && (row["stage"] != "1" || row["model"] != "local/vader" || row["attempts"] != "1" || row["cost_usd"] != "0"):
			t.Errorf("row %v: want stage 1, the embedded model, 1 attempt, cost 0", row)
		case row["outcome"] != "success":
			t.Errorf("row %v: want success", row)
		}
	}
	if chat.Calls() != 3 {
		t.Fatalf("the chat model got %d calls, want the 3 rows sent on", chat.Calls())
	}
	for _, k := range []string{"stage1_rows=4 stage1_escalated=3 stage1_calls=7", "stage1_cost_usd=0 stage1_accuracy=1.0000", "stage2_rows=3 stage2_escalated=0 stage2_calls=3 stage2_cost_usd=0.", "stage2_accuracy=0.6667", "accuracy=0.8571"} {
		if !strings.Contains(r.stderr, k) {
			t.Errorf("summary line lacks %q:\n%s", k, r.stderr)
		}
	}
	var js struct {
		Stages []struct {
			Stage            int
			Model            string
			Reached, Rows    int64
			Escalated, Calls int64
			CostUSD          *float64 `json:"cost_usd"`
			Accuracy         *float64
			CacheHits        int64 `json:"cache_hits"`
		}
		CostUSD *float64 `json:"cost_usd"`
	}
	jb, _ := os.ReadFile(sum)
	if err := json.Unmarshal(jb, &js); err != nil || len(js.Stages) != 2 {
		t.Fatalf("summary: %v\n%s", err, jb)
	}
	s1, s2 := js.Stages[0], js.Stages[1]
	if s1.Model != "local/vader" || s1.Reached != 7 || s1.Rows != 4 || s1.Escalated != 3 || s2.Model != "strong" || s2.Reached != 3 || s2.Rows != 3 ||
		s2.Calls != 3 || s2.CostUSD == nil || *s2.CostUSD != *js.CostUSD || *s1.CostUSD != 0 || s1.Accuracy == nil || *s1.Accuracy != 1 {
		t.Fatalf("stages %s", jb)
	}
}

// The cascade file's mistakes and a flag that contradicts it exit 2
// before any call, naming the file, the line and the key.
func TestCascadeFileErrors(t *testing.T) {
	chat := &fakehf.Chat{}
	srv := fakehf.StartChat(chat)
	defer srv.Close()
	in := writeFile(t, "in.csv", cascadeInput)
	dir := t.TempDir()
	cal := filepath.Join(dir, "local.json")
	writeLocalCalibration(t, cal, map[string]float64{"NEUTRAL": 0.1})
	ep := srv.URL + "/v1/chat/completions"
	for _, c := range []struct {
		file string
		args []string
		want string
	}{
		{"stages:\n  - provider: local\n    escalate-below: 0.5\n  - provider: local\n", nil,
			"cascade.yaml:3: stage 1: escalate-below needs a calibration"},
		{"stages:\n  - provider: local\n    calibration: " + cal + "\n    escalate-below: 1.5\n  - provider: local\n", nil,
			"cascade.yaml:4: stage 1: escalate-below must be between 0 and 1, got 1.5"},
		{"stages:\n  - provider: local\n  - provider: chat\n    endpoint: " + ep + "\n    labels: [a, b]\n", nil,
			"cascade.yaml:3: stage 2: --provider chat needs --model"},
		{"stages:\n  - provider: local\n  - model: m\n    concurency: 4\n", nil,
			`cascade.yaml:4: stage 2: unknown key "concurency"`},
		{"stages:\n  - provider: local\n  - model: m\n    concurrency: 0\n", nil,
			"cascade.yaml:4: stage 2: --concurrency must be between 1 and 4096, got 0"},
		{"stages:\n  - provider: local\n", []string{"--model", "m"},
			"--model and --cascade: the cascade's stages set the provider"},
		{"stages:\n  - provider: local\n", []string{"--fallback-model", "local"},
			"--fallback-model and --cascade"},
		{"stages:\n  - provider: chat\n    model: m\n    endpoint: " + ep + "\n    labels: [a, b]\n", []string{"--max-spend", "1"},
			"cascade.yaml:2: stage 1: --max-spend needs the prices of every stage"},
	} {
		f := writeFile(t, "cascade.yaml", c.file)
		r := runMain(t, nil, "", append([]string{"classify", in, "--cascade", f, "-o", filepath.Join(t.TempDir(), "o.csv")}, c.args...)...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, strings.ReplaceAll(c.want, "cascade.yaml", f)) {
			t.Errorf("%q %v: exit %d\n%s\nwant exit 2 and %q", c.file, c.args, r.code, r.stderr, c.want)
		}
	}
	if chat.Calls() != 0 {
		t.Fatalf("%d calls sent", chat.Calls())
	}
}

// --config sets any flag by its long name; the command line wins; a
// mistake in the file, or a value it gave that a check refuses, names
// its line.
func TestConfigFile(t *testing.T) {
	in := writeFile(t, "in.csv", cascadeInput)
	dir := t.TempDir()
	out := filepath.Join(dir, "out.csv")
	cfg := writeFile(t, "hfsent.yaml", "# a local run\nprovider: local\noutput: "+out+"\nconcurrency: 2\ninclude-text: true\nlabel-map:\n  POSITIVE: pos\n")
	r := runMain(t, nil, "", "classify", in, "--config", cfg, "--label-map", "NEGATIVE=neg")
	if r.code != ExitOK {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	rows := parseResults(t, readString(t, out))
	// The file's --include-text and --output; the command line's
	// --label-map, not the file's.
	if rows[0]["text"] == "" || rows[0]["label"] != "POSITIVE" || rows[1]["label"] != "neg" {
		t.Fatalf("rows %v", rows[:2])
	}
	for _, c := range []struct{ file, want string }{
		{"provider: local\nconcurency: 2\n", `hfsent.yaml:2: unknown key "concurency": it is no flag's long name`},
		{"provider: local\n\nconcurrency: 0\n", "hfsent.yaml:3: --concurrency must be between 1 and 4096, got 0"},
		{"provider: local\nmax-chars: lots\n", `hfsent.yaml:2: max-chars: invalid value "lots"`},
		{"provider: chat\nlabels: [a]\nmodel: m\n", "hfsent.yaml:2: --labels: "},
	} {
		f := writeFile(t, "hfsent.yaml", c.file)
		r := runMain(t, nil, "", "classify", in, "--config", f, "-o", filepath.Join(t.TempDir(), "o.csv"))
		if r.code != ExitUsage || !strings.Contains(r.stderr, strings.ReplaceAll(c.want, "hfsent.yaml", f)) {
			t.Errorf("%q: exit %d\n%s\nwant exit 2 and %q", c.file, r.code, r.stderr, c.want)
		}
	}
	// A value the command line gave is not placed in the file.
	f := writeFile(t, "hfsent.yaml", "provider: local\n")
	r = runMain(t, nil, "", "classify", in, "--config", f, "-c", "0", "-o", filepath.Join(t.TempDir(), "o.csv"))
	if r.code != ExitUsage || !strings.Contains(r.stderr, "--concurrency must be between") || strings.Contains(r.stderr, "hfsent.yaml:") {
		t.Errorf("-c 0 on the command line: %s", r.stderr)
	}
}

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// --resume in the middle of a cascade: rows the chat stage failed are
// redone, through the same stages (stage 1's answers from the cache...
// here the embedded model, asked again, for free), the rows finished are
// kept; another cascade file is refused.
func TestCascadeResume(t *testing.T) {
	chat := &fakehf.Chat{}
	var down atomic.Bool
	down.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if down.Load() && strings.Contains(string(b), "invoice") {
			http.Error(w, `{"error":{"message":"down"}}`, http.StatusInternalServerError)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		chat.ServeHTTP(w, r)
	}))
	defer srv.Close()
	dir := t.TempDir()
	in := writeFile(t, "in.csv", cascadeInput)
	out := filepath.Join(dir, "out.csv")
	cascade := writeCascade(t, dir, srv.URL, "    retries: 0\n")
	r := runMain(t, nil, "", "classify", in, "--cascade", cascade, "-o", out, "--no-cache")
	if r.code != ExitRowsFailed {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	rows := parseResults(t, readString(t, out))
	if f7 := rows[6]; f7["outcome"] != "upstream_failed" || f7["stage"] != "2" || f7["attempts"] != "2" {
		t.Fatalf("f7 %v; want upstream_failed at stage 2", f7)
	}
	calls := chat.Calls()
	// The server mends.
	down.Store(false)
	r = runMain(t, nil, "", "classify", in, "--cascade", cascade, "-o", out, "--no-cache", "--resume")
	if r.code != ExitOK || !strings.Contains(r.stderr, "kept=6") {
		t.Fatalf("resume: exit %d\n%s", r.code, r.stderr)
	}
	rows = parseResults(t, readString(t, out))
	if f7 := rows[6]; f7["outcome"] != "success" || f7["stage"] != "2" || f7["label"] != "POSITIVE" || chat.Calls() != calls+1 {
		t.Fatalf("f7 %v after resume, %d more chat calls; want success at stage 2, one call", f7, chat.Calls()-calls)
	}
	if len(rows) != 7 || rows[2]["stage"] != "2" || rows[0]["stage"] != "1" {
		t.Fatalf("rows %v", rows)
	}
	// Another cascade (another threshold) is another run: refused.
	other := writeCascade(t, t.TempDir(), srv.URL, "    retries: 1\n")
	b, _ := os.ReadFile(other)
	if err := os.WriteFile(other, []byte(strings.Replace(string(b), "escalate-below: 0.5", "escalate-below: 0.6", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	r = runMain(t, nil, "", "classify", in, "--cascade", other, "-o", out, "--no-cache", "--resume")
	if r.code != ExitUsage || !strings.Contains(r.stderr, "a --cascade whose stages' settings hash to") {
		t.Fatalf("resume with another cascade: exit %d\n%s", r.code, r.stderr)
	}
}

// --dry-run of a cascade: each later stage's rows from the file's tuned
// escalation rate, or a line saying it cannot estimate them.
func TestCascadeDryRun(t *testing.T) {
	chat := &fakehf.Chat{}
	srv := fakehf.StartChat(chat)
	defer srv.Close()
	dir := t.TempDir()
	in := writeFile(t, "in.csv", cascadeInput)
	untuned := writeCascade(t, dir, srv.URL, "")
	r := runMain(t, nil, "", "classify", in, "--cascade", untuned, "--dry-run", "--no-cache")
	if r.code != ExitOK || !strings.Contains(r.stderr, "records no tuned escalation rates") {
		t.Fatalf("untuned: exit %d\n%s", r.code, r.stderr)
	}
	b, _ := os.ReadFile(untuned)
	tuned := writeFile(t, "tuned.yaml", strings.Replace(string(b), "    escalate-below: 0.5\n", "    escalate-below: 0.5\n    tuned:\n      escalates: 0.5\n", 1))
	sum := filepath.Join(dir, "dry.json")
	r = runMain(t, nil, "", "classify", in, "--cascade", tuned, "--dry-run", "--no-cache", "--summary-json", sum)
	// 7 rows, half expected to reach stage 2: 3.5, rounded 4.
	m := regexp.MustCompile(`dry_run stage=2 model=strong reach=0\.5000 would_send=4 cache_hits=0 prompt_tokens=\d+ completion_tokens=\d+ cost_usd=\S+ seconds=\d+`)
	if r.code != ExitOK || m.FindString(r.stderr) == "" {
		t.Fatalf("tuned: exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(readString(t, sum), `"stage": 2`) || chat.Calls() != 0 {
		t.Fatalf("summary %s; %d calls", readString(t, sum), chat.Calls())
	}
}

// A stage's fleet budget is its own: the chat stage joins budget "chat"
// (with --db), the embedded model's stage none; a stage's budget with no
// database is refused before any call.
func TestCascadeStageBudget(t *testing.T) {
	db := pgtest.URL(t)
	env := map[string]string{dbEnv: db}
	if r := runMain(t, env, "", "budget", "set", "chat", "--cap", "2"); r.code != 0 {
		t.Fatalf("budget set: %s", r.stderr)
	}
	chat := &fakehf.Chat{}
	srv := fakehf.StartChat(chat)
	defer srv.Close()
	dir := t.TempDir()
	in := writeFile(t, "in.csv", cascadeInput)
	cascade := writeCascade(t, dir, srv.URL, "    budget: chat\n")
	r := runMain(t, env, "", "classify", in, "--cascade", cascade, "-o", filepath.Join(dir, "out.csv"), "--no-cache")
	if r.code != ExitOK || strings.Count(r.stderr, "joined the budget") != 1 || !strings.Contains(r.stderr, "budget=chat") || chat.Calls() != 3 {
		t.Fatalf("exit %d, %d chat calls\n%s", r.code, chat.Calls(), r.stderr)
	}
	r = runMain(t, nil, "", "classify", in, "--cascade", cascade, "-o", filepath.Join(dir, "out2.csv"), "--no-cache")
	if r.code != ExitUsage || !strings.Contains(r.stderr, "--db is required") || chat.Calls() != 3 {
		t.Fatalf("no database: exit %d\n%s", r.code, r.stderr)
	}
}

// --max-spend counts every stage's calls: a cascade whose first stage is
// free (the embedded model) and sends every row on to a priced chat stage
// stops once the chat stage's spend reaches the limit (exit 1, the rest
// not_attempted, spent within it). Charged to stage 1 alone (which spends
// nothing), the run would send every row on and pass the limit.
func TestCascadeMaxSpendCountsEveryStage(t *testing.T) {
	chat := &fakehf.Chat{}
	srv := fakehf.StartChat(chat)
	defer srv.Close()
	dir := t.TempDir()
	const n = 60
	var b strings.Builder
	b.WriteString("request_id,text\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "v%d,The visit is booked for day %d.\n", i, i) // NEUTRAL to the embedded model: sent on
	}
	in := writeFile(t, "in.csv", b.String())
	// $100 a million tokens in and out: a chat call costs about half a cent.
	casc := writeCascade(t, dir, srv.URL, "    concurrency: 1\n")
	casc = writeFile(t, "dear.yaml", strings.NewReplacer("price-in: 1\n", "price-in: 100\n", "price-out: 2\n", "price-out: 100\n").Replace(readString(t, casc)))
	out, sum := filepath.Join(dir, "out.csv"), filepath.Join(dir, "sum.json")
	r := runMain(t, nil, "", "classify", in, "--cascade", casc, "-o", out, "--summary-json", sum, "--no-cache", "--max-spend", "0.05")
	s := readSummary(t, sum)
	if r.code != ExitRowsFailed || s.ExitReason != "max_spend" || !strings.Contains(r.stderr, "--max-spend") {
		t.Fatalf("exit %d (%s), want 1 max_spend\n%s", r.code, s.ExitReason, r.stderr)
	}
	if s.CostUSD == nil || *s.CostUSD > 0.05 || *s.CostUSD == 0 {
		t.Fatalf("cost %v, want spent and within --max-spend 0.05\n%s", s.CostUSD, readString(t, sum))
	}
	stopped := 0
	for _, row := range parseResults(t, readString(t, out)) {
		if row["outcome"] == "not_attempted" {
			stopped++
		}
	}
	if stopped == 0 || chat.Calls() == 0 || chat.Calls() >= n {
		t.Fatalf("%d rows not_attempted, %d chat calls of %d rows\n%s", stopped, chat.Calls(), n, r.stderr)
	}
}
