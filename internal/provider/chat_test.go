package provider_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

func newChat(t *testing.T, url string, labels []string, mod ...func(*provider.ChatConfig)) *provider.Chat {
	t.Helper()
	cfg := provider.ChatConfig{Model: "meta-llama/Llama-3.1-8B-Instruct:cerebras", Endpoint: url, Labels: labels, Timeout: 5 * time.Second}
	for _, m := range mod {
		m(&cfg)
	}
	c, err := provider.NewChat(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func classifyChat(t *testing.T, c *provider.Chat, text string) (provider.Answer, error) {
	t.Helper()
	return c.Classify(context.Background(), provider.Call{Texts: []string{text}})
}

func TestChatAsksForOneLabelAndReadsScoreAndUsage(t *testing.T) {
	f := &fakehf.Chat{Token: "sk-test-0123456789abcdef"}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	c := newChat(t, srv.URL+"/v1/chat/completions", []string{"positive", "NEGATIVE", "neutral"},
		func(cfg *provider.ChatConfig) { cfg.Token = "sk-test-0123456789abcdef" })
	ans, err := classifyChat(t, c, "The staff were terrible.")
	if err != nil {
		t.Fatal(err)
	}
	p := ans.Predictions[0]
	// The label as --labels writes it, not as the model did ("Negative.").
	if p.Label != "NEGATIVE" {
		t.Fatalf("label %q, want NEGATIVE", p.Label)
	}
	// 0.9 for "Neg", 0.08 for "Pos", "The" names no label: 0.9/0.98.
	if want := 0.9 / 0.98; math.Abs(p.Score-want) > 1e-9 {
		t.Fatalf("score %v, want %v", p.Score, want)
	}
	if !p.Usage.Known || p.Usage.Prompt <= 0 || p.Usage.Completion <= 0 {
		t.Fatalf("usage %+v", p.Usage)
	}
	var req map[string]any
	if err := json.Unmarshal(f.Bodies()[0], &req); err != nil {
		t.Fatal(err)
	}
	if req["model"] != "meta-llama/Llama-3.1-8B-Instruct:cerebras" || req["temperature"] != 0.0 || req["logprobs"] != true ||
		req["top_logprobs"] != 5.0 || req["stream"] != false {
		t.Fatalf("request %v", req)
	}
	// Under the default constraint (json-schema): room for {"label":"..."}
	// and the whitespace a grammar allows between its tokens (4 places, 21
	// each), no more than a little over.
	if mt := req["max_tokens"].(float64); mt < float64(len(`{"label":"positive"}`)+4*21) || mt > 128 {
		t.Fatalf("max_tokens %v: enough for the longest label in JSON, no more", mt)
	}
	msgs := req["messages"].([]any)
	sys := msgs[0].(map[string]any)
	user := msgs[1].(map[string]any)
	if sys["role"] != "system" || !strings.Contains(sys["content"].(string), "positive, NEGATIVE, neutral") ||
		user["role"] != "user" || user["content"] != "The staff were terrible." {
		t.Fatalf("messages %v", msgs)
	}
	if got := f.Headers()[0].Get("Authorization"); got != "Bearer sk-test-0123456789abcdef" {
		t.Fatalf("authorization %q", got)
	}
}

func TestChatTopLogprobsCoversTheLabelsUpTo20(t *testing.T) {
	f := &fakehf.Chat{}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	var labels []string
	for i := range 30 {
		labels = append(labels, "label"+string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	for _, n := range []int{2, 7, 30} {
		c := newChat(t, srv.URL, labels[:n], func(cfg *provider.ChatConfig) {
			cfg.Prompt = "Pick one of {labels}: {text}"
		})
		_, _ = classifyChat(t, c, "x")
		var req struct {
			TopLogprobs int `json:"top_logprobs"`
		}
		b := f.Bodies()
		_ = json.Unmarshal(b[len(b)-1], &req)
		if want := min(max(n, 5), 20); req.TopLogprobs != want {
			t.Errorf("%d labels: top_logprobs %d, want %d", n, req.TopLogprobs, want)
		}
	}
}

func TestChatNormalisesTheAnswer(t *testing.T) {
	cases := map[string]string{
		"Positive":                           "positive",
		"  POSITIVE.\n":                      "positive",
		"Label: Negative":                    "negative",
		`"negative"`:                         "negative",
		"**Positive**":                       "positive",
		"'positive'!":                        "positive",
		"<think>hmm, bad?</think>\nNegative": "negative",
		"not  so   GOOD":                     "Not so good",
	}
	for answer, want := range cases {
		f := &fakehf.Chat{Answer: func(string) string { return answer }}
		srv := fakehf.StartChat(f)
		c := newChat(t, srv.URL, []string{"positive", "negative", "Not so good"})
		ans, err := classifyChat(t, c, "text")
		srv.Close()
		if err != nil {
			t.Errorf("answer %q: %v", answer, err)
			continue
		}
		if got := ans.Predictions[0].Label; got != want {
			t.Errorf("answer %q: label %q, want %q", answer, got, want)
		}
	}
}

func TestChatAnswerNamingNoLabelIsUnlabelled(t *testing.T) {
	f := &fakehf.Chat{}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	c := newChat(t, srv.URL, []string{"positive", "negative"})
	for text, what := range map[string]string{"#unlabelled#": "names no label", "#several#": "names several labels"} {
		_, err := classifyChat(t, c, text)
		pe, ok := provider.AsError(err)
		if !ok || pe.Outcome != outcome.UpstreamUnlabelled {
			t.Fatalf("%s: %v, want upstream_unlabelled", text, err)
		}
		if !strings.Contains(pe.Summary(), what) || strings.Contains(pe.Summary(), "\n") {
			t.Errorf("%s: message %q", text, pe.Summary())
		}
		if !pe.Usage.Known {
			t.Errorf("%s: the answer's usage was lost", text)
		}
		if !pe.Retryable() || pe.StopsRun() || pe.Outcome.Final() {
			t.Errorf("%s: retryable %v, stops %v, final %v", text, pe.Retryable(), pe.StopsRun(), pe.Outcome.Final())
		}
	}
	if pe, _ := provider.AsError(func() error { _, err := classifyChat(t, c, "#unlabelled#"); return err }()); !strings.Contains(pe.Summary(), `"I cannot tell."`) {
		t.Errorf("the answer is not quoted: %q", pe.Summary())
	}
}

func TestChatWithoutLogprobsHasNoScore(t *testing.T) {
	f := &fakehf.Chat{}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	c := newChat(t, srv.URL, []string{"positive", "negative"})
	ans, err := classifyChat(t, c, "fine #nologprobs# #nousage#")
	if err != nil {
		t.Fatal(err)
	}
	if p := ans.Predictions[0]; p.Label != "positive" || !math.IsNaN(p.Score) || p.Usage.Known {
		t.Fatalf("prediction %+v: want positive, no score, no usage", p)
	}
}

// A server that refuses logprobs is asked again without them, and never
// with them again in the run: once per run, not once per row.
func TestChatServerRefusingLogprobsIsAskedWithoutOncePerRun(t *testing.T) {
	f := &fakehf.Chat{RefuseLogprobs: true}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	c := newChat(t, srv.URL, []string{"positive", "negative"})
	for range 3 {
		ans, err := classifyChat(t, c, "good")
		if err != nil {
			t.Fatal(err)
		}
		if p := ans.Predictions[0]; p.Label != "positive" || !math.IsNaN(p.Score) {
			t.Fatalf("prediction %+v", p)
		}
	}
	var asked []bool
	for _, b := range f.Bodies() {
		var req struct{ Logprobs bool }
		_ = json.Unmarshal(b, &req)
		asked = append(asked, req.Logprobs)
	}
	if len(asked) != 4 || !asked[0] || asked[1] || asked[2] || asked[3] {
		t.Fatalf("logprobs asked per call: %v, want [true false false false]", asked)
	}
}

func TestChatErrorsInOpenAIShape(t *testing.T) {
	const token = "sk-proj-SECRETsecret0123456789"
	f := &fakehf.Chat{}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	c := newChat(t, srv.URL, []string{"positive", "negative"}, func(cfg *provider.ChatConfig) { cfg.Token = token })
	cases := []struct {
		text      string
		code      outcome.Code
		retryable bool
		stops     bool
	}{
		{"#429#", outcome.UpstreamRateLimited, true, false},
		{"#quota#", outcome.UpstreamQuota, false, true},
		{"#context#", outcome.UpstreamRequestRejected, false, false},
		{"#401#", outcome.UpstreamAuth, false, true},
		{"#403#", outcome.UpstreamAuth, false, true},
		{"#500#", outcome.UpstreamFailed, true, false},
	}
	for _, tc := range cases {
		_, err := classifyChat(t, c, tc.text)
		pe, ok := provider.AsError(err)
		if !ok || pe.Outcome != tc.code || pe.Retryable() != tc.retryable || pe.StopsRun() != tc.stops {
			t.Errorf("%s: %v (retryable %v, stops %v), want %s", tc.text, err, ok && pe.Retryable(), ok && pe.StopsRun(), tc.code)
			continue
		}
		if s := pe.Summary(); strings.Contains(s, "SECRET") || strings.Contains(s, token) || len(s) > provider.MaxReason+100 {
			t.Errorf("%s: the message shows the token or is long: %q", tc.text, s)
		}
	}
	// The 429 says when: its exhausted dimension's reset (20ms).
	_, err := classifyChat(t, c, "#429# again")
	if pe, _ := provider.AsError(err); pe.RetryAfter != 20*time.Millisecond {
		t.Fatalf("429 retry after %v, want 20ms from x-ratelimit-reset-requests", pe.RetryAfter)
	}
	if _, err := classifyChat(t, c, "#context#"); !outcome.UpstreamRequestRejected.Final() || !strings.Contains(err.Error(), "context length") {
		t.Fatalf("context: %v", err)
	}
}

// A key that matches no pattern (a local server's) is still kept out of
// what a server echoes.
func TestChatEchoedTokenIsRedactedWhateverItsShape(t *testing.T) {
	const token = "local-key-not-like-any-other-42"
	f := &fakehf.Chat{Token: "another"}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	c := newChat(t, srv.URL, []string{"a", "b"}, func(cfg *provider.ChatConfig) { cfg.Token = token })
	_, err := classifyChat(t, c, "x")
	pe, ok := provider.AsError(err)
	if !ok || pe.Outcome != outcome.UpstreamAuth {
		t.Fatalf("%v", err)
	}
	if strings.Contains(pe.Summary(), token) || strings.Contains(err.Error(), token) || !strings.Contains(pe.Summary(), "Incorrect API key") {
		t.Fatalf("summary %q", pe.Summary())
	}
}

// Other servers' error shapes: vLLM's (the fields at the top, code a
// number), TGI's ({"error": "...", "error_type"}).
func TestChatErrorsOfOtherServers(t *testing.T) {
	cases := []struct {
		status int
		body   string
		want   outcome.Code
		msg    string
	}{
		{400, `{"object":"error","message":"This model's maximum context length is 2048 tokens. However, you requested 3000 tokens.","type":"BadRequestError","param":null,"code":400}`, outcome.UpstreamRequestRejected, "context length exceeded"},
		{400, `{"error":{"message":"bad","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, outcome.UpstreamRequestRejected, "context length exceeded"},
		{422, `{"error":"Input validation error: inputs tokens + max_new_tokens must be <= 4096","error_type":"validation"}`, outcome.UpstreamRequestRejected, "context length exceeded"},
		{400, `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}`, outcome.UpstreamRequestRejected, "context length exceeded"},
		{422, `{"error":"Input validation error: inputs tokens are fine","error_type":"validation"}`, outcome.UpstreamRequestRejected, "request rejected"},
		{429, `{"error":{"message":"quota","type":"insufficient_quota","code":"insufficient_quota"}}`, outcome.UpstreamQuota, "quota exceeded"},
		{402, `{"error":"You have exceeded your monthly included credits for Inference Providers."}`, outcome.UpstreamQuota, "payment required"},
	}
	for _, tc := range cases {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tc.status)
			_, _ = w.Write([]byte(tc.body))
		}))
		c := newChat(t, srv.URL, []string{"a", "b"})
		_, err := classifyChat(t, c, "x")
		srv.Close()
		if got := provider.OutcomeOf(err); got != tc.want || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%d %s: %v, want %s (%s)", tc.status, tc.body, err, tc.want, tc.msg)
		}
	}
}

func TestChatPromptTemplate(t *testing.T) {
	f := &fakehf.Chat{}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	c := newChat(t, srv.URL, []string{"bug", "feature"}, func(cfg *provider.ChatConfig) {
		cfg.Prompt = "Triage into {labels}.\nText: {text}"
	})
	_, _ = classifyChat(t, c, "crash on start {labels}")
	var req fakehf.ChatRequest
	_ = json.Unmarshal(f.Bodies()[0], &req)
	if len(req.Messages) != 1 || req.Messages[0].Content != "Triage into bug, feature.\nText: crash on start {labels}" {
		t.Fatalf("messages %+v", req.Messages)
	}
	if _, err := provider.NewChat(provider.ChatConfig{Model: "m", Labels: []string{"a", "b"}, Prompt: "no text here"}); err == nil {
		t.Fatal("a template without {text} was taken")
	}
}

func TestCheckLabels(t *testing.T) {
	many := make([]string, 101)
	for i := range many {
		many[i] = strings.Repeat("x", i+1)
	}
	for _, bad := range [][]string{nil, {"a"}, {"a", ""}, {"a", "A"}, {"yes", " \"Yes\" "}, many, {"a", strings.Repeat("b", 101)}, {"a", "b\x1b[31m"},
		{"a", "b\u200b"}, {"a", "\u202eb"}, {"a", "b\u2028c"}, {"a", "\xffb"}} {
		if err := provider.CheckLabels(bad); err == nil {
			t.Errorf("%q taken", bad)
		}
	}
	if err := provider.CheckLabels(many[:100]); err != nil {
		t.Errorf("100 labels: %v", err)
	}
}

func TestParseLimitsAndResetDurations(t *testing.T) {
	for v, want := range map[string]time.Duration{"1s": time.Second, "6m0s": 6 * time.Minute, "20ms": 20 * time.Millisecond,
		"1m30.5s": 90*time.Second + 500*time.Millisecond, "2": 2 * time.Second, "0.5": 500 * time.Millisecond, "": 0, "soon": 0, "-1s": 0} {
		if got := provider.ParseResetDuration(v); got != want {
			t.Errorf("%q: %v, want %v", v, got, want)
		}
	}
	h := http.Header{}
	h.Set("x-ratelimit-limit-tokens", "30000")
	h.Set("x-ratelimit-remaining-tokens", "29000")
	h.Set("x-ratelimit-reset-tokens", "2s")
	l := provider.ParseLimits(h, time.Now())
	if !l.Tokens || l.Requests || l.RemainingTokens != 29000 || l.LimitTokens != 30000 || l.ResetTokens != 2*time.Second {
		t.Fatalf("%+v", l)
	}
}

func TestZeroShotSendsCandidateLabelsAndReadsBothShapes(t *testing.T) {
	shapes := map[string]string{
		"list":    `[{"label":"billing","score":0.7},{"label":"bug","score":0.3}]`,
		"nested":  `[[{"label":"bug","score":0.2},{"label":"billing","score":0.8}]]`,
		"older":   `{"sequence":"x","labels":["billing","bug"],"scores":[0.9,0.1]}`,
		"olderls": `[{"sequence":"x","labels":["billing","bug"],"scores":[0.6,0.4]}]`,
	}
	for name, body := range shapes {
		f := &fakehf.Fake{Script: func(int64, []string, *http.Request) fakehf.Reply { return fakehf.Reply{Body: body} }}
		srv := fakehf.Start(f)
		hf, err := provider.NewHF(provider.HFConfig{Model: "facebook/bart-large-mnli", Endpoint: srv.URL + "/{model}", Labels: []string{"bug", "billing"}})
		if err != nil {
			t.Fatal(err)
		}
		ans, err := hf.Classify(context.Background(), provider.Call{Texts: []string{"I was charged twice"}})
		srv.Close()
		if err != nil || ans.Predictions[0].Label != "billing" {
			t.Errorf("%s: %+v, %v", name, ans, err)
			continue
		}
		var req struct {
			Inputs     string `json:"inputs"`
			Parameters struct {
				CandidateLabels []string `json:"candidate_labels"`
			} `json:"parameters"`
		}
		if err := json.Unmarshal(f.Bodies()[0], &req); err != nil || req.Inputs != "I was charged twice" ||
			strings.Join(req.Parameters.CandidateLabels, ",") != "bug,billing" {
			t.Errorf("%s: request %s", name, f.Bodies()[0])
		}
	}
	// A label that is not a candidate is not a zero-shot answer.
	f := &fakehf.Fake{}
	srv := fakehf.Start(f)
	defer srv.Close()
	hf, _ := provider.NewHF(provider.HFConfig{Model: "m", Endpoint: srv.URL, Labels: []string{"bug", "billing"}})
	if _, err := hf.Classify(context.Background(), provider.Call{Texts: []string{"x"}}); provider.OutcomeOf(err) != outcome.UpstreamPayload {
		t.Fatalf("POSITIVE from a zero-shot model: %v", err)
	}
}

// A chat call's connection failure is redacted as HF's (the one exchange
// both clients send through).
func TestChatTransportErrorRedactsURL(t *testing.T) {
	srv := fakehf.StartChat(&fakehf.Chat{})
	addr := strings.TrimPrefix(srv.URL, "http://")
	srv.Close()
	c := newChat(t, "http://user:PWSECRET@"+addr+"/v1/chat/completions?api_key=QSECRET", []string{"positive", "negative"})
	_, err := classifyChat(t, c, "a")
	var ue *url.Error
	if !errors.As(err, &ue) {
		t.Fatalf("no *url.Error in %v", err)
	}
	for _, shown := range []string{err.Error(), fmt.Sprintf("%+v", err), ue.Error()} {
		if strings.Contains(shown, "SECRET") {
			t.Fatalf("a credential is shown: %s", shown)
		}
	}
}

// TestRequestIsWhatIsSent: the body Request shows for a text is byte for
// byte the body a live call posts, for the chat client and the HF client
// alike (the cache's key and a Batch API line are built from it).
func TestRequestIsWhatIsSent(t *testing.T) {
	var got []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		if strings.HasSuffix(r.URL.Path, "/chat/completions") {
			io.WriteString(w, `{"choices":[{"message":{"content":"positive"}}]}`)
			return
		}
		io.WriteString(w, `[{"label":"POSITIVE","score":0.9}]`)
	}))
	defer srv.Close()
	chat, err := provider.NewChat(provider.ChatConfig{Model: "m", Endpoint: srv.URL + "/v1/chat/completions", Labels: []string{"positive", "negative"}})
	if err != nil {
		t.Fatal(err)
	}
	hf, err := provider.NewHF(provider.HFConfig{Model: "m", Endpoint: srv.URL + "/models/m"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []interface {
		provider.Classifier
		provider.Requester
	}{chat, hf} {
		_, want, err := c.Request("great!")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Classify(context.Background(), provider.Call{Texts: []string{"great!"}}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%T: Request shows\n%s\nbut the call sent\n%s", c, want, got)
		}
	}
}

// TestChatReadsTheServersOwnCost: a usage.cost the server reports
// (OpenRouter's) is read as the call's cost, as a number or a string of
// one; a negative, non-finite, unreadable or absurd one is ignored, and
// never fails the answer.
func TestChatReadsTheServersOwnCost(t *testing.T) {
	cases := []struct {
		cost   string
		want   float64
		costed bool
	}{
		{`0.00125`, 0.00125, true},
		{`"0.5"`, 0.5, true},
		{`0`, 0, true},
		{`-1`, 0, false},
		{`1e308`, 0, false},
		{`"NaN"`, 0, false},
		{`"cheap"`, 0, false},
		{`null`, 0, false},
		{`{"usd": 1}`, 0, false},
	}
	for _, tc := range cases {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `{"choices":[{"message":{"content":"positive"}}],"usage":{"prompt_tokens":10,"completion_tokens":1,"cost":%s}}`, tc.cost)
		}))
		c := newChat(t, srv.URL+"/v1/chat/completions", []string{"positive", "negative"}, func(cfg *provider.ChatConfig) { cfg.Constrain = "off" })
		ans, err := classifyChat(t, c, "great!")
		srv.Close()
		if err != nil {
			t.Fatalf("cost %s: %v", tc.cost, err)
		}
		u := ans.Usage()
		if u.Costed != tc.costed || u.Cost != tc.want || u.Prompt != 10 {
			t.Errorf("cost %s: read cost=%v costed=%v prompt=%d, want %v %v 10", tc.cost, u.Cost, u.Costed, u.Prompt, tc.want, tc.costed)
		}
	}
}

// promptContent is the one user message of the body a call for text would
// send (a --prompt-file run).
func promptContent(t *testing.T, c *provider.Chat, text string) (string, error) {
	t.Helper()
	_, body, err := c.Request(text)
	if err != nil {
		return "", err
	}
	var req fakehf.ChatRequest
	if err := json.Unmarshal(body, &req); err != nil || len(req.Messages) != 1 {
		t.Fatalf("body %.200s: %v", body, err)
	}
	return req.Messages[0].Content, nil
}

// The prompt is bounded as it is rendered: a template that repeats {text}
// made requests of 35 MB (10,000 times). A prompt of MaxPromptBytes is
// sent; one byte more is invalid_input, for that text alone, said before
// anything is built (CheckText), and Classify sends nothing for it.
func TestChatPromptIsBounded(t *testing.T) {
	f := &fakehf.Chat{}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	// Rendered: 2 × the text, and "a, b" for {labels}: 2L+4 bytes.
	c := newChat(t, srv.URL, []string{"a", "b"}, func(cfg *provider.ChatConfig) { cfg.Prompt = "{text}{text}{labels}" })
	fits := strings.Repeat("x", (provider.MaxPromptBytes-4)/2)
	content, err := promptContent(t, c, fits)
	if err != nil || len(content) != provider.MaxPromptBytes || c.CheckText(fits) != nil {
		t.Fatalf("a prompt of %d bytes (the bound %d): %v", len(content), provider.MaxPromptBytes, err)
	}
	over := fits + "x"
	err = c.CheckText(over)
	pe, ok := provider.AsError(err)
	if !ok || pe.Outcome != outcome.InvalidInput || !strings.Contains(err.Error(), "{text} 2 times") || !strings.Contains(err.Error(), "--max-chars") {
		t.Fatalf("one byte over the bound: %v", err)
	}
	if _, err := promptContent(t, c, over); provider.OutcomeOf(err) != outcome.InvalidInput {
		t.Fatalf("Request over the bound: %v", err)
	}
	if _, err := classifyChat(t, c, over); provider.OutcomeOf(err) != outcome.InvalidInput || f.Calls() != 0 {
		t.Fatalf("Classify over the bound: %v, %d calls", err, f.Calls())
	}
	// The default instruction holds the text once: the longest text
	// --max-chars allows (1,000,000 characters of 4 bytes) fits.
	plain := newChat(t, srv.URL, []string{"a", "b"})
	if err := plain.CheckText(strings.Repeat("😀", 1_000_000)); err != nil {
		t.Fatalf("the longest text, once: %v", err)
	}
}

// The token estimate counts every {text} and {labels} of the template,
// not one: it reserved under --tpm a thousandth of what 1,000 {text}s
// cost.
func TestChatEstimateCountsEveryText(t *testing.T) {
	labels := []string{"positive", "negative"}
	text := strings.Repeat("the service was slow ", 20) // 420 bytes
	once := newChat(t, "http://127.0.0.1:1", labels, func(cfg *provider.ChatConfig) { cfg.Prompt = "Pick {labels}: {text}" })
	many := newChat(t, "http://127.0.0.1:1", labels, func(cfg *provider.ChatConfig) {
		cfg.Prompt = "Pick {labels}: " + strings.Repeat("{text} {labels}\n", 1000)
	})
	content, err := promptContent(t, many, text)
	if err != nil {
		t.Fatal(err)
	}
	e1, e2 := once.EstimateTokens([]string{text}), many.EstimateTokens([]string{text})
	if e2 < len(content)/3 || e2 < 500*e1 {
		t.Fatalf("estimate %d for a prompt of %d bytes (%d for {text} once): want at least a token per 3 bytes", e2, len(content), e1)
	}
}

// The prompt tokens a server read from its prompt cache are read under
// each server's name for them, as part of the prompt's, never more than
// it: a count over the prompt is not believed past it.
func TestChatReadsCachedPromptTokens(t *testing.T) {
	cases := []struct {
		usage string
		want  int
	}{
		{`"prompt_tokens":2000,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":1920}`, 1920},
		{`"prompt_tokens":2000,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":0}`, 0},
		{`"prompt_tokens":2000,"completion_tokens":1,"prompt_tokens_details":null`, 0},
		{`"prompt_tokens":2000,"completion_tokens":1,"prompt_cache_hit_tokens":1024,"prompt_cache_miss_tokens":976`, 1024},
		{`"prompt_tokens":2000,"completion_tokens":1,"cache_read_input_tokens":1500`, 1500},
		{`"prompt_tokens":2000,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":9000}`, 2000},
		{`"prompt_tokens":2000,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":-5}`, 0},
		{`"prompt_tokens":2000,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":"many"}`, 0},
		{`"prompt_tokens_details":{"cached_tokens":100}`, 0},
	}
	for _, tc := range cases {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `{"choices":[{"message":{"content":"positive"}}],"usage":{%s}}`, tc.usage)
		}))
		c := newChat(t, srv.URL+"/v1/chat/completions", []string{"positive", "negative"}, func(cfg *provider.ChatConfig) { cfg.Constrain = "off" })
		ans, err := classifyChat(t, c, "great!")
		srv.Close()
		if err != nil {
			t.Fatalf("%s: %v", tc.usage, err)
		}
		if u := ans.Usage(); u.Cached != tc.want {
			t.Errorf("%s: cached %d, want %d", tc.usage, u.Cached, tc.want)
		}
	}
}

// A label file's fixed part is the system message, the text the user
// message after it.
func TestChatSystemIsTheFixedPart(t *testing.T) {
	c := newChat(t, "http://127.0.0.1:1/v1/chat/completions", []string{"positive", "negative"}, func(cfg *provider.ChatConfig) {
		cfg.System = "Label it.\n\n# Labels\n\n## positive\n\n## negative"
	})
	_, body, err := c.Request("fine")
	if err != nil {
		t.Fatal(err)
	}
	var req fakehf.ChatRequest
	if err := json.Unmarshal(body, &req); err != nil || len(req.Messages) != 2 || req.Messages[0].Role != "system" ||
		req.Messages[0].Content != "Label it.\n\n# Labels\n\n## positive\n\n## negative" || req.Messages[1].Content != "fine" {
		t.Fatalf("body %s", body)
	}
	if _, err := provider.NewChat(provider.ChatConfig{Model: "m", Endpoint: "http://h/v1/chat/completions", Labels: []string{"a", "b"}, System: "x", Prompt: "{text}"}); err == nil {
		t.Fatal("a system and a prompt template taken together")
	}
}
