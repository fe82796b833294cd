package provider_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// replayed serves a recording of internal/fakehf/replays: every call gets
// its exchanges in turn, the last one again after them.
func replayed(t *testing.T, name string) (*fakehf.Fake, string) {
	t.Helper()
	f := &fakehf.Fake{Script: fakehf.Load(name).Script()}
	srv := fakehf.Start(f)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func classifyOne(t *testing.T, c *provider.HF, text string) *provider.Error {
	t.Helper()
	_, err := c.Classify(context.Background(), provider.Call{Texts: []string{text}})
	pe, ok := provider.AsError(err)
	if !ok {
		t.Fatalf("error %v is not a *provider.Error", err)
	}
	return pe
}

// Today's answers, replayed byte for byte (or rebuilt from the servers'
// source where no recording is public: each file says which), map to the
// outcome table, and what the server said reaches the error summarised,
// with its request id.
func TestTodaysAnswers(t *testing.T) {
	cases := []struct {
		replay    string
		want      outcome.Code
		retryable bool
		stops     bool
		reason    string // in the summary, quoted
		requestID string
	}{
		{"router_404_no_model", outcome.UpstreamNotFound, false, true, `"Model this-model-does-not-exist-123 does not exist"`, ""},
		{"router_402_depleted", outcome.UpstreamQuota, false, true, `"You have depleted your monthly included credits. Purchase pre-paid credits to continue using Inference Providers."`, "Root=1-6807a1b2-0c5f2a6e3d1b4c7e8f9a0b1c"},
		{"router_422_text_plain", outcome.UpstreamRequestRejected, false, false, "Failed to deserialize the JSON body into the target type: missing field `inputs`", ""},
		{"toolkit_400_too_long", outcome.UpstreamRequestRejected, false, false, "The size of tensor a (664) must match", ""},
		{"endpoint_410_gone", outcome.UpstreamEndpoint, false, true, "https://api-inference.huggingface.co is no longer supported", ""},
		{"router_503_html", outcome.UpstreamFailed, true, false, "", ""},
		{"router_429_ratelimit", outcome.UpstreamRateLimited, true, false, "exceeded our hourly quotas", "Root=1-6807a1b2-5e6f7a8b9c0d1e2f3a4b5c6d"},
	}
	for _, c := range cases {
		t.Run(c.replay, func(t *testing.T) {
			_, url := replayed(t, c.replay)
			pe := classifyOne(t, newClient(t, url, time.Second), "hello")
			if pe.Outcome != c.want || pe.Retryable() != c.retryable || pe.StopsRun() != c.stops {
				t.Fatalf("got %s retryable=%v stops=%v, want %s %v %v (%s)", pe.Outcome, pe.Retryable(), pe.StopsRun(), c.want, c.retryable, c.stops, pe.Summary())
			}
			s := pe.Summary()
			if c.reason != "" && !strings.Contains(s, c.reason) {
				t.Errorf("summary %q lacks the server's reason %q", s, c.reason)
			}
			if c.reason == "" && pe.Reason != "" {
				t.Errorf("an HTML page read as a reason: %q", pe.Reason)
			}
			if c.requestID != "" && !strings.Contains(s, "(request id "+c.requestID+")") {
				t.Errorf("summary %q lacks the request id %s", s, c.requestID)
			}
			if strings.ContainsAny(s, "\n\r\t") || strings.Contains(s, "<") {
				t.Errorf("summary is not one clean line: %q", s)
			}
		})
	}
}

// The two 402s of the recordings read differently: no credits left, and a
// provider's free limit with pay-as-you-go off. Before, both read "no
// credits left".
func TestTwo402sSayTheirOwnReason(t *testing.T) {
	_, url := replayed(t, "router_402_depleted")
	c := newClient(t, url, time.Second)
	first, second := classifyOne(t, c, "a").Summary(), classifyOne(t, c, "b").Summary()
	if first == second || !strings.Contains(first, "depleted your monthly included credits") || !strings.Contains(second, "free monthly usage limit for groq") {
		t.Fatalf("402s:\n%s\n%s", first, second)
	}
}

// 408, the CDN's 520-524 and TEI's 424 may recover: they are retried (and
// 5xx-like ones count for the breaker).
func TestRecoverableFailuresAreRetryable(t *testing.T) {
	_, url := replayed(t, "cdn_52x")
	c := newClient(t, url, time.Second)
	for _, want := range []struct {
		status int
		code   outcome.Code
	}{{524, outcome.UpstreamFailed}, {520, outcome.UpstreamFailed}, {408, outcome.UpstreamTimeout}} {
		pe := classifyOne(t, c, "a")
		if pe.Status != want.status || pe.Outcome != want.code || !pe.Retryable() || pe.Reason != "" && want.status != 408 {
			t.Fatalf("HTTP %d: %s retryable=%v reason=%q, want %s, retryable", pe.Status, pe.Outcome, pe.Retryable(), pe.Reason, want.code)
		}
	}
	_, url = replayed(t, "tei_predict_errors")
	pe := classifyOne(t, newClient(t, url, time.Second), "a")
	if pe.Status != 424 || pe.Outcome != outcome.UpstreamFailed || !pe.Retryable() || pe.Reason != "Inference failed" {
		t.Fatalf("TEI's 424: %+v", pe)
	}
}

// TEI's other failures: 429 (no Retry-After) is a rate limit, the
// tokenizer's and the validation's 422 and the empty batch's 400 refuse the
// request, 413 (its body limit) refuses it too: each with TEI's "error".
func TestTEIFailures(t *testing.T) {
	_, url := replayed(t, "tei_predict_errors")
	c := newClient(t, url+"/predict", time.Second)
	want := []struct {
		status int
		code   outcome.Code
		reason string
	}{
		{424, outcome.UpstreamFailed, "Inference failed"},
		{429, outcome.UpstreamRateLimited, "Model is overloaded"},
		{422, outcome.UpstreamRequestRejected, "Tokenization error"},
		{400, outcome.UpstreamRequestRejected, "Batch is empty"},
		{422, outcome.UpstreamRequestRejected, "batch size 64 > maximum allowed batch size 32"},
		{413, outcome.UpstreamRequestRejected, "Failed to buffer the request body: length limit exceeded"},
	}
	for _, w := range want {
		pe := classifyOne(t, c, "a")
		if pe.Status != w.status || pe.Outcome != w.code || pe.Reason != w.reason || pe.RetryAfter != 0 {
			t.Fatalf("got %d %s %q (Retry-After %s), want %d %s %q", pe.Status, pe.Outcome, pe.Reason, pe.RetryAfter, w.status, w.code, w.reason)
		}
	}
}

// A server's reason is cut to one line of at most MaxReason characters,
// with no control characters, and never shows the token or a URL's
// credentials, even when the server echoes them.
func TestReasonIsSanitised(t *testing.T) {
	long := strings.Repeat("x", 500)
	for name, body := range map[string]string{
		"token echoed":    `{"error":"bad header: Bearer hf_secret; token hf_secret is not allowed"}`,
		"other token":     `{"error":"token hf_AbCdEfGhIjKlMnOpQrStUv revoked"}`,
		"url credentials": `{"error":"cannot reach http://user:pw@10.0.0.1/m?api_key=K1234"}`,
		"control chars":   `{"error":"line one\nline two\t\u0007\u001b[31mred\u202e"}`,
		"long":            `{"error":"` + long + `"}`,
		"object":          `{"error":{"message":"Invalid model id","code":400}}`,
		"fastapi":         `{"detail":[{"loc":["body","inputs"],"msg":"field required","type":"value_error.missing"}]}`,
		"list":            `{"error":["first","second"]}`,
	} {
		t.Run(name, func(t *testing.T) {
			f := &fakehf.Fake{Script: func(int64, []string, *http.Request) fakehf.Reply { return fakehf.Reply{Status: 400, Body: body} }}
			srv := fakehf.Start(f)
			defer srv.Close()
			pe := classifyOne(t, newClient(t, srv.URL, time.Second), "a")
			r := pe.Reason
			if strings.Contains(r, "hf_secret") || strings.Contains(r, "hf_AbCd") || strings.Contains(r, "pw@") || strings.Contains(r, "K1234") {
				t.Fatalf("a secret in the reason: %q", r)
			}
			if len([]rune(r)) > provider.MaxReason+1 || strings.ContainsAny(r, "\n\t\a\x1b\u202e") {
				t.Fatalf("reason not one short clean line (%d runes): %q", len([]rune(r)), r)
			}
			switch name {
			case "object":
				if r != "Invalid model id" {
					t.Fatalf("error.message: %q", r)
				}
			case "fastapi":
				if r != "field required" {
					t.Fatalf("detail[].msg: %q", r)
				}
			case "list":
				if r != "first; second" {
					t.Fatalf("error list: %q", r)
				}
			case "control chars":
				if r != "line one line two [31mred" {
					t.Fatalf("control characters: %q", r)
				}
			}
		})
	}
}

// Every text-classification call asks for truncation: "truncation": true
// in parameters for the Hugging Face API (transformers' pipeline otherwise
// fails on a text over the model's 512 tokens), top-level "truncate": true
// for TEI, which has no parameters.
func TestTruncationAskedFor(t *testing.T) {
	f := &fakehf.Fake{}
	srv := fakehf.Start(f)
	defer srv.Close()
	c := newClient(t, srv.URL, time.Second)
	for _, texts := range [][]string{{"one"}, {"one", "two"}} {
		if _, err := c.Classify(context.Background(), provider.Call{Texts: texts}); err != nil {
			t.Fatal(err)
		}
	}
	for i, b := range f.Bodies() {
		var req struct {
			Parameters map[string]any `json:"parameters"`
		}
		if err := json.Unmarshal(b, &req); err != nil || req.Parameters["truncation"] != true || req.Parameters["top_k"] != 1.0 {
			t.Fatalf("call %d: %s", i, b)
		}
	}
	tei := &fakehf.TEI{}
	ts := httptest.NewServer(tei)
	defer ts.Close()
	tc := newClient(t, ts.URL+"/predict", time.Second)
	for _, texts := range [][]string{{"one"}, {"one", "two"}} {
		if _, err := tc.Classify(context.Background(), provider.Call{Texts: texts}); err != nil {
			t.Fatal(err)
		}
	}
	for i, b := range tei.Bodies() {
		var req map[string]json.RawMessage
		if err := json.Unmarshal(b, &req); err != nil || string(req["truncate"]) != "true" || req["parameters"] != nil {
			t.Fatalf("TEI call %d: %s", i, b)
		}
	}
}

// TEI reads {"inputs": ["a", "b"]} as ONE pair of texts and answers the
// pair's two labels, sorted: a flat list as long as the batch. The client
// never reads it as one label per text (before, the second text got the
// least likely label, success); spoken to in its own batch form (an
// endpoint ending in /predict, or API tei) it answers every text.
func TestTEIBatches(t *testing.T) {
	tei := &fakehf.TEI{}
	srv := httptest.NewServer(tei)
	defer srv.Close()
	texts := []string{"a lovely day", "a terrible day"}

	// The Hugging Face form, to TEI's POST / (a dedicated endpoint on TEI).
	hf, err := provider.NewHF(provider.HFConfig{Endpoint: srv.URL, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ans, err := hf.Classify(context.Background(), provider.Call{Texts: texts})
	if pe, _ := provider.AsError(err); err == nil || pe.Outcome != outcome.UpstreamPayload || !errors.Is(err, provider.ErrFlatBatch) && !strings.Contains(err.Error(), "flat list") {
		t.Fatalf("a pair's answer read as a batch's: %+v, %v", ans, err)
	}

	for _, c := range []struct {
		name string
		cfg  provider.HFConfig
	}{
		{"/predict", provider.HFConfig{Endpoint: srv.URL + "/predict"}},
		{"API tei", provider.HFConfig{Endpoint: srv.URL, API: provider.APITEI}},
	} {
		c.cfg.Timeout = time.Second
		cl, err := provider.NewHF(c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if cl.API() != provider.APITEI {
			t.Fatalf("%s: API %s", c.name, cl.API())
		}
		ans, err := cl.Classify(context.Background(), provider.Call{Texts: texts})
		if err != nil || ans.Predictions[0].Label != "POSITIVE" || ans.Predictions[1].Label != "NEGATIVE" {
			t.Fatalf("%s: %+v, %v", c.name, ans, err)
		}
		if ans, err := cl.Classify(context.Background(), provider.Call{Texts: texts[1:]}); err != nil || ans.Predictions[0].Label != "NEGATIVE" {
			t.Fatalf("%s, one text: %+v, %v", c.name, ans, err)
		}
	}
	bodies := tei.Bodies()
	if got := string(bodies[1]); !strings.Contains(got, `"inputs":[["a lovely day"],["a terrible day"]]`) {
		t.Fatalf("TEI's batch form not sent: %s", got)
	}
}

// A 307 or 308 is followed with the same method and body (a token is
// sent on to the same host only); a 301, 302 or 303, which would make the
// POST a GET, is not followed: it stops the run, naming the target with
// its credentials redacted.
func TestRedirects(t *testing.T) {
	hub := fakehf.Load("hub_307_redirect").Exchanges[0].Reply() // Location: /api/models/google-bert/...
	ok := fakehf.Load("router_ok").Exchanges[0].Reply()
	for _, status := range []int{307, 308} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			var mu sync.Mutex
			var got []string
			f := &fakehf.Fake{Script: func(n int64, _ []string, r *http.Request) fakehf.Reply {
				mu.Lock()
				got = append(got, r.Method+" "+r.URL.Path)
				mu.Unlock()
				if n == 1 {
					rep := hub
					rep.Status = status
					return rep
				}
				return ok
			}}
			srv := fakehf.Start(f)
			defer srv.Close()
			c := newClient(t, srv.URL+"/models/old", time.Second)
			ans, err := c.Classify(context.Background(), provider.Call{Texts: []string{"I like you"}})
			if err != nil || ans.Predictions[0].Label != "POSITIVE" {
				t.Fatalf("%+v, %v", ans, err)
			}
			bodies := f.Bodies()
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 2 || got[1] != "POST /api/models/google-bert/bert-base-uncased" || string(bodies[0]) != string(bodies[1]) {
				t.Fatalf("redirect followed as %v, bodies %q", got, bodies)
			}
		})
	}
	for _, status := range []int{301, 302, 303} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			f := &fakehf.Fake{Script: func(n int64, _ []string, r *http.Request) fakehf.Reply {
				if r.Method != http.MethodPost {
					return fakehf.Reply{Status: 405, Body: `{"error":"Method Not Allowed"}`}
				}
				return fakehf.Reply{Status: status, Header: map[string]string{"Location": "https://user:PWSECRET@new.example/models/x?api_key=QSECRET"}, NoBody: true}
			}}
			srv := fakehf.Start(f)
			defer srv.Close()
			pe := classifyOne(t, newClient(t, srv.URL, time.Second), "a")
			s := pe.Summary()
			if pe.Outcome != outcome.UpstreamEndpoint || !pe.StopsRun() || f.Calls() != 1 ||
				!strings.Contains(s, "redirected to https://REDACTED@new.example/models/x?api_key=REDACTED") || strings.Contains(s, "SECRET") {
				t.Fatalf("%d: %s after %d calls: %s", status, pe.Outcome, f.Calls(), s)
			}
		})
	}
	// 405 (a POST the endpoint takes nowhere there) stops the run too.
	f := &fakehf.Fake{Script: func(int64, []string, *http.Request) fakehf.Reply { return fakehf.Reply{Status: 405} }}
	srv := fakehf.Start(f)
	defer srv.Close()
	if pe := classifyOne(t, newClient(t, srv.URL, time.Second), "a"); pe.Outcome != outcome.UpstreamEndpoint || !pe.StopsRun() {
		t.Fatalf("405: %+v", pe)
	}
}

// An endpoint that may be scaled to zero (any but the router): its 503
// before any answer is Cold, and a call asked WithScaleUp carries
// X-Scale-Up-Timeout (the seconds left before the row's deadline) and may
// take that long, so the proxy holds it until the replica is up. Once the
// endpoint has answered, a 503 is an ordinary failure.
func TestScaleUpTimeout(t *testing.T) {
	proxy := &fakehf.ScaledToZero{Inner: fakehf.Handler(&fakehf.Fake{}), StartUp: 1500 * time.Millisecond}
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("X-Scale-Up-Timeout"))
		mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	defer srv.Close()
	c := newClient(t, srv.URL, 200*time.Millisecond) // --timeout far below the start-up
	pe := classifyOne(t, c, "a")
	if !pe.Cold || pe.Status != 503 || !pe.Retryable() {
		t.Fatalf("first call: %+v", pe)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	ans, err := c.Classify(ctx, provider.Call{Texts: []string{"a"}, ScaleUp: true})
	if err != nil || ans.Predictions[0].Label != "POSITIVE" {
		t.Fatalf("held call: %v", err)
	}
	if d := time.Since(start); d < time.Second {
		t.Fatalf("answered after %s: was it held?", d)
	}
	if _, err := c.Classify(ctx, provider.Call{Texts: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	// A 503, a 200, a 503: only the first is Cold.
	later := fakehf.Start(&fakehf.Fake{Script: func(n int64, _ []string, _ *http.Request) fakehf.Reply {
		if n == 2 {
			return fakehf.Reply{}
		}
		return fakehf.Reply{Status: 503}
	}})
	defer later.Close()
	warm := newClient(t, later.URL, time.Second)
	if pe := classifyOne(t, warm, "a"); !pe.Cold {
		t.Fatalf("a 503 before any answer: %+v", pe)
	}
	if _, err := warm.Classify(context.Background(), provider.Call{Texts: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	if pe := classifyOne(t, warm, "a"); pe.Cold || pe.Status != 503 {
		t.Fatalf("a 503 after an answer: %+v", pe)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 3 || seen[0] != "" || seen[2] != "" {
		t.Fatalf("X-Scale-Up-Timeout sent %q; want only on the call after the 503", seen)
	}
	if n, err := strconv.Atoi(seen[1]); err != nil || n < 8 || n > 10 {
		t.Fatalf("X-Scale-Up-Timeout %q, want the 9-10 s left before the deadline", seen[1])
	}
	if proxy.Held() != 1 {
		t.Fatalf("the proxy held %d calls", proxy.Held())
	}
}

// --bill-to: every call carries X-HF-Bill-To.
func TestBillTo(t *testing.T) {
	f := &fakehf.Fake{}
	srv := fakehf.Start(f)
	defer srv.Close()
	c, err := provider.NewHF(provider.HFConfig{Endpoint: srv.URL, BillTo: "acme-research", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Classify(context.Background(), provider.Call{Texts: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	if got := f.Headers()[0].Get("X-HF-Bill-To"); got != "acme-research" {
		t.Fatalf("X-HF-Bill-To %q", got)
	}
}

// A 307 that leads back to itself: after 10 calls, each answered with a
// redirect, the call is the endpoint's fault (upstream_endpoint, naming the fix), for the
// task API's client and the chat client alike: both meet it in the
// transport error they share.
func TestRedirectLoopNamesTheEndpoint(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Redirect(w, r, r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	check := func(t *testing.T, err error) {
		t.Helper()
		pe, ok := provider.AsError(err)
		if !ok || pe.Outcome != outcome.UpstreamEndpoint || !strings.Contains(pe.Summary(), "redirects more than 10 times; set --endpoint to where it ends") {
			t.Fatalf("got %v, want upstream_endpoint naming the redirects", err)
		}
	}
	t.Run("hf", func(t *testing.T) {
		_, err := newClient(t, srv.URL+"/models/x", time.Second).Classify(context.Background(), provider.Call{Texts: []string{"a"}})
		check(t, err)
	})
	t.Run("chat", func(t *testing.T) {
		c, err := provider.NewChat(provider.ChatConfig{Model: "m", Endpoint: srv.URL + "/v1/chat/completions", Labels: []string{"yes", "no"}, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Classify(context.Background(), provider.Call{Texts: []string{"a"}})
		check(t, err)
	})
	if n := calls.Load(); n != 20 {
		t.Fatalf("the server got %d calls, want 10 a client (the call and 9 redirects followed)", n)
	}
}
