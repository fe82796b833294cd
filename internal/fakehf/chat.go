package fakehf

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Chat is a fake of an OpenAI-compatible Chat Completions server (the
// router's /v1/chat/completions, vLLM, TGI, Ollama, OpenAI): it answers a
// label for the user's text, with logprobs when asked, the usage, and the
// x-ratelimit-* headers of its token bucket; and the errors OpenAI sends in
// its shape ({"error": {"message", "type", "code"}}).
//
// Magic texts, anywhere in the user's text, choose the answer:
//
//	#unlabelled#   answers "I cannot tell." (no label)
//	#several#      answers "positive or negative"
//	#nologprobs#   answers without logprobs
//	#nousage#      answers without usage
//	#refuse-logprobs#  400 "logprobs is not supported" while logprobs are asked
//	#429#          429 rate_limit_exceeded with the reset headers, the first
//	               time the text is sent (then answered)
//	#quota#        429 insufficient_quota
//	#context#      400 context_length_exceeded
//	#401#          401 invalid_api_key, echoing the key it was sent
//	#403#          403
//	#500#          500
//	#refusal#      content null and a refusal (a structured-output refusal)
//	#filtered#     content null, finish_reason content_filter
//	#length#       {"label": "Pos, cut: finish_reason length
//
// A reasoning model's name (gpt-5*, o1*, o3*, o4*) refuses max_tokens (400
// unsupported_parameter) and a temperature other than 1 (400
// unsupported_value), as OpenAI does; its answers spend ReasoningTokens
// (in completion_tokens_details), and one whose max_completion_tokens
// leaves no room for them is cut (finish_reason length, content "").
// service_tier is answered as asked ("auto": "default").
//
// Otherwise the answer is Label(text) in title case ("Positive.", with a
// full stop, as chat models write it), or what Answer says; under a
// constraint the Backend holds to, the allowed label nearest Label(text),
// as {"label": ...} or bare (chatshape.go).
type Chat struct {
	// Latency is how long every call takes.
	Latency time.Duration
	// Token, when set, is the only bearer token accepted (401 otherwise).
	Token string
	// Answer, when set, is the content answered for the user's text.
	Answer func(text string) string
	// Gold, when set, answers the texts of its gold file (gold.go): the
	// gold label with its probability, else another, with logprobs that
	// carry information.
	Gold *Gold
	// RefuseLogprobs answers every request that asks for logprobs 400, as
	// a server that does not support them does.
	RefuseLogprobs bool
	// Bucket, when its Rate is set, charges each call its tokens (prompt
	// and completion) at arrival and answers 429 when they are not there.
	Bucket Bucket
	// RetryAfter is sent with a bucket's 429 (empty: none, the reset
	// headers only).
	RetryAfter string
	// HeadersOn429Only sends the x-ratelimit headers with the bucket's 429s
	// only: a client cannot pace by them before it is refused.
	HeadersOn429Only bool
	// Window, when set, also holds the bucket's rate over that shorter
	// window, which its headers never show: at most Rate×Window tokens in
	// any Window (a second bucket of that size at the same rate). OpenAI
	// warns that a per-minute limit may be enforced over shorter periods:
	// the headers describe a minute's bucket with room in it while calls
	// are refused.
	Window time.Duration
	// NoLimitHeaders sends no x-ratelimit header at all, on any answer (as
	// vLLM, Ollama and many of the router's providers do).
	NoLimitHeaders bool
	// RetryAfterMs sends retry-after-ms with a bucket's 429: the time until
	// the refused call's tokens would be there (a few ms for a call of a
	// hundred tokens at thousands a second).
	RetryAfterMs bool
	// RefuseFor answers every call 429 rate_limit_exceeded until that long
	// after the first, with no x-ratelimit header (and retry-after-ms: 10
	// with RetryAfterMs): a provider that keeps asking for a few ms.
	RefuseFor time.Duration
	// NoRecord keeps nothing per call (benchmarks).
	NoRecord bool
	// Backend is the server whose structured outputs it takes (BackendOpenAI,
	// BackendVLLM, BackendTGI, BackendIgnore).
	Backend string
	// Context, with ContextAPI, is the context it says it gives the model
	// (ContextModel, "m" by default); with Truncate it also cuts a longer
	// prompt to it silently, as Ollama does, counting Context prompt tokens.
	Context      int
	ContextAPI   string
	ContextModel string
	Truncate     bool
	// BusyFirst answers the first that many calls 503 "server busy" as
	// Ollama does when OLLAMA_MAX_QUEUE calls wait.
	BusyFirst int64
	// Raw, when set, is the body of every 200 (a hostile server's).
	Raw func(req ChatRequest) string
	// ReasoningTokens is what a reasoning model's answer spends reasoning.
	ReasoningTokens int
	// CacheMin, when set, is a prompt cache as OpenAI's: a call whose
	// system message was sent before, and whose prompt is CacheMin tokens
	// or more, reports as usage.prompt_tokens_details.cached_tokens the
	// system message's tokens, rounded down to CacheMin and a multiple of
	// 128 more (none under CacheMin).
	CacheMin int

	calls, rejected atomic.Int64
	tokens          atomic.Int64 // tokens charged to accepted calls
	mu              sync.Mutex
	bodies          [][]byte
	headers         []http.Header
	bucket          bucketState
	window          bucketState // Window's hidden bucket
	seen            map[string]bool
	prefixes        map[string]bool // system messages sent (CacheMin)
	firstCall       time.Time
}

// first reports whether text is sent for the first time.
func (c *Chat) first(text string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[string]bool{}
	}
	if c.seen[text] {
		return false
	}
	c.seen[text] = true
	return true
}

// Bucket is the fake's token limit: Rate tokens a second, up to Burst.
type Bucket struct {
	Rate, Burst float64
}

type bucketState struct {
	started bool
	level   float64
	at      time.Time
}

// StartChat runs c on a loopback server.
func StartChat(c *Chat) *httptest.Server { return httptest.NewServer(c) }

// Calls is the number of requests received.
func (c *Chat) Calls() int64 { return c.calls.Load() }

// Rejected is the number of 429s the bucket (or RefuseFor) answered.
func (c *Chat) Rejected() int64 { return c.rejected.Load() }

// Tokens is the tokens charged to the calls the bucket let through.
func (c *Chat) Tokens() int64 { return c.tokens.Load() }

// Bodies are the request bodies received, in order.
func (c *Chat) Bodies() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]byte(nil), c.bodies...)
}

// Headers are the request headers received, in order.
func (c *Chat) Headers() []http.Header {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]http.Header(nil), c.headers...)
}

// ChatRequest is what the fake reads of a request.
type ChatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	Temperature *float64 `json:"temperature"`
	MaxTokens   *int     `json:"max_tokens"`
	// OpenAI's fields.
	MaxCompletionTokens int    `json:"max_completion_tokens"`
	ReasoningEffort     string `json:"reasoning_effort"`
	ServiceTier         string `json:"service_tier"`
	Logprobs            bool   `json:"logprobs"`
	TopLogprobs         int    `json:"top_logprobs"`
	// The structured-output fields (chatshape.go).
	ResponseFormat    json.RawMessage `json:"response_format"`
	StructuredOutputs json.RawMessage `json:"structured_outputs"`
}

// UserText is the first user message: the text (a second one is a
// client's correction after an answer that named no label).
func (r ChatRequest) UserText() string {
	for _, m := range r.Messages {
		if m.Role == "user" {
			return m.Content
		}
	}
	return ""
}

// ChatTokens is how many tokens the fake counts for a text: about one per
// four bytes, at least one.
func ChatTokens(s string) int { return max(1, (len(s)+3)/4) }

func (c *Chat) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if isContextPath(r.URL.Path) {
		c.serveContext(w, r) // not a call: not counted
		return
	}
	n, body, refusing := c.record(r)
	w.Header().Set("Content-Type", "application/json")
	if refusing {
		c.rejected.Add(1)
		if c.RetryAfterMs {
			w.Header().Set("Retry-After-Ms", "10")
		}
		oaiError(w, 429, "requests", "rate_limit_exceeded", "Rate limit reached for requests.")
		return
	}
	var req ChatRequest
	if r.Method != http.MethodPost || json.Unmarshal(body, &req) != nil || len(req.Messages) == 0 {
		oaiError(w, 400, "invalid_request_error", "", "the body is not a chat completion request")
		return
	}
	text := req.UserText()
	auth := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	switch {
	case c.Token != "" && auth != c.Token, strings.Contains(text, "#401#"):
		// OpenAI quotes the key it refused (masked, but servers that copy
		// it do not all mask it).
		oaiError(w, 401, "invalid_request_error", "invalid_api_key", "Incorrect API key provided: "+auth+". You can find your API key at https://platform.openai.com/account/api-keys.")
		return
	case strings.Contains(text, "#403#"):
		oaiError(w, 403, "permission_denied", "", "This key ("+auth+") may not call this model.")
		return
	case n <= c.BusyFirst:
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(ollamaBusy))
		return
	}
	k, status, refusal, ctype := c.constrained(req)
	if status != 0 {
		w.Header().Set("Content-Type", ctype)
		w.WriteHeader(status)
		_, _ = w.Write([]byte(refusal))
		return
	}
	prompt := 0
	for _, m := range req.Messages {
		prompt += ChatTokens(m.Content) + 4
	}
	if c.Truncate && c.Context > 0 {
		prompt = min(prompt, c.Context)
	}
	plain := k.kind == "" || c.Answer != nil || c.Gold != nil || strings.Contains(text, "#unlabelled#") || strings.Contains(text, "#several#")
	content := c.content(text)
	var ch map[string]any
	if !plain {
		content, ch = c.constrainedChoice(k, req, text)
	} else {
		ch = c.choice(content, req, text)
	}
	completion := ChatTokens(content)
	if !c.charge(w, prompt+completion) {
		return
	}
	if !sleep(r, c.Latency) {
		return
	}
	if c.magicError(w, req, text) {
		return
	}
	if c.Raw != nil {
		_, _ = w.Write([]byte(c.Raw(req)))
		return
	}
	c.answer(w, req, text, ch, prompt, completion)
}

// answer writes the 200: choices[0] (ch, cut or refused as the text or
// the reasoning model's cap says), the usage and the service tier.
func (c *Chat) answer(w http.ResponseWriter, req ChatRequest, text string, ch map[string]any, prompt, completion int) {
	msg := ch["message"].(map[string]any)
	reasoning := 0
	if isReasoning(req.Model) {
		reasoning = c.ReasoningTokens
	}
	switch {
	case strings.Contains(text, "#refusal#"):
		msg["content"], msg["refusal"], ch["logprobs"] = nil, "I'm sorry, I cannot help with that.", nil
	case strings.Contains(text, "#filtered#"):
		msg["content"], ch["finish_reason"], ch["logprobs"] = nil, "content_filter", nil
	case strings.Contains(text, "#length#"):
		msg["content"], ch["finish_reason"], ch["logprobs"] = `{"label": "Pos`, "length", nil
	case reasoning > 0 && req.MaxCompletionTokens > 0 && req.MaxCompletionTokens < reasoning+completion:
		reasoning = req.MaxCompletionTokens
		msg["content"], ch["finish_reason"], ch["logprobs"], completion = "", "length", nil, 0
	}
	out := map[string]any{
		"id": "chatcmpl-fake", "object": "chat.completion", "model": req.Model,
		"choices": []any{ch},
	}
	if req.ServiceTier != "" {
		out["service_tier"] = strings.Replace(req.ServiceTier, "auto", "default", 1)
	}
	if !strings.Contains(text, "#nousage#") {
		completion += reasoning
		out["usage"] = c.usage(req, prompt, completion, reasoning)
	}
	b, _ := json.Marshal(out)
	_, _ = w.Write(b)
}

// isReasoning is the fake's rule for a reasoning model's name.
func isReasoning(model string) bool {
	model = model[strings.LastIndexByte(model, '/')+1:]
	for _, p := range []string{"gpt-5", "o1", "o3", "o4"} {
		if strings.HasPrefix(model, p) {
			return true
		}
	}
	return false
}

// magicError answers the error a magic text, or a reasoning model's
// refusal of a parameter, asks for; false when there is none.
func (c *Chat) magicError(w http.ResponseWriter, req ChatRequest, text string) bool {
	switch {
	case isReasoning(req.Model) && req.MaxTokens != nil:
		oaiParamError(w, 400, "invalid_request_error", "unsupported_parameter", "max_tokens", "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.")
	case isReasoning(req.Model) && req.Temperature != nil && *req.Temperature != 1:
		oaiParamError(w, 400, "invalid_request_error", "unsupported_value", "temperature", "Unsupported value: 'temperature' does not support "+
			strconv.FormatFloat(*req.Temperature, 'g', -1, 64)+" with this model. Only the default (1) value is supported.")
	case strings.Contains(text, "#429#") && c.first(text):
		w.Header().Set("X-Ratelimit-Remaining-Requests", "0")
		w.Header().Set("X-Ratelimit-Reset-Requests", "20ms")
		oaiError(w, 429, "requests", "rate_limit_exceeded", "Rate limit reached for requests per min (RPM): Limit 3, Used 3, Requested 1.")
	case strings.Contains(text, "#quota#"):
		oaiError(w, 429, "insufficient_quota", "insufficient_quota", "You exceeded your current quota, please check your plan and billing details.")
	case strings.Contains(text, "#context#"):
		oaiError(w, 400, "invalid_request_error", "context_length_exceeded", "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.")
	case strings.Contains(text, "#500#"):
		oaiError(w, 500, "server_error", "", "The server had an error while processing your request.")
	case req.Logprobs && (c.RefuseLogprobs || strings.Contains(text, "#refuse-logprobs#")):
		oaiError(w, 400, "invalid_request_error", "", "logprobs is not supported for this model")
	default:
		return false
	}
	return true
}

// record counts and keeps a call: its number, its body, and whether
// RefuseFor still refuses it.
func (c *Chat) record(r *http.Request) (n int64, body []byte, refusing bool) {
	n = c.calls.Add(1)
	body, _ = io.ReadAll(io.LimitReader(r.Body, 8<<20))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.firstCall.IsZero() {
		c.firstCall = time.Now()
	}
	if !c.NoRecord {
		c.bodies = append(c.bodies, body)
		c.headers = append(c.headers, r.Header.Clone())
	}
	return n, body, time.Since(c.firstCall) < c.RefuseFor
}

// usage is an answer's usage, with the tokens its prompt cache held.
func (c *Chat) usage(req ChatRequest, prompt, completion, reasoning int) map[string]any {
	u := map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
		"completion_tokens_details": map[string]int{"reasoning_tokens": reasoning}}
	if n := c.cached(req, prompt); n > 0 {
		u["prompt_tokens_details"] = map[string]int{"cached_tokens": n}
	}
	return u
}

// cached is the prompt tokens of req its prompt cache (CacheMin) holds.
func (c *Chat) cached(req ChatRequest, prompt int) int {
	if c.CacheMin <= 0 || len(req.Messages) == 0 || req.Messages[0].Role != "system" || prompt < c.CacheMin {
		return 0
	}
	sys := req.Messages[0].Content
	c.mu.Lock()
	seen := c.prefixes[sys]
	if c.prefixes == nil {
		c.prefixes = map[string]bool{}
	}
	c.prefixes[sys] = true
	c.mu.Unlock()
	n := ChatTokens(sys) + 4
	if !seen || n < c.CacheMin {
		return 0
	}
	return c.CacheMin + (n-c.CacheMin)/128*128
}

func (c *Chat) content(text string) string {
	switch {
	case strings.Contains(text, "#unlabelled#"):
		return "I cannot tell."
	case strings.Contains(text, "#several#"):
		return "positive or negative"
	case c.Answer != nil:
		return c.Answer(text)
	}
	if c.Gold != nil {
		if l, _, ok := c.Gold.Answer(text); ok {
			return titleCase(l) + "."
		}
	}
	l, _ := Label(text)
	return titleCase(l) + "."
}

func titleCase(l string) string {
	if l == "" {
		return l
	}
	return strings.ToUpper(l[:1]) + strings.ToLower(l[1:])
}

// choice is choices[0]: the content, and logprobs unless the text says
// none: the first token's alternatives are the answer's first three
// letters at 90% (or the Gold's probability), the other label's at 8%
// (the rest, less 2%, under Gold), and a word that is no label.
func (c *Chat) choice(content string, req ChatRequest, text string) map[string]any {
	ch := map[string]any{"index": 0, "finish_reason": "stop",
		"message": map[string]any{"role": "assistant", "content": content}}
	if !req.Logprobs || strings.Contains(text, "#nologprobs#") {
		ch["logprobs"] = nil
		return ch
	}
	first := content
	if len(first) > 3 {
		first = first[:3]
	}
	other := "Neg"
	if strings.EqualFold(first, "neg") {
		other = "Pos"
	}
	type alt struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
	}
	p, q := 0.9, 0.08
	if c.Gold != nil {
		if _, gp, ok := c.Gold.Answer(text); ok {
			p, q = gp, math.Max(0.001, 0.98-gp)
		}
	}
	top := []alt{{first, math.Log(p)}, {other, math.Log(q)}, {"The", math.Log(0.02)}}
	if req.TopLogprobs > 0 && req.TopLogprobs < len(top) {
		top = top[:req.TopLogprobs]
	}
	ch["logprobs"] = map[string]any{"content": []any{
		map[string]any{"token": first, "logprob": math.Log(p), "top_logprobs": top},
	}}
	return ch
}

// charge takes n tokens from the bucket (and the Window's), or answers 429
// with the reset headers; with no bucket every call passes. Every answer
// carries the bucket's x-ratelimit headers (never the Window's), unless
// NoLimitHeaders.
func (c *Chat) charge(w http.ResponseWriter, n int) bool {
	b := c.Bucket
	if b.Rate <= 0 {
		c.tokens.Add(int64(n))
		return true
	}
	c.mu.Lock()
	now := time.Now()
	level := c.bucket.refill(b.Burst, b.Rate, now)
	short := math.Inf(1) // what the Window's bucket holds
	if c.Window > 0 {
		short = c.window.refill(b.Rate*c.Window.Seconds(), b.Rate, now)
	}
	need := float64(n)
	ok := level >= need && short >= need
	if ok {
		c.bucket.level -= need
		c.window.level -= need
		level -= need
	}
	c.mu.Unlock()
	if !c.NoLimitHeaders && (!ok || !c.HeadersOn429Only) {
		h := w.Header()
		h.Set("X-Ratelimit-Limit-Tokens", fmt.Sprint(int64(b.Burst)))
		h.Set("X-Ratelimit-Remaining-Tokens", fmt.Sprint(int64(math.Floor(level))))
		h.Set("X-Ratelimit-Reset-Tokens", resetString(time.Duration((b.Burst-level)/b.Rate*float64(time.Second))))
		h.Set("X-Ratelimit-Limit-Requests", "100000")
		h.Set("X-Ratelimit-Remaining-Requests", "99999")
		h.Set("X-Ratelimit-Reset-Requests", "1ms")
	}
	if ok {
		c.tokens.Add(int64(n))
		return true
	}
	c.rejected.Add(1)
	if c.RetryAfter != "" {
		w.Header().Set("Retry-After", c.RetryAfter)
	}
	if c.RetryAfterMs {
		short := math.Min(level, short)
		w.Header().Set("Retry-After-Ms", fmt.Sprint(max(1, int64(math.Ceil((need-short)/b.Rate*1000)))))
	}
	oaiError(w, 429, "tokens", "rate_limit_exceeded", fmt.Sprintf("Rate limit reached on tokens per min (TPM): Limit %d, Requested %d.", int64(b.Burst), n))
	return false
}

// refill brings the bucket (of size burst, refilling rate a second) to now
// and returns its level; it starts full. The caller holds c.mu.
func (st *bucketState) refill(burst, rate float64, now time.Time) float64 {
	if !st.started {
		st.started, st.level, st.at = true, burst, now
	}
	st.level = math.Min(burst, st.level+now.Sub(st.at).Seconds()*rate)
	st.at = now
	return st.level
}

// resetString writes a duration as OpenAI does: "1s", "6m0s", "20ms".
func resetString(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%dms", max(1, d.Milliseconds()))
	}
	return d.Round(time.Millisecond).String()
}

func oaiError(w http.ResponseWriter, status int, typ, code, msg string) {
	oaiParamError(w, status, typ, code, "", msg)
}

// oaiParamError is oaiError naming the request's param at fault, as
// OpenAI names it in its 400s ("" : null).
func oaiParamError(w http.ResponseWriter, status int, typ, code, param, msg string) {
	var c, p any
	if code != "" {
		c = code
	}
	if param != "" {
		p = param
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": p, "code": c}})
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
