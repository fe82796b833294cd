package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/queue/pgtest"
)

// chatFlags point hfsent at the fake chat server.
func chatFlags(url string, more ...string) []string {
	return append([]string{"--provider", "chat", "--model", "meta-llama/Llama-3.1-8B-Instruct",
		"--endpoint", url + "/v1/chat/completions", "--labels", "positive,negative"}, more...)
}

func TestChatClassify(t *testing.T) {
	const key = "sk-e2e-0123456789abcdefghij"
	f := &fakehf.Chat{Token: key, Latency: 5 * time.Millisecond}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	dir := t.TempDir()
	in := writeInput(t, dir, 40, func(i int) string {
		if i == 7 {
			return "#unlabelled#"
		}
		if i%3 == 0 {
			return fmt.Sprintf("a terrible wait, number %d", i)
		}
		return uniqText(i)
	})
	out := filepath.Join(dir, "out.csv")
	r := runBin(t, []string{"OPENAI_API_KEY=" + key}, append([]string{"classify", in, "-o", out, "--no-progress", "--token-env", "OPENAI_API_KEY", "--tpm", "600000"}, chatFlags(srv.URL)...)...)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1 (one unlabelled row)\n%s", r.code, r.stderr)
	}
	rows := readResults(t, out)
	for i, row := range rows {
		want := "positive"
		if i%3 == 0 {
			want = "negative"
		}
		switch {
		case i == 7:
			if row["outcome"] != "upstream_unlabelled" || row["attempts"] != "2" || row["status"] != "502" {
				t.Errorf("row 7: %v", row)
			}
		case row["outcome"] != "success" || row["label"] != want || row["score"] != "0.9184" || row["prompt_tokens"] == "" || row["completion_tokens"] == "":
			t.Errorf("row %d: %v", i, row)
		}
	}
	if !strings.Contains(r.stderr, "upstream_unlabelled=1") || !strings.Contains(r.stderr, "prompt_tokens=") || strings.Contains(r.stderr, key) {
		t.Errorf("summary: %s", r.stderr)
	}
}

func TestChatServe(t *testing.T) {
	f := &fakehf.Chat{}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	s := startServe(t, append([]string{"--log-format", "text"}, chatFlags(srv.URL)...)...)
	r := s.feedback("a", "what a terrible wait")
	if r.status != 200 || r.body["label"] != "negative" || r.body["score"] != 0.9184 || r.body["model"] != "meta-llama/Llama-3.1-8B-Instruct" {
		t.Fatalf("feedback: %d %v %v", r.status, r.body, r.err)
	}
	r = s.feedback("b", "fine #nologprobs#")
	if r.status != 200 || r.body["label"] != "positive" || r.body["score"] != nil {
		t.Fatalf("no logprobs: %d %v", r.status, r.body)
	}
	r = s.feedback("c", "#unlabelled#")
	if r.status != 502 || r.code() != "upstream_unlabelled" {
		t.Fatalf("unlabelled: %d %v", r.status, r.body)
	}
	body, _ := json.Marshal(map[string]any{"items": []map[string]string{{"request_id": "1", "text": "lovely"}, {"request_id": "2", "text": "bad"}}})
	resp, err := http.Post("http://"+s.addr+"/v1/classify", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var items struct {
		Results []map[string]any `json:"results"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&items)
	resp.Body.Close()
	if len(items.Results) != 2 || items.Results[0]["label"] != "positive" || items.Results[1]["label"] != "negative" {
		t.Fatalf("items: %v", items)
	}
	resp, err = http.Get("http://" + s.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range []string{"hfsent_provider_prompt_tokens_total", "hfsent_provider_completion_tokens_total"} {
		if !strings.Contains(string(m), name+" ") || strings.Contains(string(m), name+" 0\n") {
			t.Errorf("metrics: %s missing or 0", name)
		}
	}
}

func TestChatQueueWorker(t *testing.T) {
	db := pgtest.URL(t)
	f := &fakehf.Chat{}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	rows := clientRows("c", 30)
	rows[3][1] = "fine #nologprobs#"
	rows[5][1] = "#429# and then fine"
	pushBatch(t, db, "chat", rows, "--provider", "chat", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--labels", "positive,negative")
	// A worker of another kind, or with other labels, is refused.
	for _, bad := range [][]string{
		// a zero-shot worker with the batch's model and labels: another kind
		{"--model", "meta-llama/Llama-3.1-8B-Instruct", "--endpoint", srv.URL + "/{model}", "--labels", "positive,negative"},
		chatFlags(srv.URL, "--labels", "positive,negative,neutral"),
	} {
		r := runBin(t, append(qenv(db), "HF_TOKEN=hf_x"), append([]string{"worker", "--batch", "chat", "--exit-when-done", "--no-progress"}, bad...)...)
		if r.code != 2 || !strings.Contains(r.stderr, "batch \"chat\" is for") || !strings.Contains(r.stderr, bad[len(bad)-1]) && !strings.Contains(r.stderr, "--provider chat") {
			t.Errorf("%v: exit %d %s", bad, r.code, r.stderr)
		}
	}
	if f.Calls() != 0 {
		t.Fatalf("a refused worker sent %d calls", f.Calls())
	}
	w := startWorker(t, db, append([]string{"--batch", "chat", "--exit-when-done"}, chatFlags(srv.URL)...)...)
	if code := w.wait(t); code != 0 {
		t.Fatalf("worker exit %d\n%s", code, w.stderr.String())
	}
	got := exportRows(t, db, "chat")
	checkOnceEach(t, got, idsOf(rows))
	for i, r := range got {
		if r["label"] != "positive" || r["model"] != "meta-llama/Llama-3.1-8B-Instruct" || r["prompt_tokens"] == "" || r["completion_tokens"] == "" ||
			(r["score"] == "") != (i == 3) {
			t.Fatalf("export row %d: %v", i, r)
		}
	}

	// An unlabelled row is claimed twice (--max-attempts 2), asked twice
	// each time: the export adds up the four calls' tokens (each answered
	// "I cannot tell.", 4 tokens). A text of the same length costs the same
	// prompt for the first call; the second, which quotes the answer back
	// with the correction, costs more.
	pushBatch(t, db, "unl", [][3]string{{"u", "#unlabelled#", "c"}, {"p", "abcdefghijkl", "c"}},
		"--provider", "chat", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--labels", "positive,negative", "--max-attempts", "2")
	w = startWorker(t, db, append([]string{"--batch", "unl", "--exit-when-done"}, chatFlags(srv.URL)...)...)
	if code := w.wait(t); code != 1 {
		t.Fatalf("worker exit %d, want 1\n%s", code, w.stderr.String())
	}
	got = exportRows(t, db, "unl")
	if got[0]["outcome"] != "upstream_unlabelled" || got[0]["attempts"] != "4" || atoi(t, got[0]["completion_tokens"]) != int64(4*fakehf.ChatTokens("I cannot tell.")) ||
		atoi(t, got[0]["prompt_tokens"]) <= 4*atoi(t, got[1]["prompt_tokens"]) {
		t.Fatalf("export: %v", got)
	}
}
