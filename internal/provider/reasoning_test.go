package provider_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/spend"
)

// A reasoning model (by its name, or learnt from its refusal of max_tokens)
// is sent max_completion_tokens with room to reason and no temperature:
// every row labelled, its reasoning tokens read.
func TestChatReasoningModelLabelsEveryRow(t *testing.T) {
	for _, model := range []string{"gpt-5-mini", "openai/gpt-5-nano"} {
		f := &fakehf.Chat{ReasoningTokens: 600}
		srv := fakehf.StartChat(f)
		c := newChat(t, srv.URL+"/v1/chat/completions", []string{"positive", "negative"},
			func(cfg *provider.ChatConfig) { cfg.Model = model })
		for _, text := range []string{"Great stay.", "The staff were terrible."} {
			ans, err := classifyChat(t, c, text)
			if err != nil {
				t.Fatalf("%s: %v", model, err)
			}
			p := ans.Predictions[0]
			if p.Usage.Reasoning != 600 || p.Usage.Completion < 600 {
				t.Fatalf("%s: usage %+v, want 600 reasoning tokens in the completion", model, p.Usage)
			}
		}
		var req map[string]any
		bodies := f.Bodies()
		_ = json.Unmarshal(bodies[len(bodies)-1], &req)
		_, hasMax := req["max_tokens"]
		_, hasTemp := req["temperature"]
		if hasMax || hasTemp || req["max_completion_tokens"].(float64) < 8192 {
			t.Fatalf("%s: request %s: want max_completion_tokens with room to reason, no max_tokens, no temperature", model, bodies[0])
		}
		srv.Close()
	}
}

// A model whose name hfsent does not know as a reasoning model, served as
// one: its 400 to max_tokens is learnt once, and the row is asked again.
func TestChatLearnsReasoningModelFromRefusal(t *testing.T) {
	f := &fakehf.Chat{ReasoningTokens: 100}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	// The fake's names are a prefix test, so "o3x-custom" is one; hfsent's
	// list wants a separator after "o3", so it learns it from the refusal.
	c := newChat(t, srv.URL+"/v1/chat/completions", []string{"positive", "negative"},
		func(cfg *provider.ChatConfig) { cfg.Model = "o3x-custom" })
	for i := 0; i < 3; i++ {
		if _, err := classifyChat(t, c, "Great stay."); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.Calls(); n != 4 {
		t.Fatalf("%d calls, want 4: one refused, then every row once", n)
	}
}

// --reasoning-effort and --service-tier are sent; the answer's tier and
// reasoning tokens come back in the usage.
func TestChatSendsEffortAndTier(t *testing.T) {
	f := &fakehf.Chat{ReasoningTokens: 50}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	c := newChat(t, srv.URL+"/v1/chat/completions", []string{"positive", "negative"}, func(cfg *provider.ChatConfig) {
		cfg.Model, cfg.ReasoningEffort, cfg.ServiceTier, cfg.MaxCompletionTokens = "gpt-5-nano", "minimal", "flex", 2000
	})
	ans, err := classifyChat(t, c, "Great stay.")
	if err != nil {
		t.Fatal(err)
	}
	if u := ans.Predictions[0].Usage; u.Tier != "flex" || u.Reasoning != 50 {
		t.Fatalf("usage %+v, want tier flex and 50 reasoning tokens", u)
	}
	b := string(f.Bodies()[0])
	for _, want := range []string{`"reasoning_effort":"minimal"`, `"service_tier":"flex"`, `"max_completion_tokens":2000`} {
		if !strings.Contains(b, want) {
			t.Fatalf("request %s lacks %s", b, want)
		}
	}
}

// A refusal and a filtered answer are upstream_refused, not retried, with
// their usage; an answer cut at the cap is upstream_truncated naming
// --max-completion-tokens, as is a reasoning model's that spent its cap.
func TestChatRefusalFilterAndLength(t *testing.T) {
	f := &fakehf.Chat{Backend: fakehf.BackendOpenAI, ReasoningTokens: 20000}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	c := newChat(t, srv.URL+"/v1/chat/completions", []string{"positive", "negative"})
	for _, tc := range []struct {
		text string
		want outcome.Code
		msg  string
	}{
		{"#refusal# text", outcome.UpstreamRefused, "I'm sorry"},
		{"#filtered# text", outcome.UpstreamRefused, "content filter"},
		{"#length# text", outcome.UpstreamTruncated, "--max-completion-tokens"},
	} {
		_, err := classifyChat(t, c, tc.text)
		pe, ok := provider.AsError(err)
		if !ok || pe.Outcome != tc.want || !strings.Contains(pe.Msg, tc.msg) || !pe.NoRetry {
			t.Fatalf("%s: %v, want %s naming %q, not retried", tc.text, err, tc.want, tc.msg)
		}
		if !pe.Usage.Known || pe.Usage.Prompt == 0 {
			t.Fatalf("%s: usage %+v, want the billed tokens", tc.text, pe.Usage)
		}
	}
	r := newChat(t, srv.URL+"/v1/chat/completions", []string{"positive", "negative"},
		func(cfg *provider.ChatConfig) { cfg.Model = "gpt-5-mini" })
	_, err := classifyChat(t, r, "Great stay.")
	pe, ok := provider.AsError(err)
	if !ok || pe.Outcome != outcome.UpstreamTruncated || !strings.Contains(pe.Msg, "spent reasoning") || pe.Usage.Reasoning == 0 {
		t.Fatalf("reasoning model over its cap: %v, want upstream_truncated with its reasoning tokens", err)
	}
}

// Flex is priced at its own rate, by the tier the answer names.
func TestFlexPricedAtItsRate(t *testing.T) {
	ps, err := spend.Parse(strings.NewReader(`{"gpt-5-mini": {"input_cost_per_token": 2e-7, "output_cost_per_token": 2e-6,
		"input_cost_per_token_flex": 1e-7, "output_cost_per_token_flex": 1e-6, "input_cost_per_token_priority": 4e-7}}`))
	if err != nil {
		t.Fatal(err)
	}
	l := spend.NewLedger(ps, 0)
	u := provider.Usage{Prompt: 1000, Completion: 1000, Known: true}
	def, _ := l.Cost("gpt-5-mini", u, false)
	u.Tier = "flex"
	flex, _ := l.Cost("gpt-5-mini", u, false)
	u.Tier = "priority"
	prio, _ := l.Cost("gpt-5-mini", u, false)
	if !near(def, 0.0022) || !near(flex, 0.0011) || !near(prio, 0.0024) {
		t.Fatalf("default %v flex %v priority %v, want 0.0022 0.0011 0.0024", def, flex, prio)
	}
}

func near(a, b float64) bool { return a-b < 1e-12 && b-a < 1e-12 }

// Other servers' bodies stay byte for byte what they were before OpenAI's
// parameters were known: their cache keys hold.
func TestChatOtherServersBodyGolden(t *testing.T) {
	c := newChat(t, "http://127.0.0.1:8000/v1/chat/completions", []string{"positive", "negative"})
	_, b, err := c.Request("Great stay.")
	if err != nil {
		t.Fatal(err)
	}
	const golden = `{"model":"meta-llama/Llama-3.1-8B-Instruct:cerebras","messages":[{"role":"system","content":"You are a text classifier. Read the user's text and answer with exactly one of these labels, written as given, and nothing else: positive, negative"},{"role":"user","content":"Great stay."}],"temperature":0,"max_tokens":112,"logprobs":true,"top_logprobs":5,"stream":false,"response_format":{"type":"json_schema","json_schema":{"name":"label","strict":true,"schema":{"type":"object","properties":{"label":{"type":"string","enum":["positive","negative"]}},"required":["label"],"additionalProperties":false}}}}`
	if string(b) != golden {
		t.Fatalf("body changed:\n%s\nwant it to start\n%s", b, golden)
	}
}

// A finish_reason hfsent does not know is logged once and does not fail
// the row on its own: the answer is read as any other.
func TestChatUnknownFinishReasonIsLoggedNotFailed(t *testing.T) {
	f := &fakehf.Chat{Raw: func(fakehf.ChatRequest) string {
		return `{"choices":[{"message":{"role":"assistant","content":"negative"},"finish_reason":"tool_budget"}],"usage":{"prompt_tokens":10,"completion_tokens":1}}`
	}}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	var log bytes.Buffer
	c := newChat(t, srv.URL+"/v1/chat/completions", []string{"positive", "negative"}, func(cfg *provider.ChatConfig) {
		cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
	})
	for i := 0; i < 2; i++ {
		ans, err := classifyChat(t, c, "The staff were terrible.")
		if err != nil {
			t.Fatalf("call %d: %v, want the answer read", i+1, err)
		}
		if p := ans.Predictions[0]; p.Label != "negative" || p.Usage.Prompt != 10 {
			t.Fatalf("call %d: %+v", i+1, p)
		}
	}
	if n := strings.Count(log.String(), `finish_reason \"tool_budget\"`); n != 1 {
		t.Fatalf("the unknown finish_reason logged %d times, want once: %s", n, log.String())
	}
}
