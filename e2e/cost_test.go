package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/queue/pgtest"
)

// costFlags: the fake chat server, a cache directory, prices.
func costFlags(url, cacheDir string, more ...string) []string {
	return append(chatFlags(url, "--cache-dir", cacheDir, "--price-in", "0.15", "--price-out", "0.6", "--no-progress"), more...)
}

func summaryOf(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

// TestTwoProcessesShareTheCache: two classify processes at once on one
// cache directory, on overlapping rows, both finish; a third run of the
// same rows makes no call, every row cached, the cost column 0 and the
// summary's cost_usd 0 with the hits' saving.
func TestTwoProcessesShareTheCache(t *testing.T) {
	f := &fakehf.Chat{Latency: 2 * time.Millisecond}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	dir := t.TempDir()
	cacheDir := filepath.Join(dir, "cache")
	in := writeInput(t, dir, 300, uniqText)
	var wg sync.WaitGroup
	results := make([]result, 2)
	for i := range results {
		wg.Go(func() {
			out := filepath.Join(dir, fmt.Sprintf("out%d.csv", i))
			results[i] = runBin(t, []string{"HF_TOKEN=hf_x"}, append([]string{"classify", in, "-o", out, "-c", "4"}, costFlags(srv.URL, cacheDir)...)...)
		})
	}
	wg.Wait()
	for i, r := range results {
		if r.code != 0 {
			t.Fatalf("process %d: exit %d\n%s", i, r.code, r.stderr)
		}
	}
	first := f.Calls()
	if first > 600 || first < 300 {
		t.Fatalf("%d calls for two runs of 300 rows", first)
	}
	// Each row the one found stored by the other was a hit.
	early := 600 - first
	out := filepath.Join(dir, "out3.csv")
	sum := filepath.Join(dir, "sum.json")
	r := runBin(t, []string{"HF_TOKEN=hf_x"}, append([]string{"classify", in, "-o", out, "--summary-json", sum}, costFlags(srv.URL, cacheDir)...)...)
	if r.code != 0 || f.Calls() != first {
		t.Fatalf("third run: exit %d, %d calls\n%s", r.code, f.Calls()-first, r.stderr)
	}
	rows := readResults(t, out)
	checkComplete(t, rows, 300)
	for _, row := range rows {
		if row["cached"] != "true" || row["attempts"] != "0" || row["cost_usd"] != "0" {
			t.Fatalf("row %v", row)
		}
	}
	s := summaryOf(t, sum)
	if s["cache_hits"] != 300.0 || s["calls"] != 0.0 || s["cost_usd"] != 0.0 || s["saved_usd"].(float64) <= 0 {
		t.Fatalf("summary %v", s)
	}
	if !strings.Contains(r.stderr, "cache_hits=300") || !strings.Contains(r.stderr, "cost_usd=0 ") {
		t.Errorf("summary line: %s", r.stderr)
	}
	st := runBin(t, nil, "cache", "stats", "--cache-dir", cacheDir)
	if st.code != 0 || !strings.Contains(st.stdout, "entries  300") || !strings.Contains(st.stdout, fmt.Sprintf("hits     %d\n", 300+early)) {
		t.Errorf("cache stats: %d\n%s%s", st.code, st.stdout, st.stderr)
	}
}

// TestCostColumnSumsToTheSummary: a paid run's cost_usd column adds up
// to the summary's cost_usd, which is the fake's reported usage priced.
func TestCostColumnSumsToTheSummary(t *testing.T) {
	srv := fakehf.StartChat(&fakehf.Chat{})
	defer srv.Close()
	dir := t.TempDir()
	in := writeInput(t, dir, 50, func(i int) string {
		if i == 3 {
			return "#unlabelled# hmm"
		}
		return uniqText(i)
	})
	out, sum := filepath.Join(dir, "out.csv"), filepath.Join(dir, "sum.json")
	r := runBin(t, []string{"HF_TOKEN=hf_x"}, append([]string{"classify", in, "-o", out, "--summary-json", sum}, costFlags(srv.URL, filepath.Join(dir, "c"))...)...)
	if r.code != 1 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	total := 0.0
	for _, row := range readResults(t, out) {
		v, err := strconv.ParseFloat(row["cost_usd"], 64)
		if err != nil || v <= 0 {
			t.Fatalf("row %v: every call here reported usage", row)
		}
		total += v
	}
	s := summaryOf(t, sum)
	want := (s["prompt_tokens"].(float64)*0.15 + s["completion_tokens"].(float64)*0.6) / 1e6
	if got := s["cost_usd"].(float64); math.Abs(got-total) > 1e-9 || math.Abs(got-want) > 1e-9 {
		t.Fatalf("cost column sums to %g, summary %g, usage priced %g", total, got, want)
	}
}

// TestKill9LeavesAUsableCache: a run killed -9 while it writes the cache
// leaves a cache the next run opens and uses: the rows finished before the
// kill are (mostly) hits, nothing is answered wrong, and the run ends 0.
func TestKill9LeavesAUsableCache(t *testing.T) {
	// 20 ms a call at -c 4: about 200 rows a second, so that each killed
	// run lives past the cache writer's longest wait (1 s: a kill -9 loses
	// at most the last second's answers, never the file).
	f := &fakehf.Chat{Latency: 20 * time.Millisecond}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	dir := t.TempDir()
	cacheDir := filepath.Join(dir, "cache")
	const n = 600
	in := writeInput(t, dir, n, uniqText)
	for round := range 3 {
		out := filepath.Join(dir, fmt.Sprintf("killed%d.csv", round))
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd, _ := hfsent(t, ctx, append([]string{"classify", in, "-o", out, "-c", "4"}, costFlags(srv.URL, cacheDir)...)...)
		cmd.Env = append(cmd.Env, "HF_TOKEN=hf_x")
		began := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitRows(t, out, 50*(round+1))
		time.Sleep(time.Until(began.Add(1500 * time.Millisecond)))
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		cancel()
	}
	before := f.Calls()
	out := filepath.Join(dir, "after.csv")
	r := runBin(t, []string{"HF_TOKEN=hf_x"}, append([]string{"classify", in, "-o", out}, costFlags(srv.URL, cacheDir)...)...)
	if r.code != 0 {
		t.Fatalf("after kill -9: exit %d\n%s", r.code, r.stderr)
	}
	rows := readResults(t, out)
	checkComplete(t, rows, n)
	hits := 0
	for i, row := range rows {
		if row["cached"] == "true" {
			hits++
		}
		want := "positive"
		if strings.Contains(uniqText(i), "terrible") {
			want = "negative"
		}
		if row["label"] != want {
			t.Fatalf("row %d answered %s after the kill", i, row["label"])
		}
	}
	if hits < 100 || f.Calls()-before != int64(n-hits) {
		t.Fatalf("%d hits, %d calls after the killed runs", hits, f.Calls()-before)
	}
	if strings.Contains(r.stderr, "damaged") {
		t.Errorf("the cache was found damaged:\n%s", r.stderr)
	}
}

// TestDamagedCacheIsRefusedNamingTheWayOut: a cache file that is not a
// database is refused before any call (exit 2), naming the file and
// hfsent cache clear, which makes a new one.
func TestDamagedCacheIsRefusedNamingTheWayOut(t *testing.T) {
	f := &fakehf.Chat{}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	dir := t.TempDir()
	cacheDir := filepath.Join(dir, "cache")
	in := writeInput(t, dir, 5, uniqText)
	if r := runBin(t, []string{"HF_TOKEN=hf_x"}, append([]string{"classify", in, "-o", filepath.Join(dir, "a.csv")}, costFlags(srv.URL, cacheDir)...)...); r.code != 0 {
		t.Fatal(r.stderr)
	}
	file := filepath.Join(cacheDir, "responses.sqlite")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	copy(b[:16], "not sqlite at all")
	os.WriteFile(file, b, 0o600)
	calls := f.Calls()
	r := runBin(t, []string{"HF_TOKEN=hf_x"}, append([]string{"classify", in, "-o", filepath.Join(dir, "b.csv")}, costFlags(srv.URL, cacheDir)...)...)
	if r.code != 2 || f.Calls() != calls || !strings.Contains(r.stderr, file) || !strings.Contains(r.stderr, "hfsent cache clear") || !strings.Contains(r.stderr, "--no-cache") {
		t.Fatalf("exit %d, %d calls\n%s", r.code, f.Calls()-calls, r.stderr)
	}
	if c := runBin(t, nil, "cache", "clear", "--cache-dir", cacheDir); c.code != 0 {
		t.Fatalf("cache clear: %d %s", c.code, c.stderr)
	}
	if r := runBin(t, []string{"HF_TOKEN=hf_x"}, append([]string{"classify", in, "-o", filepath.Join(dir, "c.csv")}, costFlags(srv.URL, cacheDir)...)...); r.code != 0 {
		t.Fatalf("after cache clear: %d %s", r.code, r.stderr)
	}
}

// TestMaxSpendStopsAndResumeGoesOn: --max-spend stops the sending (exit
// 1, naming the flag, the rest not_attempted and spent within the limit);
// --resume with a higher limit finishes the file.
func TestMaxSpendStopsAndResumeGoesOn(t *testing.T) {
	f := &fakehf.Chat{Latency: 5 * time.Millisecond}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	dir := t.TempDir()
	const n = 200
	in := writeInput(t, dir, n, uniqText)
	out, sum := filepath.Join(dir, "out.csv"), filepath.Join(dir, "sum.json")
	// $100 a million tokens: a row costs about half a cent.
	flags := chatFlags(srv.URL, "--cache-dir", filepath.Join(dir, "c"), "--price-in", "100", "--price-out", "100", "--no-progress", "-c", "8")
	r := runBin(t, []string{"HF_TOKEN=hf_x"}, append([]string{"classify", in, "-o", out, "--summary-json", sum, "--max-spend", "0.25"}, flags...)...)
	if r.code != 1 || !strings.Contains(r.stderr, "--max-spend") || !strings.Contains(r.stderr, "--resume") {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	s := summaryOf(t, sum)
	if s["cost_usd"].(float64) > 0.25 || s["exit_reason"] != "max_spend" {
		t.Fatalf("summary %v", s)
	}
	rows := readResults(t, out)
	stopped := 0
	for _, row := range rows {
		if row["outcome"] == "not_attempted" {
			stopped++
		}
	}
	if len(rows) != n || stopped == 0 || stopped == n {
		t.Fatalf("%d rows, %d not_attempted", len(rows), stopped)
	}
	r = runBin(t, []string{"HF_TOKEN=hf_x"}, append([]string{"classify", in, "-o", out, "--resume", "--max-spend", "100"}, flags...)...)
	if r.code != 0 {
		t.Fatalf("resume: exit %d\n%s", r.code, r.stderr)
	}
	checkComplete(t, readResults(t, out), n)
}

// TestDryRunMakesNoCall: --dry-run reads and checks the input, looks the
// cache up, and prints what a run would do without a call and without
// touching -o; its token estimate is within 20% of what the run then
// reports.
func TestDryRunMakesNoCall(t *testing.T) {
	f := &fakehf.Chat{}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	dir := t.TempDir()
	cacheDir := filepath.Join(dir, "cache")
	in := writeInput(t, dir, 100, func(i int) string {
		if i == 9 {
			return ""
		}
		return fmt.Sprintf("The delivery took %d days and the box was damaged, but support replaced it quickly.", i)
	})
	out, sum := filepath.Join(dir, "out.csv"), filepath.Join(dir, "dry.json")
	os.WriteFile(out, []byte("keep me\n"), 0o644)
	r := runBin(t, []string{"HF_TOKEN=hf_x"}, append([]string{"classify", in, "-o", out, "--dry-run", "--summary-json", sum}, costFlags(srv.URL, cacheDir)...)...)
	if r.code != 0 || f.Calls() != 0 {
		t.Fatalf("dry run: exit %d, %d calls\n%s", r.code, f.Calls(), r.stderr)
	}
	if b, _ := os.ReadFile(out); string(b) != "keep me\n" {
		t.Fatalf("the dry run wrote -o: %q", b)
	}
	if !strings.Contains(r.stderr, "dry_run rows=100 would_send=99 cache_hits=0 invalid_input=1") || !strings.Contains(r.stderr, "cost_usd=") {
		t.Fatalf("dry run line: %s", r.stderr)
	}
	est := summaryOf(t, sum)["estimate"].(map[string]any)
	real := filepath.Join(dir, "real.json")
	if r := runBin(t, []string{"HF_TOKEN=hf_x"}, append([]string{"classify", in, "-o", out, "--summary-json", real}, costFlags(srv.URL, cacheDir)...)...); r.code != 1 {
		t.Fatalf("run: %d %s", r.code, r.stderr)
	}
	s := summaryOf(t, real)
	for _, k := range []string{"prompt_tokens", "completion_tokens", "cost_usd"} {
		got, want := est[k].(float64), s[k].(float64)
		if math.Abs(got-want) > 0.2*want {
			t.Errorf("estimated %s %g, the run reported %g", k, got, want)
		}
	}
	// Now every row is cached: the dry run says so.
	r = runBin(t, []string{"HF_TOKEN=hf_x"}, append([]string{"classify", in, "-o", out, "--dry-run"}, costFlags(srv.URL, cacheDir)...)...)
	if !strings.Contains(r.stderr, "would_send=0 cache_hits=99") || f.Calls() != 99 {
		t.Fatalf("dry run after: %s (%d calls)", r.stderr, f.Calls())
	}
}

// TestFleetCacheInTheDatabase: a worker keeps its answers in the batch's
// PostgreSQL, with their cost; a second batch of the same texts is
// answered by another worker from there, with no call, cached in the
// export, and queue status shows the spend and the hits.
func TestFleetCacheInTheDatabase(t *testing.T) {
	db := pgtest.URL(t)
	f := &fakehf.Chat{}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	rows := clientRows("c", 40)
	push := []string{"--provider", "chat", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--labels", "positive,negative"}
	pushBatch(t, db, "first", rows, push...)
	flags := chatFlags(srv.URL, "--price-in", "0.15", "--price-out", "0.6")
	w := startWorker(t, db, append([]string{"--batch", "first", "--exit-when-done"}, flags...)...)
	if code := w.wait(t); code != 0 {
		t.Fatalf("worker exit %d\n%s", code, w.stderr.String())
	}
	calls := f.Calls()
	for _, r := range exportRows(t, db, "first") {
		if v, err := strconv.ParseFloat(r["cost_usd"], 64); err != nil || v <= 0 || r["cached"] != "false" {
			t.Fatalf("export row %v", r)
		}
	}
	pushBatch(t, db, "second", rows, push...)
	w = startWorker(t, db, append([]string{"--batch", "second", "--exit-when-done"}, flags...)...)
	if code := w.wait(t); code != 0 {
		t.Fatalf("second worker exit %d\n%s", code, w.stderr.String())
	}
	if f.Calls() != calls {
		t.Fatalf("the second batch made %d calls", f.Calls()-calls)
	}
	for _, r := range exportRows(t, db, "second") {
		if r["cached"] != "true" || r["attempts"] != "0" || r["cost_usd"] != "0" || r["outcome"] != "success" {
			t.Fatalf("export row %v", r)
		}
	}
	st := runBin(t, qenv(db), "queue", "status", "--batch", "first")
	if st.code != 0 || !strings.Contains(st.stdout, "spend:    cost_usd=") {
		t.Fatalf("queue status: %d\n%s%s", st.code, st.stdout, st.stderr)
	}
	st = runBin(t, qenv(db), "queue", "status", "--batch", "second")
	if !strings.Contains(st.stdout, "cache_hits=40") {
		t.Fatalf("queue status of the second batch:\n%s", st.stdout)
	}
	if cs := runBin(t, nil, "cache", "stats", "--db", db); cs.code != 0 || !strings.Contains(cs.stdout, "entries  40") || !strings.Contains(cs.stdout, "hits     40") {
		t.Fatalf("cache stats --db: %d\n%s%s", cs.code, cs.stdout, cs.stderr)
	}
}
