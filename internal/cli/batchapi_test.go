package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/batchapi"
	"github.com/hfsent/hfsent/internal/batchrun"
	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/provider"
)

const batchKey = "sk-batch-0123456789abcdefghij"

// batchRun runs classify --batch-api against the fake, with a poll fast
// enough for a test.
func batchRun(t *testing.T, url, in, out string, more ...string) run {
	t.Helper()
	args := append([]string{"classify", in, "-o", out, "--token-env", "OPENAI_API_KEY", "--no-cache",
		"--batch-api", "--batch-poll", "10ms", "--no-progress"}, chatArgs(url)...)
	return runMain(t, map[string]string{"OPENAI_API_KEY": batchKey}, "", append(args, more...)...)
}

func manyRows(n int, text func(i int) string) string {
	var b strings.Builder
	b.WriteString("request_id,text\n")
	for i := range n {
		fmt.Fprintf(&b, "id%d,%s\n", i, text(i))
	}
	return b.String()
}

func readRows(t *testing.T, path string) []map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parseResults(t, string(b))
}

// A clean run: every row answered from one batch, in input order, with the
// live run's columns and labels; a repeated text is sent once; the key is
// nowhere.
func TestBatchCleanRun(t *testing.T) {
	f := &fakehf.Batch{Token: batchKey}
	srv := fakehf.StartBatch(f)
	defer srv.Close()
	defer f.Close()
	in := writeFile(t, "in.csv", "request_id,text\n1,lovely staff\n2,terrible wait\n3,lovely staff\n4,\n")
	out := filepath.Join(t.TempDir(), "out.csv")
	r := batchRun(t, srv.URL, in, out)
	if r.code != 1 { // row 4 is invalid_input
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	rows := readRows(t, out)
	want := []struct{ id, outcome, label, attempts string }{
		{"1", "success", "positive", "1"}, {"2", "success", "negative", "1"}, {"3", "success", "positive", "0"}, {"4", "invalid_input", "", "0"},
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows: %v", len(rows), rows)
	}
	for i, w := range want {
		if g := rows[i]; g["request_id"] != w.id || g["outcome"] != w.outcome || g["label"] != w.label || g["attempts"] != w.attempts {
			t.Errorf("row %d: %v, want %+v", i+1, g, w)
		}
	}
	if rows[0]["prompt_tokens"] == "" {
		t.Errorf("row 1 has no tokens: %v", rows[0])
	}
	c := f.Counts()
	if c.Uploads != 1 || c.Creates != 1 || c.Lines != 2 || c.Live != 0 {
		t.Errorf("counts %+v, want one upload, one batch of 2 lines, no live call", c)
	}
	if !strings.Contains(r.stderr, "answered=2 failed=0 resubmitted=0 missing=0") || !strings.Contains(r.stderr, " calls=0") {
		t.Errorf("summary: %s", r.stderr)
	}
	b, _ := os.ReadFile(out)
	j, _ := os.ReadFile(out + batchrun.JournalSuffix)
	if strings.Contains(r.stderr, batchKey) || strings.Contains(string(b), batchKey) || strings.Contains(string(j), batchKey) {
		t.Error("the key is shown")
	}
}

// Over --batch-max-requests the rows are split into batches, submitted in
// order; error-file lines map through the live error table.
func TestBatchSplitAndErrorLines(t *testing.T) {
	f := &fakehf.Batch{Token: batchKey, FailLine: func(id string, _ []byte) (int, string, bool) {
		return 400, "context_length_exceeded", id == "r4"
	}}
	srv := fakehf.StartBatch(f)
	defer srv.Close()
	defer f.Close()
	in := writeFile(t, "in.csv", manyRows(10, func(i int) string { return fmt.Sprintf("lovely %d", i) }))
	out := filepath.Join(t.TempDir(), "out.csv")
	r := batchRun(t, srv.URL, in, out, "--batch-max-requests", "4")
	if r.code != 1 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	rows := readRows(t, out)
	for i, g := range rows {
		want := "success"
		if i == 4 {
			want = "upstream_request_rejected"
		}
		if g["outcome"] != want || g["request_id"] != fmt.Sprintf("id%d", i) {
			t.Errorf("row %d: %v, want %s", i, g, want)
		}
	}
	if c := f.Counts(); c.Creates != 3 || c.Uploads != 3 || c.Lines != 10 {
		t.Errorf("counts %+v, want 3 batches (4+4+2)", c)
	}
	if !strings.Contains(r.stderr, "answered=9 failed=1") {
		t.Errorf("summary: %s", r.stderr)
	}
}

// A batch that expires keeps the rows it answered; only the missing rows
// are submitted again, in a new batch; after --batch-max-submissions they
// are upstream_timeout (not final) and the closing line says so.
func TestBatchExpiryResubmitsOnlyMissingRows(t *testing.T) {
	f := &fakehf.Batch{Token: batchKey, ExpireAfter: 4}
	srv := fakehf.StartBatch(f)
	defer srv.Close()
	defer f.Close()
	in := writeFile(t, "in.csv", manyRows(10, func(i int) string { return fmt.Sprintf("lovely %d", i) }))
	out := filepath.Join(t.TempDir(), "out.csv")
	sumFile := filepath.Join(t.TempDir(), "sum.json")
	r := batchRun(t, srv.URL, in, out, "--batch-max-submissions", "2", "--summary-json", sumFile)
	if r.code != 1 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var js struct {
		Rows    int `json:"rows"`
		Batches struct {
			Answered, Resubmitted, Missing int
		} `json:"batches"`
	}
	if b, _ := os.ReadFile(sumFile); json.Unmarshal(b, &js) != nil || js.Rows != 10 || js.Batches.Answered != 8 || js.Batches.Resubmitted != 6 || js.Batches.Missing != 2 {
		t.Errorf("--summary-json: %+v", js)
	}
	rows := readRows(t, out)
	ok, timeout := 0, 0
	for _, g := range rows {
		switch g["outcome"] {
		case "success":
			ok++
		case "upstream_timeout":
			timeout++
			if g["attempts"] != "2" {
				t.Errorf("row %v: want attempts 2", g)
			}
		}
	}
	// 4 in the first batch, 4 of the 6 left in the second, 2 missing.
	if ok != 8 || timeout != 2 {
		t.Errorf("%d success, %d upstream_timeout; want 8 and 2: %v", ok, timeout, rows)
	}
	if c := f.Counts(); c.Creates != 2 || c.Lines != 8 {
		t.Errorf("counts %+v: want 2 batches, 8 lines answered (10 sent, then the 6 missing)", c)
	}
	if !strings.Contains(r.stderr, "submitted=16 answered=8 failed=0 resubmitted=6 missing=2") {
		t.Errorf("closing line: %s", r.stderr)
	}
}

// A batch refused for the enqueued-token limit is created again once the
// batch before it has ended, from the same file; the user is told.
func TestBatchTokenLimitWaitsForEarlierBatches(t *testing.T) {
	in := writeFile(t, "in.csv", manyRows(6, func(i int) string { return fmt.Sprintf("lovely %d", i) }))
	// Room for one batch of 3 lines' tokens (150 each), not two.
	f := &fakehf.Batch{Token: batchKey, TokenLimit: 600, Steps: 2}
	srv := fakehf.StartBatch(f)
	defer srv.Close()
	defer f.Close()
	out := filepath.Join(t.TempDir(), "out.csv")
	r := batchRun(t, srv.URL, in, out, "--batch-max-requests", "3")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for i, g := range readRows(t, out) {
		if g["outcome"] != "success" || g["attempts"] != "1" {
			t.Errorf("row %d: %v", i, g)
		}
	}
	if c := f.Counts(); c.Creates != 3 || c.Uploads != 2 {
		t.Errorf("counts %+v: want 2 uploads and 3 creates (one refused, created again)", c)
	}
	if !strings.Contains(r.stderr, "enqueued-token limit is full") || !strings.Contains(r.stderr, "has ended") {
		t.Errorf("the wait is not explained: %s", r.stderr)
	}
}

// A malformed output line, or a custom_id the run never sent: a clear
// error naming the file and the line, exit 1, nothing written as answered.
func TestBatchGarbledOutputIsAnError(t *testing.T) {
	for name, line := range map[string]string{
		"malformed": `{"custom_id": "r1", "response": {`,
		"unknown":   `{"id":"x","custom_id":"r99","response":{"status_code":200,"request_id":"q","body":{}},"error":null}`,
	} {
		t.Run(name, func(t *testing.T) {
			f := &fakehf.Batch{Token: batchKey, Garble: func(id string) ([]byte, bool) { return []byte(line), id == "r1" }}
			srv := fakehf.StartBatch(f)
			defer srv.Close()
			defer f.Close()
			in := writeFile(t, "in.csv", manyRows(3, func(i int) string { return fmt.Sprintf("lovely %d", i) }))
			out := filepath.Join(t.TempDir(), "out.csv")
			r := batchRun(t, srv.URL, in, out)
			if r.code != 1 || !strings.Contains(r.stderr, "line ") || !strings.Contains(r.stderr, "output file") {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			if rows := readRows(t, out); len(rows) != 0 {
				t.Errorf("rows written: %v", rows)
			}
		})
	}
}

// The rows no batch answered go live with --batch-fallback live, through
// the usual guard; the summary counts those calls.
func TestBatchFallbackLive(t *testing.T) {
	f := &fakehf.Batch{Token: batchKey, ExpireAfter: 3}
	srv := fakehf.StartBatch(f)
	defer srv.Close()
	defer f.Close()
	in := writeFile(t, "in.csv", manyRows(5, func(i int) string { return fmt.Sprintf("lovely %d", i) }))
	out := filepath.Join(t.TempDir(), "out.csv")
	r := batchRun(t, srv.URL, in, out, "--batch-max-submissions", "1", "--batch-fallback", "live")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for i, g := range readRows(t, out) {
		if g["outcome"] != "success" {
			t.Errorf("row %d: %v", i, g)
		}
	}
	if c := f.Counts(); c.Live != 2 || c.Lines != 3 {
		t.Errorf("counts %+v: want 3 rows by batch, 2 live", c)
	}
	if !strings.Contains(r.stderr, " calls=2") || !strings.Contains(r.stderr, "answered=3 failed=0 resubmitted=0 missing=2") {
		t.Errorf("summary: %s", r.stderr)
	}
}

// A cache hit is never submitted, and a batch's answers fill the cache;
// the spend is at the batch price (--batch-discount of the live one).
func TestBatchCacheAndBatchPrice(t *testing.T) {
	f := &fakehf.Batch{Token: batchKey}
	srv := fakehf.StartBatch(f)
	defer srv.Close()
	defer f.Close()
	cacheDir := t.TempDir()
	in := writeFile(t, "in.csv", manyRows(4, func(i int) string { return fmt.Sprintf("lovely %d", i) }))
	args := func(out string) []string {
		return append([]string{"classify", in, "-o", out, "--token-env", "OPENAI_API_KEY", "--cache-dir", cacheDir,
			"--batch-api", "--batch-poll", "10ms", "--no-progress", "--price-in", "1", "--price-out", "2", "--batch-discount", "0.5"}, chatArgs(srv.URL)...)
	}
	out1 := filepath.Join(t.TempDir(), "out.csv")
	r := runMain(t, map[string]string{"OPENAI_API_KEY": batchKey}, "", args(out1)...)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for i, g := range readRows(t, out1) {
		var p, c int
		var usd float64
		fmt.Sscan(g["prompt_tokens"], &p)
		fmt.Sscan(g["completion_tokens"], &c)
		fmt.Sscan(g["cost_usd"], &usd)
		want := (float64(p)*1 + float64(c)*2) / 1e6 * 0.5
		if p == 0 || usd < want*0.999 || usd > want*1.001 {
			t.Errorf("row %d: cost_usd %s for %d+%d tokens, want %.8f (half the live price)", i, g["cost_usd"], p, c, want)
		}
	}
	// A second run of the same rows: every one a cache hit, nothing uploaded.
	out2 := filepath.Join(t.TempDir(), "out.csv")
	r = runMain(t, map[string]string{"OPENAI_API_KEY": batchKey}, "", args(out2)...)
	if r.code != 0 {
		t.Fatalf("second run: exit %d: %s", r.code, r.stderr)
	}
	for i, g := range readRows(t, out2) {
		if g["cached"] != "true" || g["outcome"] != "success" {
			t.Errorf("second run row %d: %v", i, g)
		}
	}
	if c := f.Counts(); c.Uploads != 1 || c.Creates != 1 || c.Lines != 4 {
		t.Errorf("counts %+v: the second run submitted rows the cache held", c)
	}
}

// --dry-run --batch-api estimates at the batch price, and sends nothing.
func TestBatchDryRunAtBatchPrice(t *testing.T) {
	f := &fakehf.Batch{Token: batchKey}
	srv := fakehf.StartBatch(f)
	defer srv.Close()
	defer f.Close()
	in := writeFile(t, "in.csv", manyRows(10, func(i int) string { return fmt.Sprintf("lovely %d", i) }))
	cost := func(more ...string) float64 {
		args := append([]string{"classify", in, "--dry-run", "--token-env", "OPENAI_API_KEY", "--no-cache", "--price-in", "1", "--price-out", "2"}, chatArgs(srv.URL)...)
		r := runMain(t, map[string]string{"OPENAI_API_KEY": batchKey}, "", append(args, more...)...)
		i := strings.Index(r.stderr+r.stdout, "cost_usd=")
		if r.code != 0 || i < 0 {
			t.Fatalf("exit %d: %s%s", r.code, r.stdout, r.stderr)
		}
		var usd float64
		fmt.Sscan(strings.Fields((r.stderr + r.stdout)[i+len("cost_usd="):])[0], &usd)
		return usd
	}
	live, batch := cost(), cost("--batch-api", "--batch-discount", "0.5")
	if live <= 0 || batch < live*0.499 || batch > live*0.501 {
		t.Errorf("dry run: live %g, batch %g: want half", live, batch)
	}
	if c := f.Counts(); c.Uploads != 0 || c.Creates != 0 || c.Live != 0 {
		t.Errorf("the dry run sent something: %+v", c)
	}
}

// Each request line's body is byte for byte the live call's body, and
// custom_id is r<row>, whatever the row's id.
func TestBatchBodyIsTheLiveBody(t *testing.T) {
	dir := t.TempDir()
	f := &fakehf.Batch{Token: batchKey, Dir: dir}
	srv := fakehf.StartBatch(f)
	defer srv.Close()
	defer f.Close()
	in := writeFile(t, "in.csv", "request_id,text\n\"a,\"\"b\",lovely staff\nx y,\"terrible \"\"wait\"\"\"\n")
	out := filepath.Join(t.TempDir(), "out.csv")
	if r := batchRun(t, srv.URL, in, out); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	ups, _ := filepath.Glob(filepath.Join(dir, "upload-*.jsonl"))
	if len(ups) != 1 {
		t.Fatalf("uploads kept: %v", ups)
	}
	b, _ := os.ReadFile(ups[0])
	chat, err := provider.NewChat(provider.ChatConfig{Model: "meta-llama/Llama-3.1-8B-Instruct:cerebras",
		Endpoint: srv.URL + "/v1/chat/completions", Labels: []string{"positive", "negative"}})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	for i, text := range []string{"lovely staff", `terrible "wait"`} {
		var l struct {
			CustomID string          `json:"custom_id"`
			Method   string          `json:"method"`
			URL      string          `json:"url"`
			Body     json.RawMessage `json:"body"`
		}
		if err := json.Unmarshal([]byte(lines[i]), &l); err != nil {
			t.Fatal(err)
		}
		_, live, _ := chat.Request(text)
		if l.CustomID != fmt.Sprintf("r%d", i) || l.Method != "POST" || l.URL != "/v1/chat/completions" || !bytes.Equal(l.Body, live) {
			t.Errorf("line %d: %s\nlive body: %s", i, lines[i], live)
		}
	}
}

// Batch submissions are not paced by the live limits: at --rps 0.05 and
// --tpm 100, 20 live calls would take minutes; the batch answers them all
// without waiting on either.
func TestBatchNotPacedByLiveLimits(t *testing.T) {
	f := &fakehf.Batch{Token: batchKey}
	srv := fakehf.StartBatch(f)
	defer srv.Close()
	defer f.Close()
	in := writeFile(t, "in.csv", manyRows(20, func(i int) string { return fmt.Sprintf("lovely %d", i) }))
	out := filepath.Join(t.TempDir(), "out.csv")
	start := time.Now()
	r := batchRun(t, srv.URL, in, out, "--rps", "0.05", "--tpm", "100")
	if r.code != 0 || len(readRows(t, out)) != 20 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %s: paced as live calls", d)
	}
}

// The batch file is uploaded with its Content-Length, as the SDKs send
// it: a provider that refuses chunked multipart takes it.
func TestBatchUploadHasContentLength(t *testing.T) {
	f := &fakehf.Batch{Token: batchKey, RefuseChunked: true}
	srv := fakehf.StartBatch(f)
	defer srv.Close()
	defer f.Close()
	in := writeFile(t, "in.csv", manyRows(5, func(i int) string { return fmt.Sprintf("lovely staff %d", i) }))
	out := filepath.Join(t.TempDir(), "out.csv")
	if r := batchRun(t, srv.URL, in, out); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, row := range readRows(t, out) {
		if row["outcome"] != "success" {
			t.Fatalf("row %v", row)
		}
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".hfsent-batch-*"))
	if len(left) != 0 {
		t.Fatalf("spool files left: %v", left)
	}
}

// A reasoning model through the Batch API: every row labelled (the body
// carries max_completion_tokens and no temperature, or the fake refuses
// it); a refused row is upstream_refused, and its tokens are charged.
func TestBatchReasoningModelAndRefusalCharged(t *testing.T) {
	f := &fakehf.Batch{Token: batchKey, Chat: &fakehf.Chat{ReasoningTokens: 100}}
	srv := fakehf.StartBatch(f)
	defer srv.Close()
	defer f.Close()
	in := writeFile(t, "in.csv", "request_id,text\n1,lovely staff\n2,terrible wait\n3,#refusal# rude\n")
	out := filepath.Join(t.TempDir(), "out.csv")
	r := batchRun(t, srv.URL, in, out, "--model", "gpt-5-nano", "--price-in", "1", "--price-out", "2")
	if r.code != 1 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	rows := readRows(t, out)
	for i, want := range []string{"success", "success", "upstream_refused"} {
		if rows[i]["outcome"] != want || rows[i]["cost_usd"] == "" {
			t.Fatalf("row %d: %v, want %s with its cost", i+1, rows[i], want)
		}
	}
	if !strings.Contains(rows[2]["error"], "refused") {
		t.Fatalf("row 3's error: %q", rows[2]["error"])
	}
}

// The same, live: a reasoning model labels every row, a refusal is
// charged, and the summary shows the reasoning tokens; a bad
// --reasoning-effort or --service-tier is refused before any call.
func TestChatReasoningModelLive(t *testing.T) {
	f := &fakehf.Chat{ReasoningTokens: 100}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	in := writeFile(t, "in.csv", "request_id,text\n1,lovely staff\n2,terrible wait\n3,#refusal# rude\n")
	out := filepath.Join(t.TempDir(), "out.csv")
	args := append([]string{"classify", in, "-o", out, "--no-cache", "--no-progress"}, chatArgs(srv.URL,
		"--model", "gpt-5-nano", "--price-in", "1", "--price-out", "2", "--service-tier", "flex", "--reasoning-effort", "low")...)
	r := runMain(t, nil, "", args...)
	if r.code != 1 || !strings.Contains(r.stderr, "reasoning_tokens=300") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	rows := readRows(t, out)
	for i, want := range []string{"success", "success", "upstream_refused"} {
		if rows[i]["outcome"] != want || rows[i]["cost_usd"] == "" {
			t.Fatalf("row %d: %v, want %s with its cost", i+1, rows[i], want)
		}
	}
	for _, bad := range [][]string{{"--reasoning-effort", "max"}, {"--service-tier", "cheap"}, {"--max-completion-tokens", "-1"}} {
		calls := f.Calls()
		r := runMain(t, nil, "", append([]string{"classify", in, "-o", out + "2", "--no-cache"}, chatArgs(srv.URL, bad...)...)...)
		if r.code != 2 || !strings.Contains(r.stderr, bad[0]) || f.Calls() != calls {
			t.Fatalf("%v: exit %d: %s", bad, r.code, r.stderr)
		}
	}
}

// A run stopped between creating its batch and recording its id (here the
// create's answer is lost: a gateway's 502 after the provider made the
// batch) leaves a pending record; --resume finds that batch in the
// provider's list, and adopts it rather than paying for its rows twice,
// even when more than a page of newer batches (the account's others) lie
// in front of it: the list is followed across pages (has_more, after).
func TestBatchResumeAdoptsBatchOnALaterPage(t *testing.T) {
	f := &fakehf.Batch{Token: batchKey}
	defer f.Close()
	var lost atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/batches" && lost.CompareAndSwap(false, true) {
			f.Handler().ServeHTTP(httptest.NewRecorder(), r) // made, its answer lost
			http.Error(w, "upstream timed out", http.StatusBadGateway)
			return
		}
		f.Handler().ServeHTTP(w, r)
	}))
	defer srv.Close()
	in := writeFile(t, "in.csv", manyRows(3, func(i int) string { return fmt.Sprintf("lovely staff %d", i) }))
	out := filepath.Join(t.TempDir(), "out.csv")
	if r := batchRun(t, srv.URL, in, out); r.code == 0 || f.Counts().Creates != 1 {
		t.Fatalf("exit %d, counts %+v: %s", r.code, f.Counts(), r.stderr)
	}
	if j, err := os.ReadFile(out + batchrun.JournalSuffix); err != nil || !strings.Contains(string(j), `"pending":true`) {
		t.Fatalf("journal: %s %v", j, err)
	}
	// The account's other batches, newer: more than a page of 100.
	const others = 120
	api := &batchapi.Client{Root: srv.URL + "/v1", Token: batchKey}
	ctx := context.Background()
	file, err := api.Upload(ctx, "other.jsonl", strings.NewReader(`{"custom_id":"x","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	for range others {
		if _, err := api.Create(ctx, file.ID); err != nil {
			t.Fatal(err)
		}
	}
	r := batchRun(t, srv.URL, in, out, "--resume")
	if r.code != 0 {
		t.Fatalf("--resume: exit %d: %s", r.code, r.stderr)
	}
	if c := f.Counts(); c.Creates != 1+others || c.Uploads != 2 {
		t.Fatalf("counts %+v: want the stopped run's batch adopted (no batch made again, no file uploaded again)", c)
	}
	for _, row := range readRows(t, out) {
		if row["outcome"] != "success" {
			t.Fatalf("row %v", row)
		}
	}
}

// --batch-max-requests or --batch-max-bytes raised above OpenAI's limits
// while the endpoint is OpenAI's is warned of, once, before any call (a
// dry run makes none); not at OpenAI's limits, nor for another server.
func TestBatchWarnsOverOpenAILimits(t *testing.T) {
	f := &fakehf.Batch{Token: batchKey}
	srv := fakehf.StartBatch(f)
	defer srv.Close()
	defer f.Close()
	in := writeFile(t, "in.csv", manyRows(3, func(i int) string { return fmt.Sprintf("lovely %d", i) }))
	const warning = "OpenAI refuses a batch input file over 200 MB"
	openAI := []string{"--endpoint", "https://api.openai.com/v1/chat/completions", "--model", "gpt-4o-mini"}
	for _, c := range []struct {
		name  string
		args  []string
		warns []string // the flags the warning names; none: no warning
	}{
		{"both over", append([]string{"--batch-max-requests", "50001", "--batch-max-bytes", "300MiB"}, openAI...), []string{"batch_max_requests=50001", "batch_max_bytes=314572800"}},
		{"bytes over", append([]string{"--batch-max-bytes", "200000001"}, openAI...), []string{"batch_max_bytes=200000001"}},
		{"at the limits", append([]string{"--batch-max-requests", "50000", "--batch-max-bytes", "200000000"}, openAI...), nil},
		{"defaults", openAI, nil},
		{"another server", []string{"--batch-max-requests", "90000", "--batch-max-bytes", "1GiB"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append(append([]string{"classify", in, "--dry-run", "--batch-api", "--token-env", "OPENAI_API_KEY", "--no-cache"}, chatArgs(srv.URL)...), c.args...)
			r := runMain(t, map[string]string{"OPENAI_API_KEY": batchKey}, "", args...)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			if n := strings.Count(r.stderr, warning); n != min(len(c.warns), 1) {
				t.Fatalf("the warning %d times; want %d: %s", n, min(len(c.warns), 1), r.stderr)
			}
			for _, w := range c.warns {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("the warning does not name %s: %s", w, r.stderr)
				}
			}
		})
	}
	if c := f.Counts(); c.Uploads+c.Creates+c.Live != 0 {
		t.Errorf("a dry run sent something: %+v", c)
	}
}
