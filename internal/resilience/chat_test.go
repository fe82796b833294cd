package resilience

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// startChat runs the fake chat server and returns the real chat client.
func startChat(t *testing.T, f *fakehf.Chat) *provider.Chat {
	t.Helper()
	srv := fakehf.StartChat(f)
	t.Cleanup(srv.Close)
	c, err := provider.NewChat(provider.ChatConfig{Model: "m", Endpoint: srv.URL + "/v1/chat/completions",
		Labels: []string{"positive", "negative"}, Concurrency: 8, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func chatRow(g *Guard, text string) (provider.Answer, *Row, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := &Row{}
	ans, err := g.Classify(ctx, r, []string{text})
	return ans, r, err
}

// An answer naming no label is asked again once, never more, whatever
// --retries allows; both calls' tokens are counted.
func TestUnlabelledIsRetriedOnceAndItsTokensCounted(t *testing.T) {
	f := &fakehf.Chat{}
	c := &Counters{}
	g := Build(startChat(t, f), Config{Retries: 4, BackoffBase: time.Millisecond, Counters: c})
	_, r, err := chatRow(g, "#unlabelled#")
	if provider.OutcomeOf(err) != outcome.UpstreamUnlabelled || r.Attempts() != 2 || f.Calls() != 2 {
		t.Fatalf("%v after %d attempts (%d calls), want upstream_unlabelled after 2", err, r.Attempts(), f.Calls())
	}
	u := r.Usage()
	s := c.Snapshot(time.Second)
	if !u.Known || u.Prompt <= 0 || s.PromptTokens != int64(u.Prompt) || s.CompletionTokens != int64(u.Completion) || s.TokenCalls != 2 {
		t.Fatalf("row usage %+v, counters %+v", u, s)
	}
	ans, r, err := chatRow(g, "lovely")
	if err != nil || ans.Predictions[0].Label != "positive" || r.Attempts() != 1 || r.Usage().Prompt <= 0 {
		t.Fatalf("%+v %v", ans, err)
	}
	// The second call is not the first's bytes again (at temperature 0 a
	// deterministic server answers them the same): it quotes the answer
	// back and asks again.
	b := f.Bodies()
	if bytes.Equal(b[0], b[1]) || !bytes.Contains(b[1], []byte(`"role":"assistant","content":"I cannot tell."`)) {
		t.Fatalf("second call:\n%s\nfirst:\n%s", b[1], b[0])
	}
}

// Under a constraint the server kept, an answer naming no label is not
// asked again: the same call would get it back.
func TestUnlabelledUnderAConstraintIsNotAskedAgain(t *testing.T) {
	f := &fakehf.Chat{Answer: func(string) string { return `{"label": "angry"}` }}
	g := Build(startChat(t, f), Config{Retries: 4, BackoffBase: time.Millisecond})
	_, r, err := chatRow(g, "x")
	if provider.OutcomeOf(err) != outcome.UpstreamUnlabelled || r.Attempts() != 1 || f.Calls() != 1 {
		t.Fatalf("%v after %d calls, want upstream_unlabelled after 1", err, f.Calls())
	}
}

// A server that says it is busy (Ollama's 503 once OLLAMA_MAX_QUEUE calls
// wait) is backpressure, not an outage: the rows are retried with backoff
// until it takes them, and the breaker never counts it. Before, its 503s
// opened the breaker and held every row for its cooldown.
func TestBusyServerNeverOpensTheBreaker(t *testing.T) {
	f := &fakehf.Chat{BusyFirst: 40}
	c := &Counters{}
	g := Build(startChat(t, f), Config{Retries: 8, BackoffBase: time.Millisecond, BackoffMax: 20 * time.Millisecond,
		Concurrency: 4, BreakerMinCalls: 5, BreakerCooldown: time.Minute, Counters: c})
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, errs[i] = chatRow(g, "fine")
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("row %d: %v", i, err)
		}
	}
	if n := c.BreakerOpenings.Load(); n != 0 || f.Calls() < 40 {
		t.Fatalf("breaker opened %d times over %d calls (40 busy)", n, f.Calls())
	}
}

func TestChatErrorsThroughTheGuard(t *testing.T) {
	f := &fakehf.Chat{}
	g := Build(startChat(t, f), Config{Retries: 4, BackoffBase: time.Millisecond, BreakerMinCalls: 100})
	// A 429 rate_limit_exceeded is waited out (its 20ms reset) and asked again.
	start := time.Now()
	ans, r, err := chatRow(g, "#429# please")
	if err != nil || r.Attempts() != 2 || ans.Predictions[0].Label != "positive" {
		t.Fatalf("429 then answer: %v after %d attempts", err, r.Attempts())
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("retried after %s, before the 20ms reset", d)
	}
	// insufficient_quota is final, and stops the run.
	_, r, err = chatRow(g, "#quota#")
	if pe, ok := provider.AsError(err); !ok || pe.Outcome != outcome.UpstreamQuota || !pe.StopsRun() || r.Attempts() != 1 {
		t.Fatalf("quota: %v after %d attempts", err, r.Attempts())
	}
}
