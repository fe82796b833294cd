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
	"github.com/hfsent/hfsent/internal/provider"
)

// TestMetricsMatchWhatWasSent: /metrics, parsed with Prometheus's own
// parser, counts exactly the requests, outcomes, rejections, calls,
// retries, 429s and reused answers of a known mix.
func TestMetricsMatchWhatWasSent(t *testing.T) {
	g := newGate()
	f := &fakehf.Fake{Script: func(_ int64, texts []string, r *http.Request) fakehf.Reply {
		switch t := texts[0]; {
		case strings.Contains(t, "#held"):
			g.wait(r)
		case strings.Contains(t, "#500"):
			return fakehf.Reply{Status: 500}
		case strings.Contains(t, "#429"):
			return fakehf.Reply{Status: 429} // no Retry-After: no pause for the others
		}
		return fakehf.Reply{}
	}}
	h := start(t, f, func(s *setup) { s.res.Concurrency = 2 })
	expect := func(a answer, status int) {
		t.Helper()
		if a.status != status {
			t.Fatalf("status %d, want %d: %s", a.status, status, a.body)
		}
	}
	for i := range 3 {
		expect(h.feedback(fmt.Sprint("s", i), uniq(i)), 200)
	}
	expect(h.feedback("dup", uniq(0)), 200)                               // reused
	expect(h.feedback("", "no id"), 422)                                  // invalid
	expect(h.post(PathFeedback, map[string]any{"text": 1}), 422)          // invalid
	expect(h.feedback("f", "#500"), 502)                                  // 2 calls
	expect(h.feedback("r", "#429"), 503)                                  // 2 calls, 2 429s
	expect(h.do(t.Context(), http.MethodGet, PathFeedback, "", nil), 405) // no outcome
	// Both slots held, one more is turned away.
	held := make(chan answer, 2)
	calls := f.Calls() // counted, unlike InFlight, only once a call arrives: see TestOpenAPIMatchesTheHandlers
	for i := range 2 {
		go func() { held <- h.feedback(fmt.Sprint("h", i), fmt.Sprint("#held ", i)) }()
	}
	waitFor(t, "both slots held", func() bool { return f.Calls() == calls+2 })
	m := h.metrics()
	if v := h.value(m, "hfsent_slots_in_use"); v != 2 {
		t.Fatalf("hfsent_slots_in_use %v while two calls are held", v)
	}
	expect(h.feedback("x", "turned away"), 503)
	g.open()
	for range 2 {
		expect(<-held, 200)
	}
	batch := h.post(PathClassify, map[string]any{"items": []any{
		map[string]string{"request_id": "b1", "text": "batch one"},
		map[string]string{"request_id": "b2", "text": ""},
	}})
	expect(batch, 200)

	m = h.metrics()
	fb := []string{"route", PathFeedback}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"hfsent_http_requests_total", append(fb, "code", "200"), 6},
		{"hfsent_http_requests_total", append(fb, "code", "422"), 2},
		{"hfsent_http_requests_total", append(fb, "code", "502"), 1},
		{"hfsent_http_requests_total", append(fb, "code", "503"), 2},
		{"hfsent_http_requests_total", append(fb, "code", "405"), 1},
		{"hfsent_http_requests_total", []string{"route", PathClassify, "code", "200"}, 1},
		{"hfsent_http_request_duration_seconds", fb, 12},
		{"hfsent_outcomes_total", append(fb, "outcome", "success"), 6},
		{"hfsent_outcomes_total", append(fb, "outcome", "invalid_input"), 2},
		{"hfsent_outcomes_total", append(fb, "outcome", "upstream_failed"), 1},
		{"hfsent_outcomes_total", append(fb, "outcome", "upstream_rate_limited"), 1},
		{"hfsent_outcomes_total", append(fb, "outcome", "local_capacity"), 1},
		{"hfsent_outcomes_total", []string{"route", PathClassify, "outcome", "success"}, 1},
		{"hfsent_outcomes_total", []string{"route", PathClassify, "outcome", "invalid_input"}, 1},
		{"hfsent_admission_rejections_total", nil, 1},
		{"hfsent_provider_calls_total", nil, float64(f.Calls())},
		{"hfsent_provider_call_duration_seconds", nil, float64(f.Calls())},
		{"hfsent_provider_call_duration_seconds", []string{"outcome", "upstream_rate_limited"}, 2},
		{"hfsent_provider_retries_total", nil, 2},
		{"hfsent_provider_rate_limited_total", nil, 2},
		{"hfsent_reused_total", nil, 1},
		{"hfsent_slots_in_use", nil, 0},
		{"hfsent_slots_limit", nil, 2},
		{"hfsent_slots_max", nil, 2},
		{"hfsent_breaker_open", nil, 0},
		{"hfsent_ready", nil, 1},
		{"hfsent_cooldown_remaining_seconds", nil, 0},
	} {
		if got := h.value(m, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if f.Calls() != 3+2+2+2+1 {
		t.Errorf("the fake got %d calls, want 10", f.Calls())
	}
	if _, ok := m["go_goroutines"]; !ok {
		t.Errorf("no Go runtime metrics")
	}
}

// TestAccessLog: one line per request with the request id, route, status,
// outcome, attempts and duration; never the text, never the token.
func TestAccessLog(t *testing.T) {
	const text = "PRIVATE customer words 31337"
	h := start(t, &fakehf.Fake{Latency: 5 * time.Millisecond})
	if a := h.feedback("log-1", text); a.status != 200 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	if a := h.feedback("log-2", ""); a.status != 422 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	h.get(PathHealthz)
	h.shutdown()
	recs := h.logs.records("request")
	var feedback []map[string]any
	for _, r := range recs {
		if r["route"] == PathFeedback {
			feedback = append(feedback, r)
		}
	}
	if len(feedback) != 2 {
		t.Fatalf("%d access log lines for 2 requests:\n%s", len(feedback), h.logs.String())
	}
	ok, bad := feedback[0], feedback[1]
	if ok["request_id"] != "log-1" || ok["status"] != 200.0 || ok["outcome"] != "success" || ok["attempts"] != 1.0 ||
		ok["method"] != "POST" || ok["level"] != "INFO" {
		t.Errorf("access log line: %v", ok)
	}
	if d, _ := ok["duration_ms"].(float64); d <= 0 {
		t.Errorf("no duration: %v", ok)
	}
	if bad["request_id"] != "log-2" || bad["status"] != 422.0 || bad["outcome"] != "invalid_input" {
		t.Errorf("access log line: %v", bad)
	}
	for _, r := range recs {
		if r["route"] == PathHealthz && r["level"] != "DEBUG" {
			t.Errorf("probes are logged at debug level: %v", r)
		}
	}
	if strings.Contains(h.logs.String(), "31337") {
		t.Fatalf("the text reached the log:\n%s", h.logs.String())
	}
	b, _ := json.Marshal(recs)
	if strings.Contains(string(b), testToken) {
		t.Fatal("the token reached the log")
	}
}

// TestMetricsShowLearntRate: a chat provider that refuses by a token limit
// it sends no header for; /metrics shows the rate the guard learnt from
// its 429s (0 before the first).
func TestMetricsShowLearntRate(t *testing.T) {
	const rate = 6000.0 // tokens a second
	chat := &fakehf.Chat{Latency: 20 * time.Millisecond, Bucket: fakehf.Bucket{Rate: rate, Burst: rate},
		NoLimitHeaders: true, RetryAfterMs: true}
	csrv := fakehf.StartChat(chat)
	t.Cleanup(csrv.Close)
	client, err := provider.NewChat(provider.ChatConfig{Model: "m", Endpoint: csrv.URL + "/v1/chat/completions",
		Labels: []string{"positive", "negative"}, Concurrency: 16, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, &fakehf.Fake{}, func(s *setup) {
		s.wrap = func(provider.Classifier) provider.Classifier { return client }
		s.res.Concurrency, s.res.PaceByHeaders, s.res.RateLimitWait = 16, true, time.Minute
		s.cfg.Pipeline.AdmissionWait = 30 * time.Second // the rows queue for a slot, as classify's do
	})
	if v := h.value(h.metrics(), "hfsent_learnt_tokens_per_minute"); v != 0 {
		t.Fatalf("hfsent_learnt_tokens_per_minute %v before any call", v)
	}
	var wg sync.WaitGroup
	for i := range 120 {
		wg.Go(func() {
			if a := h.feedback(fmt.Sprint("r", i), fmt.Sprintf("review %d: %s", i, strings.Repeat("the service was fine and quick ", 9))); a.status != 200 {
				t.Errorf("status %d: %s", a.status, a.body)
			}
		})
	}
	wg.Wait()
	if chat.Rejected() == 0 {
		t.Fatal("the fake refused nothing: nothing to learn from")
	}
	got := h.value(h.metrics(), "hfsent_learnt_tokens_per_minute")
	t.Logf("%d calls, %d 429s; learnt %.0f tokens/min, the provider's %.0f", chat.Calls(), chat.Rejected(), got, rate*60)
	if got < rate*60/3 || got > rate*60*3 {
		t.Fatalf("hfsent_learnt_tokens_per_minute %v, want near %v", got, rate*60)
	}
}
