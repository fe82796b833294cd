package engine

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/cache"
	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/resilience"
	"github.com/hfsent/hfsent/internal/results"
	"github.com/hfsent/hfsent/internal/spend"
)

// chatRun is one run of texts through a chat client at cfg's endpoint,
// with the response cache in dir and the ledger l (nil: none).
type chatRun struct {
	url, model, prompt string
	labels             []string
	dir                string
	ledger             *spend.Ledger
	c                  int
}

func (r chatRun) run(t *testing.T, texts []string) (Summary, []results.Row) {
	t.Helper()
	labels := r.labels
	if labels == nil {
		labels = []string{"positive", "negative"}
	}
	model := r.model
	if model == "" {
		model = "m"
	}
	chat, err := provider.NewChat(provider.ChatConfig{Model: model, Endpoint: r.url, Labels: labels, Prompt: r.prompt, Concurrency: 8, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	g := resilience.Build(chat, resilience.Config{Concurrency: max(r.c, 4), Retries: 0, Ledger: r.ledger})
	cfg := Config{}
	var c *cache.Cache
	if r.dir != "" {
		f, err := cache.OpenFile(context.Background(), r.dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		c = cache.New(f, cache.Options{})
		k, _ := cache.NewKeyer("chat", chat)
		cfg.Cache, cfg.Keys = c, &k
	}
	sink := &keepSink{}
	sum, err := Run(context.Background(), &listSource{texts: texts}, sink, g, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c != nil {
		if err := c.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	rows := make([]results.Row, len(sink.rows))
	for _, row := range sink.rows {
		rows[row.Seq] = row
	}
	return sum, rows
}

func texts(n int, format string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(format, i)
	}
	return out
}

// TestSecondRunPaysNothing: the same rows again make no call, each
// written as a hit (attempts 0, cached), with the first run's answers;
// one new row costs one call.
func TestSecondRunPaysNothing(t *testing.T) {
	fake := &fakehf.Chat{}
	srv := fakehf.StartChat(fake)
	defer srv.Close()
	r := chatRun{url: srv.URL + "/v1/chat/completions", dir: t.TempDir(), ledger: spend.NewLedger(spend.Flat(1, 2), 0)}
	in := texts(30, "review %d: a lovely repair")
	sum1, first := r.run(t, in)
	if fake.Calls() != 30 || sum1.CacheHits != 0 {
		t.Fatalf("first run: %d calls, %d hits", fake.Calls(), sum1.CacheHits)
	}
	r.ledger = spend.NewLedger(spend.Flat(1, 2), 0)
	sum2, second := r.run(t, in)
	if fake.Calls() != 30 {
		t.Fatalf("second run made %d calls", fake.Calls()-30)
	}
	if sum2.CacheHits != 30 || sum2.Cache.Hits != 30 || sum2.Counts[outcome.Success] != 30 || sum2.Provider.Calls != 0 || sum2.Spend.Spent != 0 {
		t.Fatalf("second run: %+v", sum2)
	}
	for i, row := range second {
		if !row.Cached || row.Attempts != 0 || row.StartedMs != -1 || row.Label != first[i].Label || row.Score != first[i].Score ||
			row.Model != first[i].Model || !row.Costed || row.CostUSD != 0 {
			t.Fatalf("row %d: %+v, first run's %+v", i, row, first[i])
		}
	}
	// What the hits saved: the first run's calls at the prices given.
	if want := sum1.Spend.Spent; math.Abs(sum2.Cache.SavedUSD-want) > 1e-12 {
		t.Errorf("saved %g, the first run spent %g", sum2.Cache.SavedUSD, want)
	}
	sum3, _ := r.run(t, append(in, "a new row"))
	if fake.Calls() != 31 || sum3.CacheHits != 30 {
		t.Fatalf("one new row: %d calls, %d hits", fake.Calls()-30, sum3.CacheHits)
	}
}

// TestAnythingInTheRequestMisses: the labels' order, the prompt, the
// model, the endpoint, and a parameter of the body (logprobs, dropped by
// a server that refuses them) each make a new request: a miss.
func TestAnythingInTheRequestMisses(t *testing.T) {
	fake := &fakehf.Chat{}
	srv := fakehf.StartChat(fake)
	defer srv.Close()
	refusing := fakehf.StartChat(&fakehf.Chat{RefuseLogprobs: true})
	defer refusing.Close()
	dir := t.TempDir()
	in := texts(5, "review %d: a lovely repair")
	base := chatRun{url: srv.URL + "/v1/chat/completions", dir: dir}
	base.run(t, in)
	for name, r := range map[string]chatRun{
		"labels' order": {labels: []string{"negative", "positive"}},
		"prompt":        {prompt: "Label it {labels}: {text}"},
		"model":         {model: "m2"},
		"endpoint":      {url: srv.URL + "/other/v1/chat/completions"},
	} {
		r.dir = dir
		if r.url == "" {
			r.url = base.url
		}
		sum, _ := r.run(t, in)
		if sum.CacheHits != 0 || sum.Provider.Calls != 5 {
			t.Errorf("%s changed: %d hits, %d calls", name, sum.CacheHits, sum.Provider.Calls)
		}
		if again, _ := r.run(t, in); again.CacheHits != 5 {
			t.Errorf("%s: the same again: %d hits", name, again.CacheHits)
		}
	}
	// Stored as sent: without logprobs. A client that asks with them
	// (the same labels, prompt and model at that server) misses. One row:
	// with more, a row looked up after this run's own first refusal is
	// asked without logprobs, and rightly hits (1 run in 20 saw 4 hits).
	nolp := chatRun{url: refusing.URL + "/v1/chat/completions", dir: dir}
	nolp.run(t, in)
	withLP, _ := nolp.run(t, in[:1])
	if withLP.CacheHits != 0 {
		t.Errorf("a body with logprobs hit the answers to one without: %d hits", withLP.CacheHits)
	}
}

// TestFailedRowIsNotCached: only final, usable answers are stored; a row
// that failed (a 500, an answer naming no label) is asked again.
func TestFailedRowIsNotCached(t *testing.T) {
	fake := &fakehf.Chat{}
	srv := fakehf.StartChat(fake)
	defer srv.Close()
	r := chatRun{url: srv.URL + "/v1/chat/completions", dir: t.TempDir()}
	in := []string{"fine 1", "#500# broken", "#unlabelled# vague", "fine 2"}
	sum, _ := r.run(t, in)
	if sum.Counts[outcome.Success] != 2 {
		t.Fatalf("outcomes %v", sum.Counts)
	}
	before := fake.Calls()
	sum, rows := r.run(t, in)
	if sum.CacheHits != 2 || rows[1].Cached || rows[2].Cached || fake.Calls()-before < 2 {
		t.Fatalf("%d hits, %d calls; rows %+v", sum.CacheHits, fake.Calls()-before, rows)
	}
}

// TestCostColumnSumsToTheSummary: the rows' cost_usd add up to what the
// ledger counted, failed rows' calls that reported usage included.
func TestCostColumnSumsToTheSummary(t *testing.T) {
	srv := fakehf.StartChat(&fakehf.Chat{})
	defer srv.Close()
	l := spend.NewLedger(spend.Flat(0.15, 0.6), 0)
	r := chatRun{url: srv.URL + "/v1/chat/completions", ledger: l}
	in := append(texts(40, "review %d: a lovely repair, quick and kind"), "#unlabelled# so-so", "#nousage# fine")
	sum, rows := r.run(t, in)
	total := 0.0
	for _, row := range rows {
		total += row.CostUSD
	}
	if sum.Spend.Spent <= 0 || math.Abs(total-sum.Spend.Spent) > 1e-12 {
		t.Fatalf("rows sum to %g, the summary says %g", total, sum.Spend.Spent)
	}
	if !rows[40].Costed || rows[40].CostUSD == 0 {
		t.Errorf("a failed row that reported usage was not charged: %+v", rows[40])
	}
	if rows[41].Costed || sum.Spend.Unpriced != 1 {
		t.Errorf("a call without usage was priced: %+v, unpriced %d", rows[41], sum.Spend.Unpriced)
	}
	// The fake's own count, priced: nothing re-tokenised.
	want := float64(sum.Provider.PromptTokens)*0.15/1e6 + float64(sum.Provider.CompletionTokens)*0.6/1e6
	if math.Abs(want-sum.Spend.Spent) > 1e-12 {
		t.Errorf("spent %g, the usage reported prices at %g", sum.Spend.Spent, want)
	}
}

// TestMaxSpendStopsAndTheRestGoesOn: the run stops sending before its
// spend passes the limit, the rest are not_attempted, and a run with a
// higher limit finishes them; hits are never refused, even at a limit
// already spent.
func TestMaxSpendStopsAndTheRestGoesOn(t *testing.T) {
	fake := &fakehf.Chat{Latency: 5 * time.Millisecond}
	srv := fakehf.StartChat(fake)
	defer srv.Close()
	in := texts(200, "review %d: a lovely repair, quick and kind")
	prices := spend.Flat(1000, 1000) // $0.001 a token: a row costs about 5 cents
	r := chatRun{url: srv.URL + "/v1/chat/completions", dir: t.TempDir(), ledger: spend.NewLedger(prices, 1), c: 8}
	sum, rows := r.run(t, in)
	if sum.Stop != StopMaxSpend || sum.Counts[outcome.NotAttempted] == 0 || sum.Counts[outcome.Success] == 0 {
		t.Fatalf("stop %q, outcomes %v", sum.Stop, sum.Counts)
	}
	if sum.Spend.Spent > 1 {
		t.Errorf("spent %g past the limit of 1", sum.Spend.Spent)
	}
	done := sum.Counts[outcome.Success]
	for _, row := range rows {
		if row.Outcome == outcome.NotAttempted && row.Attempts != 0 {
			t.Fatalf("a row not attempted was sent: %+v", row)
		}
	}
	// Again, at a limit already passed, the rows not sent first: the
	// first call is refused, and every hit after it still answered.
	r.ledger = spend.NewLedger(prices, 1e-9)
	reversed := make([]string, len(in))
	for i, s := range in {
		reversed[len(in)-1-i] = s
	}
	sum, _ = r.run(t, reversed)
	if sum.CacheHits != done || sum.Provider.Calls != 0 || sum.Stop != StopMaxSpend {
		t.Fatalf("hits %d of %d, calls %d, stop %q", sum.CacheHits, done, sum.Provider.Calls, sum.Stop)
	}
	// A higher limit finishes the rest.
	r.ledger = spend.NewLedger(prices, 100)
	sum, _ = r.run(t, in)
	if sum.Counts[outcome.Success] != 200 || sum.Stop != StopNone || sum.CacheHits != done {
		t.Fatalf("outcomes %v, stop %q, hits %d", sum.Counts, sum.Stop, sum.CacheHits)
	}
}

// TestFallbackAnswersAreStoredUnderTheFallbacksKey: while the primary is
// down, the fallback's answers (a two-stage cascade's second stage, as
// --fallback-model builds it) are stored under the request the fallback
// was sent (not the primary's): a later run that asks the fallback's model
// there as its primary finds them, and a run of the primary does not.
func TestFallbackAnswersAreStoredUnderTheFallbacksKey(t *testing.T) {
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) }))
	defer down.Close()
	fbFake := &fakehf.Chat{}
	fbSrv := fakehf.StartChat(fbFake)
	defer fbSrv.Close()
	labels := []string{"positive", "negative"}
	newChat := func(model, url string) *provider.Chat {
		c, err := provider.NewChat(provider.ChatConfig{Model: model, Endpoint: url + "/v1/chat/completions", Labels: labels, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	dir := t.TempDir()
	open := func() *cache.Cache {
		f, err := cache.OpenFile(context.Background(), dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		return cache.New(f, cache.Options{})
	}
	in := texts(20, "review %d: a lovely repair")
	primary, fb := newChat("m", down.URL), newChat("fb", fbSrv.URL)
	g := resilience.Build(primary, resilience.Config{Concurrency: 1, Retries: 0, BreakerMinCalls: 1, BreakerThreshold: 0.01,
		BreakerCooldown: time.Hour, Escalates: true})
	c := open()
	pk, _ := cache.NewKeyer("chat", primary)
	fk, _ := cache.NewKeyer("chat", fb)
	stages := []Stage{{Keys: &pk}, {Guard: resilience.Build(fb, resilience.Config{Concurrency: 1}), Keys: &fk}}
	sum, err := Run(context.Background(), &listSource{texts: in}, &keepSink{}, g, Config{Cache: c, Stages: stages})
	if err != nil {
		t.Fatal(err)
	}
	c.Close(context.Background())
	if sum.Counts[outcome.Fallback] < 15 {
		t.Fatalf("outcomes %v", sum.Counts)
	}
	// The fallback's model as the primary: its answers are there.
	r := chatRun{url: fbSrv.URL + "/v1/chat/completions", model: "fb", dir: dir}
	calls := fbFake.Calls()
	got, _ := r.run(t, in)
	if got.CacheHits != sum.Counts[outcome.Fallback] || fbFake.Calls()-calls != int64(len(in))-got.CacheHits {
		t.Fatalf("%d hits for %d fallback answers, %d calls", got.CacheHits, sum.Counts[outcome.Fallback], fbFake.Calls()-calls)
	}
	// The primary's own requests were never answered: no hit.
	again := resilience.Build(newChat("m", down.URL), resilience.Config{Concurrency: 1, Retries: 0})
	c = open()
	defer c.Close(context.Background())
	s2, _ := Run(context.Background(), &listSource{texts: in}, &keepSink{}, again, Config{Cache: c, Keys: &pk})
	if s2.CacheHits != 0 {
		t.Fatalf("the primary's requests hit %d fallback answers", s2.CacheHits)
	}
}
