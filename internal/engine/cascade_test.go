package engine

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/cache"
	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/quality"
	"github.com/hfsent/hfsent/internal/resilience"
	"github.com/hfsent/hfsent/internal/results"
	"github.com/hfsent/hfsent/internal/spend"
)

// byLabel is a calibration that believes some labels less than others:
// the calibrated score is the raw score times the label's factor (1 for a
// label it does not name).
type byLabel map[string]float64

func (b byLabel) Calibrate(label string, raw float64) float64 {
	if f, ok := b[label]; ok {
		return raw * f
	}
	return raw
}

// chatStage is a chat client at a fake chat server, guarded, charged to l.
func chatStage(t *testing.T, url, model string, l *spend.Ledger) *resilience.Guard {
	t.Helper()
	chat, err := provider.NewChat(provider.ChatConfig{Model: model, Endpoint: url + "/v1/chat/completions",
		Labels: []string{"POSITIVE", "NEGATIVE", "NEUTRAL"}, Concurrency: 4, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return resilience.Build(chat, resilience.Config{Concurrency: 4, Retries: 0, Ledger: l})
}

// runStages runs texts through stages (stage 1's guard: g) with cfg, and
// returns the summary and the rows in input order.
func runStages(t *testing.T, g *resilience.Guard, cfg Config, in []string) (Summary, []results.Row) {
	t.Helper()
	sink := &keepSink{}
	sum, err := Run(context.Background(), &listSource{texts: in}, sink, g, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rows := make([]results.Row, len(sink.rows))
	for _, r := range sink.rows {
		rows[r.Seq] = r
	}
	return sum, rows
}

// A row the embedded model answers with a calibrated score under the
// first stage's escalate-below (here every NEUTRAL: its calibration
// halves them) goes on to a chat model, and the chat model's answer is
// the row's: its model, its stage, success; its attempts, tokens and
// cost add the two stages' (the embedded model's call costs 0). A row
// answered above the threshold never reaches stage 2.
func TestCascadeEscalatesALowScore(t *testing.T) {
	chat := &fakehf.Chat{}
	srv := fakehf.StartChat(chat)
	defer srv.Close()
	ledger := spend.NewLedger(spend.Flat(1, 2), 0)
	stages := []Stage{
		{Answers: &quality.Answers{Calibration: byLabel{"NEUTRAL": 0.5}}, EscalateBelow: 0.6, Free: true},
		{Guard: chatStage(t, srv.URL, "strong", ledger)},
	}
	in := []string{"I love this product, it is wonderful!", "The meeting is on Tuesday at noon.", "This is terrible and broken."}
	sum, rows := runStages(t, plain(provider.NewLocal(), 4), Config{Stages: stages}, in)

	if r := rows[1]; r.Stage != 2 || r.Model != "strong" || r.Outcome != outcome.Success || r.Attempts != 2 ||
		!r.Tokens || !r.Costed || r.CostUSD <= 0 {
		t.Fatalf("the neutral row: %+v; want stage 2, the chat model, success, 2 attempts, its tokens and cost", r)
	}
	for _, i := range []int{0, 2} {
		if r := rows[i]; r.Stage != 1 || r.Model != provider.LocalModel || r.Attempts != 1 || !r.Costed || r.CostUSD != 0 {
			t.Fatalf("row %d: %+v; want stage 1, the embedded model, one attempt, cost 0", i, r)
		}
	}
	if chat.Calls() != 1 {
		t.Fatalf("the chat model got %d calls, want the neutral row's alone", chat.Calls())
	}
	if len(sum.Stages) != 2 || sum.Stages[0].Answered != 2 || sum.Stages[0].Escalated != 1 || sum.Stages[1].Answered != 1 ||
		sum.Stages[1].Provider.Calls != 1 || sum.Stages[1].CostUSD != rows[1].CostUSD {
		t.Fatalf("stages %+v", sum.Stages)
	}
	if sum.Provider.FallbackCalls != 1 || sum.Counts[outcome.Fallback] != 0 {
		t.Fatalf("stage 1's counters: fallback_calls %d, fallback rows %d; want the later stage's call, no fallback (no failure)", sum.Provider.FallbackCalls, sum.Counts[outcome.Fallback])
	}
}

// A row whose call failed after its retries goes on to the next stage and
// is a fallback there (the failure, not its score, sent it); a poison row
// (a 400 for its text: upstream_request_rejected) and an invalid row do
// not go on: another model would not mend them.
func TestCascadeEscalatesAFailureNotAPoisonRow(t *testing.T) {
	f := &fakehf.Fake{Script: func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
		switch {
		case strings.Contains(texts[0], "#500#"):
			return fakehf.Reply{Status: 500}
		case strings.Contains(texts[0], "#400#"):
			return fakehf.Reply{Status: 400, Body: `{"error":"this text cannot be classified"}`}
		}
		return fakehf.Reply{}
	}}
	srv := fakehf.Start(f)
	defer srv.Close()
	g := guarded(t, srv.URL, resilience.Config{Concurrency: 1, Retries: 1, BackoffBase: time.Millisecond, Escalates: true})
	local := plain(provider.NewLocal(), 2)
	in := []string{"a good day", "a good day too", "a good third day", "the server fails me #500#", "poison #400#", "  "}
	sum, rows := runStages(t, g, Config{Stages: []Stage{{}, {Guard: local, Free: true}}}, in)

	if r := rows[3]; r.Outcome != outcome.Fallback || r.Stage != 2 || r.Model != provider.LocalModel || r.Attempts != 3 {
		t.Fatalf("the failed row: %+v; want fallback at stage 2 by the embedded model, after its 2 calls and stage 2's", r)
	}
	if r := rows[4]; r.Outcome != outcome.UpstreamRequestRejected || r.Stage != 1 {
		t.Fatalf("the poison row: %+v; want upstream_request_rejected at stage 1", r)
	}
	if r := rows[5]; r.Outcome != outcome.InvalidInput || r.Stage != 0 {
		t.Fatalf("the blank row: %+v; want invalid_input, no stage", r)
	}
	for _, i := range []int{0, 1, 2} {
		if r := rows[i]; r.Outcome != outcome.Success || r.Stage != 1 {
			t.Fatalf("row %d: %+v", i, r)
		}
	}
	if sum.Counts[outcome.Fallback] != 1 || sum.Provider.FallbackRows != 1 || sum.Stages[0].Escalated != 1 {
		t.Fatalf("counts %v, fallback rows %d, stages %+v", sum.Counts, sum.Provider.FallbackRows, sum.Stages)
	}
}

// A row the last stage fails, after an earlier one sent it on for its low
// score, ends with the last stage's failure (not the earlier answer: a
// --resume redoes it), its calls summed.
func TestCascadeLastStageFailureIsTheRows(t *testing.T) {
	chat := &fakehf.Chat{}
	srv := fakehf.StartChat(chat)
	defer srv.Close()
	stages := []Stage{
		{Answers: &quality.Answers{Calibration: byLabel{"NEUTRAL": 0}}, EscalateBelow: 0.5, Free: true},
		{Guard: chatStage(t, srv.URL, "strong", nil)},
	}
	_, rows := runStages(t, plain(provider.NewLocal(), 1), Config{Stages: stages}, []string{"The office opens at nine #500#"})
	if r := rows[0]; r.Outcome != outcome.UpstreamFailed || r.Stage != 2 || r.Model != "strong" || r.Attempts != 2 || r.Label != "" {
		t.Fatalf("%+v; want upstream_failed at stage 2, with both stages' calls", r)
	}
}

// Each stage keeps its answers under its own request's key. A second run
// answers every row from the cache: a confident row at stage 1, never
// asking stage 2; a row stage 1 sends on (its calibrated score is low)
// from stage 2's entry. Not one call either time that the first did not
// make.
func TestCascadeCacheHitAtStageOneNeverCallsStageTwo(t *testing.T) {
	f := &fakehf.Fake{}
	hfSrv := fakehf.Start(f)
	defer hfSrv.Close()
	chat := &fakehf.Chat{}
	chatSrv := fakehf.StartChat(chat)
	defer chatSrv.Close()
	dir := t.TempDir()
	run := func() (Summary, []results.Row) {
		c, err := cache.OpenFile(context.Background(), dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		rc := cache.New(c, cache.Options{})
		hf := hfClient(t, hfSrv.URL+"/models/{model}", 2)
		g1 := resilience.Build(hf, resilience.Config{Concurrency: 2, Retries: 0, Escalates: true})
		g2 := chatStage(t, chatSrv.URL, "strong", nil)
		k1, _ := cache.NewKeyer("hf", hf)
		k2, _ := cache.NewKeyer("chat", g2.Client())
		stages := []Stage{
			{Keys: &k1, Answers: &quality.Answers{Calibration: byLabel{"NEGATIVE": 0.5}}, EscalateBelow: 0.9},
			{Guard: g2, Keys: &k2},
		}
		sum, rows := runStages(t, g1, Config{Cache: rc, Stages: stages}, []string{"a lovely day", "a bad day", "lovely again", "bad again"})
		if err := rc.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		return sum, rows
	}
	_, first := run()
	if f.Calls() != 4 || chat.Calls() != 2 || first[1].Stage != 2 || first[0].Stage != 1 {
		t.Fatalf("first run: %d stage-1 calls, %d stage-2 calls, rows %+v", f.Calls(), chat.Calls(), first)
	}
	sum, rows := run()
	if f.Calls() != 4 || chat.Calls() != 2 {
		t.Fatalf("second run made calls: stage 1 %d, stage 2 %d (want 4 and 2, the first run's)", f.Calls(), chat.Calls())
	}
	for i, r := range rows {
		if !r.Cached || r.Attempts != 0 || r.Stage != first[i].Stage || r.Label != first[i].Label || r.Model != first[i].Model {
			t.Fatalf("row %d: %+v; want the first run's answer (%+v) from the cache", i, r, first[i])
		}
	}
	if sum.CacheHits != 4 || sum.Stages[0].CacheHits != 4 || sum.Stages[1].CacheHits != 2 || sum.Stages[1].Reached != 2 {
		t.Fatalf("hits %d, stages %+v", sum.CacheHits, sum.Stages)
	}
}

// While stage 1's breaker is open, the rows it sends on take their turn
// of its --rps first: an outage downgrades only its share of the batch
// (Guard.Pace), rather than every row behind it at once.
func TestCascadePacesRowsPastAnOpenBreaker(t *testing.T) {
	var down atomic.Bool
	down.Store(true)
	f := &fakehf.Fake{Script: func(int64, []string, *http.Request) fakehf.Reply {
		if down.Load() {
			return fakehf.Reply{Status: 500}
		}
		return fakehf.Reply{}
	}}
	srv := fakehf.Start(f)
	defer srv.Close()
	g := guarded(t, srv.URL, resilience.Config{Concurrency: 4, Retries: 0, RPS: 50, Burst: 1, BreakerMinCalls: 2, BreakerThreshold: 0.5,
		BreakerWindow: time.Minute, BreakerCooldown: time.Hour, Escalates: true})
	start := time.Now()
	sum, _ := runStages(t, g, Config{Stages: []Stage{{}, {Guard: plain(provider.NewLocal(), 4), Free: true}}}, texts(40, "row %d"))
	// 40 rows at 50 a second: about 0.8 s, not at once.
	if el := time.Since(start); el < 600*time.Millisecond || sum.Counts[outcome.Fallback] != 40 {
		t.Fatalf("%d fallback rows in %s; want all 40, paced at --rps 50", sum.Counts[outcome.Fallback], el)
	}
}

// Two priced chat stages: a row the first sends on costs both stages'
// calls, its tokens are both calls', and the rows' cost_usd add up to
// what the ledger spent.
func TestCascadeCostAndTokensAddUp(t *testing.T) {
	cheap, strong := &fakehf.Chat{}, &fakehf.Chat{}
	s1, s2 := fakehf.StartChat(cheap), fakehf.StartChat(strong)
	defer s1.Close()
	defer s2.Close()
	ledger := spend.NewLedger(spend.Flat(1, 2), 0)
	g1 := chatStage(t, s1.URL, "cheap", ledger)
	stages := []Stage{
		{Answers: &quality.Answers{Calibration: byLabel{"NEGATIVE": 0.5}}, EscalateBelow: 0.6},
		{Guard: chatStage(t, s2.URL, "strong", ledger)},
	}
	sum, rows := runStages(t, g1, Config{Stages: stages}, []string{"a fab visit", "a bad visit"}) // of one length: the same tokens
	up, stay := rows[1], rows[0]
	if up.Stage != 2 || stay.Stage != 1 || cheap.Calls() != 2 || strong.Calls() != 1 {
		t.Fatalf("rows %+v; calls %d and %d", rows, cheap.Calls(), strong.Calls())
	}
	// Both stages were asked the same text with the same labels: the same
	// tokens, at the same prices.
	if up.PromptTokens != 2*stay.PromptTokens || up.CompletionTokens != 2*stay.CompletionTokens {
		t.Fatalf("tokens %d+%d, want twice stage 1's %d+%d", up.PromptTokens, up.CompletionTokens, stay.PromptTokens, stay.CompletionTokens)
	}
	want := float64(up.PromptTokens)*1e-6 + float64(up.CompletionTokens)*2e-6
	if d := up.CostUSD - want; d > 1e-12 || d < -1e-12 || !up.Costed {
		t.Fatalf("cost %v, want %v: both stages' calls", up.CostUSD, want)
	}
	if d := up.CostUSD + stay.CostUSD - sum.Spend.Spent; d > 1e-12 || d < -1e-12 {
		t.Fatalf("rows cost %v, the ledger spent %v", up.CostUSD+stay.CostUSD, sum.Spend.Spent)
	}
	if sum.Stages[0].CostUSD+sum.Stages[1].CostUSD-sum.Spend.Spent > 1e-12 || sum.Provider.PromptTokens != int64(up.PromptTokens+stay.PromptTokens) {
		t.Fatalf("stages %+v, tokens %d", sum.Stages, sum.Provider.PromptTokens)
	}
}
