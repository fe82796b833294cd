package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/outcome"
)

func items(n int, prefix string) map[string]any {
	list := make([]any, n)
	for i := range list {
		list[i] = map[string]any{"request_id": fmt.Sprintf("%s%d", prefix, i), "text": prefix + " " + uniq(i)}
	}
	return map[string]any{"items": list}
}

// A /v1/classify request is admitted as one: 256 items at -c 8, with the
// default 35 ms admission wait and calls of 50 ms, are all answered (in
// 32 rounds of 8 calls), never more than 8 at once. Before, the first 8
// were sent and the other 248 answered local_capacity.
func TestItemsAdmittedAsOne(t *testing.T) {
	f := &fakehf.Fake{Latency: 50 * time.Millisecond}
	h := start(t, f)
	a := h.post(PathClassify, items(256, "many"))
	if a.status != http.StatusOK {
		t.Fatalf("%d %s", a.status, a.body)
	}
	res, _ := a.json(t)["results"].([]any)
	counts := map[string]int{}
	for _, r := range res {
		counts[r.(map[string]any)["outcome"].(string)]++
	}
	if len(res) != 256 || counts["success"] != 256 {
		t.Fatalf("%d results: %v", len(res), counts)
	}
	if f.MaxInFlight() > 8 || f.Calls() != 256 {
		t.Fatalf("%d calls, %d at once; want 256, at most 8", f.Calls(), f.MaxInFlight())
	}
}

// A request that finds no slot within the admission wait is refused whole:
// 503 local_capacity with Retry-After, none of its items sent. Meanwhile
// another request, admitted while the slots were free, goes on.
func TestItemsRefusedWhole(t *testing.T) {
	g := newGate()
	defer g.open()
	f := &fakehf.Fake{Script: func(_ int64, texts []string, r *http.Request) fakehf.Reply {
		if strings.HasPrefix(texts[0], "hold") {
			g.wait(r)
		}
		return fakehf.Reply{}
	}}
	h := start(t, f)
	var wg sync.WaitGroup
	var held answer
	wg.Add(1)
	go func() { defer wg.Done(); held = h.post(PathClassify, items(12, "hold")) }()
	waitFor(t, "8 calls in flight", func() bool { return f.InFlight() == 8 })
	a := h.post(PathClassify, items(20, "late"))
	if a.status != http.StatusServiceUnavailable || a.code(t) != string(outcome.LocalCapacity) || retryAfter(a) < 1 {
		t.Fatalf("answered %d (Retry-After %q): %s", a.status, a.header.Get("Retry-After"), a.body)
	}
	if n := f.Seen(); len(n) != 8 {
		t.Fatalf("%d texts sent, want the 8 held: none of the refused request", len(n))
	}
	g.open()
	wg.Wait()
	res, _ := held.json(t)["results"].([]any)
	for i, r := range res {
		if o := r.(map[string]any)["outcome"]; o != "success" {
			t.Fatalf("item %d of the admitted request: %v", i, o)
		}
	}
	if len(res) != 12 {
		t.Fatalf("%d results for the admitted request", len(res))
	}
	m := h.metrics()
	if v := h.value(m, "hfsent_outcomes_total", "route", PathClassify, "outcome", "local_capacity"); v != 20 {
		t.Fatalf("local_capacity texts counted %v, want 20", v)
	}
}

// With --top-k 2, an answer carries the model's two best labels and their
// scores, best first, as a list of {label, score} (the results' scores
// column as JSON), in /v1/classify's items and /feedback-sentiment's
// answer; an item with no label has none. The document describes them.
func TestScoresWithTopK(t *testing.T) {
	f := &fakehf.Fake{Script: func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
		return fakehf.Reply{Body: `[[{"label":"joy","score":0.70004},{"label":"anger","score":0.2},{"label":"fear","score":0.1}]]`}
	}}
	h := start(t, f, func(s *setup) { s.topK = 2 })
	d := loadOpenAPI(t, h)
	want := `[{"label":"joy","score":0.7},{"label":"anger","score":0.2}]`
	a := h.post(PathClassify, map[string]any{"items": []any{
		map[string]any{"request_id": "a", "text": "lovely staff"}, map[string]any{"request_id": "b", "text": " "}}})
	d.checkAnswer(PathClassify, "POST", a)
	var got struct {
		Results []struct {
			Outcome string          `json:"outcome"`
			Scores  json.RawMessage `json:"scores"`
		} `json:"results"`
	}
	if err := json.Unmarshal(a.body, &got); err != nil || len(got.Results) != 2 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	if string(got.Results[0].Scores) != want || got.Results[1].Outcome != "invalid_input" || got.Results[1].Scores != nil {
		t.Errorf("scores %s and %s; want %s and none", got.Results[0].Scores, got.Results[1].Scores, want)
	}
	if !strings.Contains(string(f.Bodies()[0]), `"top_k":2`) {
		t.Errorf("the model was not asked for its 2 best: %s", f.Bodies()[0])
	}
	one := h.feedback("c", "lovely staff too")
	d.checkAnswer(PathFeedback, "POST", one)
	if !strings.Contains(string(one.body), `"scores":`+want) {
		t.Errorf("/feedback-sentiment: %s", one.body)
	}
	// Without --top-k there is no scores field.
	plain := start(t, &fakehf.Fake{})
	if b := plain.feedback("d", "fine").body; strings.Contains(string(b), "scores") {
		t.Errorf("without --top-k: %s", b)
	}
}
