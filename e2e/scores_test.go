package e2e

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/queue/pgtest"
)

// labelFile is a small label file: its rendered system message is what the
// fake chat server's prompt cache (CacheMin) holds from the second call on.
const labelFile = `task: Classify customer feedback by how the customer feels.
labels:
  - name: positive
    description: The customer is glad of the service.
  - name: negative
    description: The customer is unhappy with the service.
`

// resultsFile reads a results file whole: its header and its rows.
func resultsFile(t *testing.T, path string) (header []string, rows []map[string]string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil || len(recs) == 0 {
		t.Fatalf("%s: %v", path, err)
	}
	return recs[0], readResults(t, path)
}

// A worker with --top-k 2 keeps each row's scores and its cached prompt
// tokens in the queue, and queue export writes them: the exported file has
// the columns classify writes for the same flags, scores and
// cached_prompt_tokens among them, with the same scores.
func TestQueueExportsScores(t *testing.T) {
	db := pgtest.URL(t)
	f := &fakehf.Chat{CacheMin: 16}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	dir := t.TempDir()
	labels := filepath.Join(dir, "labels.yaml")
	if err := os.WriteFile(labels, []byte(labelFile), 0o600); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--provider", "chat", "--model", "meta-llama/Llama-3.1-8B-Instruct",
		"--endpoint", srv.URL + "/v1/chat/completions", "--labels-file", labels, "--top-k", "2"}
	rows := clientRows("s", 6)
	in := queueCSV(t, dir, "in.csv", rows)

	out := filepath.Join(dir, "classify.csv")
	mustRun(t, []string{"HF_TOKEN=hf_x"}, append([]string{"classify", in, "-o", out, "--no-progress", "--no-cache", "-c", "1"}, flags...)...)
	wantHeader, want := resultsFile(t, out)

	pushBatch(t, db, "scores", rows, "--provider", "chat", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--labels", "positive,negative")
	w := startWorker(t, db, append([]string{"--batch", "scores", "--exit-when-done", "--no-cache"}, flags...)...)
	if code := w.wait(t); code != 0 {
		t.Fatalf("worker exit %d\n%s", code, w.stderr.String())
	}
	exported := filepath.Join(dir, "export.csv")
	mustRun(t, qenv(db), "queue", "export", "--batch", "scores", "-o", exported)
	header, got := resultsFile(t, exported)
	if !slices.Equal(header, wantHeader) || !slices.Contains(header, "scores") || !slices.Contains(header, "cached_prompt_tokens") {
		t.Fatalf("export's header %v\nclassify's %v", header, wantHeader)
	}
	cached := 0
	for i, r := range got {
		if r["scores"] != "positive=0.9184;negative=0.0816" || r["scores"] != want[i]["scores"] || r["cached_prompt_tokens"] == "" {
			t.Errorf("row %d: export %v\nclassify %v", i, r, want[i])
		}
		if r["cached_prompt_tokens"] != "0" {
			cached++
		}
	}
	// The fake's prompt cache has held the system message since classify's
	// first call: every row the worker sent read it.
	if cached != len(rows) {
		t.Errorf("%d of %d exported rows read cached prompt tokens", cached, len(rows))
	}
	if strings.Contains(w.stderr.String(), "hf_x") {
		t.Errorf("the token reached the log")
	}
}

// serve --top-k 2 with a label file answers each text's two best labels as
// a list of {label, score}, and the part of its prompt the server read
// from its prompt cache, in /v1/classify's items and /feedback-sentiment's
// answer.
func TestServeAnswersScores(t *testing.T) {
	f := &fakehf.Chat{CacheMin: 16}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	labels := filepath.Join(t.TempDir(), "labels.yaml")
	if err := os.WriteFile(labels, []byte(labelFile), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, "--provider", "chat", "--model", "meta-llama/Llama-3.1-8B-Instruct",
		"--endpoint", srv.URL+"/v1/chat/completions", "--labels-file", labels, "--top-k", "2", "--no-dedupe")
	want := []any{map[string]any{"label": "negative", "score": 0.9184}, map[string]any{"label": "positive", "score": 0.0816}}
	first := s.feedback("a", "what a terrible wait")
	if first.status != 200 || !reflect.DeepEqual(first.body["scores"], want) || first.body["cached_prompt_tokens"] != 0.0 {
		t.Fatalf("feedback: %d %v", first.status, first.body)
	}
	body, _ := json.Marshal(map[string]any{"items": []map[string]string{{"request_id": "1", "text": "a terrible day"}}})
	resp, err := http.Post("http://"+s.addr+"/v1/classify", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var items struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&items); err != nil || len(items.Results) != 1 {
		t.Fatalf("items: %v %v", items, err)
	}
	// The second call's system message was sent before: the fake's prompt
	// cache holds it.
	it := items.Results[0]
	if !reflect.DeepEqual(it["scores"], want) || it["cached_prompt_tokens"] == nil || it["cached_prompt_tokens"].(float64) < 16 {
		t.Fatalf("item: %v", it)
	}
}
