package serve

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// TestBurstAdmission is the burst the service is known for: 8 requests at
// once, -c 3, --admission-wait 35ms, a provider that takes 90 ms a call
// (held here until the rejections are in, so that no timing decides it):
// three are answered, five get 503 local_capacity at once with
// Retry-After, and the provider never holds more than three.
func TestBurstAdmission(t *testing.T) {
	g := newGate()
	f := &fakehf.Fake{Latency: 90 * time.Millisecond}
	f.Script = func(_ int64, _ []string, r *http.Request) fakehf.Reply {
		g.wait(r)
		return fakehf.Reply{}
	}
	h := start(t, f, func(s *setup) { s.res.Concurrency = 3 })
	answers := make(chan answer, 8)
	for i := range 8 {
		go func() { answers <- h.feedback(fmt.Sprintf("b%d", i), uniq(i)) }()
	}
	var got []answer
	for range 5 {
		got = append(got, <-answers)
	}
	g.open()
	for range 3 {
		got = append(got, <-answers)
	}
	ok, rejected := 0, 0
	for _, a := range got {
		switch {
		case a.status == http.StatusOK:
			ok++
			if m := a.json(t); m["label"] != "POSITIVE" || m["model"] != provider.DefaultModel || m["score"] != 0.9987 {
				t.Errorf("200 body: %s", a.body)
			}
		case a.status == http.StatusServiceUnavailable && a.code(t) == string(outcome.LocalCapacity):
			rejected++
			if retryAfter(a) < 1 {
				t.Errorf("503 without a Retry-After of at least 1s: %q", a.header.Get("Retry-After"))
			}
		default:
			t.Errorf("unexpected answer %d: %s (%v)", a.status, a.body, a.err)
		}
	}
	if ok != 3 || rejected != 5 {
		t.Fatalf("%d answered and %d rejected, want 3 and 5", ok, rejected)
	}
	if f.MaxInFlight() > 3 || f.Calls() != 3 {
		t.Fatalf("the provider got %d calls, %d at once; want 3, never more than 3", f.Calls(), f.MaxInFlight())
	}
}

// TestErrorMapping: every provider failure becomes a stable error a caller
// can act on, with the status of the outcome table, a safe message, and
// Retry-After on a 503; no provider body, header or token reaches the
// caller or the log.
func TestErrorMapping(t *testing.T) {
	const secret = "PROVIDERSECRET77"
	body := `{"error":"` + secret + `"}`
	hdr := map[string]string{"X-Upstream-Secret": secret}
	cases := []struct {
		name   string
		reply  func(n int64, r *http.Request) fakehf.Reply
		tune   func(*setup)
		status int
		code   outcome.Code
		calls  int64
		check  func(t *testing.T, h *harness, a answer)
	}{
		{name: "timeout", status: 504, code: outcome.UpstreamTimeout, calls: 2,
			reply: func(int64, *http.Request) fakehf.Reply { return fakehf.Reply{Delay: 10 * time.Second} },
			tune:  func(s *setup) { s.res.Timeout = 100 * time.Millisecond }},
		{name: "429", status: 503, code: outcome.UpstreamRateLimited, calls: 2,
			reply: func(int64, *http.Request) fakehf.Reply {
				return fakehf.Reply{Status: 429, Body: body, Header: map[string]string{"Retry-After": "1", "X-Upstream-Secret": secret}}
			},
			check: func(t *testing.T, _ *harness, a answer) {
				if retryAfter(a) < 1 {
					t.Errorf("Retry-After %q", a.header.Get("Retry-After"))
				}
			}},
		{name: "500", status: 502, code: outcome.UpstreamFailed, calls: 2,
			reply: func(int64, *http.Request) fakehf.Reply { return fakehf.Reply{Status: 500, Body: body, Header: hdr} }},
		{name: "bad body", status: 502, code: outcome.UpstreamPayload, calls: 1,
			reply: func(int64, *http.Request) fakehf.Reply { return fakehf.Reply{Body: `{"nonsense": "` + secret + `"}`} }},
		{name: "401", status: 502, code: outcome.UpstreamAuth, calls: 1,
			reply: func(int64, *http.Request) fakehf.Reply { return fakehf.Reply{Status: 401, Body: body} }},
		{name: "402", status: 502, code: outcome.UpstreamQuota, calls: 1,
			reply: func(int64, *http.Request) fakehf.Reply { return fakehf.Reply{Status: 402, Body: body} }},
		{name: "404", status: 502, code: outcome.UpstreamNotFound, calls: 1,
			reply: func(int64, *http.Request) fakehf.Reply { return fakehf.Reply{Status: 404, Body: body} }},
		{name: "400", status: 502, code: outcome.UpstreamRequestRejected, calls: 1,
			reply: func(int64, *http.Request) fakehf.Reply { return fakehf.Reply{Status: 400, Body: body} }},
		{name: "loading model retried", status: 200, code: outcome.Success, calls: 2,
			reply: func(n int64, r *http.Request) fakehf.Reply {
				if r.Header.Get("X-Wait-For-Model") == "" {
					return fakehf.Reply{Status: 503, Body: `{"error":"Model fake/model is currently loading","estimated_time":0.5}`}
				}
				return fakehf.Reply{}
			},
			check: func(t *testing.T, h *harness, a answer) {
				if hs := h.fake.Headers(); len(hs) != 2 || hs[1].Get("X-Wait-For-Model") != "1" {
					t.Errorf("the retry of a loading model must ask X-Wait-For-Model: 1")
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := &fakehf.Fake{}
			f.Script = func(n int64, _ []string, r *http.Request) fakehf.Reply { return c.reply(n, r) }
			tune := []func(*setup){}
			if c.tune != nil {
				tune = append(tune, c.tune)
			}
			h := start(t, f, tune...)
			a := h.feedback("e1", "a text")
			if a.status != c.status {
				t.Fatalf("status %d, want %d: %s", a.status, c.status, a.body)
			}
			if c.status == 200 {
				if m := a.json(t); m["request_id"] != "e1" || m["label"] != "POSITIVE" {
					t.Fatalf("body %s", a.body)
				}
			} else {
				d := a.detail(t)
				if d["code"] != string(c.code) || d["message"] == "" {
					t.Fatalf("detail %s, want code %s and a message", a.body, c.code)
				}
			}
			if f.Calls() != c.calls {
				t.Fatalf("%d calls, want %d", f.Calls(), c.calls)
			}
			if c.status == 503 && retryAfter(a) < 1 {
				t.Fatalf("a 503 without Retry-After")
			}
			if c.check != nil {
				c.check(t, h, a)
			}
			h.shutdown()
			for what, s := range map[string]string{"answer body": string(a.body), "answer headers": fmt.Sprint(a.header), "log": h.logs.String()} {
				if strings.Contains(s, secret) || strings.Contains(s, testToken) {
					t.Fatalf("the %s carries the provider's body, header or the token:\n%s", what, s)
				}
			}
		})
	}
}

// TestLongRetryAfterAnsweredAtOnce: a 429 whose Retry-After outlasts the
// request's deadline is answered at once, 503 with the provider's
// Retry-After, instead of holding the caller until its deadline.
func TestLongRetryAfterAnsweredAtOnce(t *testing.T) {
	f := &fakehf.Fake{Script: func(int64, []string, *http.Request) fakehf.Reply {
		return fakehf.Reply{Status: 429, Header: map[string]string{"Retry-After": "45"}}
	}}
	h := start(t, f, func(s *setup) { s.cfg.RequestTimeout = 20 * time.Second })
	begin := time.Now()
	a := h.feedback("r1", "a text")
	took := time.Since(begin)
	if a.status != 503 || a.code(t) != string(outcome.UpstreamRateLimited) {
		t.Fatalf("status %d: %s", a.status, a.body)
	}
	if ra := retryAfter(a); ra < 44 || ra > 46 {
		t.Fatalf("Retry-After %q, want the provider's 45", a.header.Get("Retry-After"))
	}
	if took > 10*time.Second || f.Calls() != 1 {
		t.Fatalf("answered after %s and %d calls: a wait the deadline cannot cover must not be waited", took, f.Calls())
	}
	// Meanwhile every call waits for the provider's pause: a new request
	// is answered at once too, with the time left.
	b := h.feedback("r2", "another text")
	if b.status != 503 || retryAfter(b) < 30 || f.Calls() != 1 {
		t.Fatalf("during the pause: status %d, Retry-After %q, %d calls: %s", b.status, b.header.Get("Retry-After"), f.Calls(), b.body)
	}
}

// TestBreakerOpen: the server never waits for an open breaker. Without a
// fallback, a request is answered 503 circuit_open at once, with
// Retry-After the breaker's remaining open time, and /readyz turns 503;
// with one (a second stage), the fallback answers and names itself, and
// answered the failures that opened the breaker too.
func TestBreakerOpen(t *testing.T) {
	breaker := func(s *setup) {
		s.res.Retries = 0
		s.res.BreakerMinCalls = 2
		s.res.BreakerThreshold = 0.5
		s.res.BreakerWindow = time.Minute
		s.res.BreakerCooldown = 30 * time.Second
	}
	fail := func(int64, []string, *http.Request) fakehf.Reply { return fakehf.Reply{Status: 500} }

	h := start(t, &fakehf.Fake{Script: fail}, breaker)
	for i := range 2 {
		if a := h.feedback(fmt.Sprint("f", i), uniq(i)); a.status != 502 {
			t.Fatalf("failure %d: %d %s", i, a.status, a.body)
		}
	}
	calls := h.fake.Calls()
	begin := time.Now()
	a := h.feedback("open", "while open")
	if a.status != 503 || a.code(t) != string(outcome.CircuitOpen) || time.Since(begin) > 5*time.Second {
		t.Fatalf("while open: %d %s after %s", a.status, a.body, time.Since(begin))
	}
	if ra := retryAfter(a); ra < 20 || ra > 30 {
		t.Fatalf("Retry-After %d, want the breaker's remaining open time (up to 30s)", ra)
	}
	if h.fake.Calls() != calls {
		t.Fatalf("a call was sent into the open breaker")
	}
	r := h.get(PathReadyz)
	if r.status != 503 || r.code(t) != string(outcome.CircuitOpen) || retryAfter(r) < 20 {
		t.Fatalf("/readyz while open: %d %s", r.status, r.body)
	}
	if hz := h.get(PathHealthz); hz.status != 200 {
		t.Fatalf("/healthz: %d", hz.status)
	}

	fb := start(t, &fakehf.Fake{Script: fail}, breaker, func(s *setup) { s.fallback = provider.NewLocal() })
	for i := range 2 {
		fb.feedback(fmt.Sprint("f", i), uniq(i))
	}
	a = fb.feedback("open", "I love this product")
	if a.status != 200 || a.json(t)["model"] != provider.LocalModel {
		t.Fatalf("with a fallback: %d %s", a.status, a.body)
	}
	// The two failures that opened the breaker went on to it too.
	if n := fb.s.guard.Counters().FallbackRows.Load(); n != 3 {
		t.Fatalf("%d fallback rows counted, want the 3 the fallback answered", n)
	}
	if r := fb.get(PathReadyz); r.status != 200 {
		t.Fatalf("/readyz with a fallback answering: %d", r.status)
	}
}

// TestNoHeadOfLineBlocking: each request is answered as soon as its own
// call ends, whatever the others do.
func TestNoHeadOfLineBlocking(t *testing.T) {
	slow := newGate()
	f := &fakehf.Fake{Script: func(_ int64, texts []string, r *http.Request) fakehf.Reply {
		if strings.Contains(texts[0], "slow") {
			slow.wait(r)
		}
		return fakehf.Reply{}
	}}
	h := start(t, f, func(s *setup) { s.res.Concurrency = 4 })
	slowDone := make(chan answer, 2)
	for i := range 2 {
		go func() { slowDone <- h.feedback(fmt.Sprint("slow", i), fmt.Sprint("slow text ", i)) }()
	}
	waitFor(t, "the slow calls to reach the provider", func() bool { return f.InFlight() == 2 })
	for i := range 20 {
		if a := h.feedback(fmt.Sprint("fast", i), uniq(i)); a.status != 200 {
			t.Fatalf("fast request %d behind the slow ones: %d %s", i, a.status, a.body)
		}
	}
	select {
	case a := <-slowDone:
		t.Fatalf("a slow request ended before its call did: %d %s", a.status, a.body)
	default:
	}
	slow.open()
	for range 2 {
		if a := <-slowDone; a.status != 200 {
			t.Fatalf("slow request: %d %s", a.status, a.body)
		}
	}
}

// TestIdenticalTextsSentOnce: identical texts in flight share one call,
// and a recent answer is reused; --no-dedupe sends each.
func TestIdenticalTextsSentOnce(t *testing.T) {
	for _, dedupe := range []bool{true, false} {
		t.Run(fmt.Sprint("dedupe=", dedupe), func(t *testing.T) {
			g := newGate()
			f := &fakehf.Fake{Script: func(_ int64, _ []string, r *http.Request) fakehf.Reply { g.wait(r); return fakehf.Reply{} }}
			h := start(t, f, func(s *setup) {
				s.cfg.Pipeline.Dedupe = dedupe
				s.cfg.Pipeline.AdmissionWait = 10 * time.Second
				s.cfg.Pipeline.ShedStandingQueue = false // a queue is wanted here
			})
			var wg sync.WaitGroup
			var ok atomic.Int64
			for i := range 5 {
				wg.Go(func() {
					if a := h.feedback(fmt.Sprint("d", i), "the same terrible text"); a.status == 200 && a.json(t)["label"] == "NEGATIVE" {
						ok.Add(1)
					}
				})
			}
			if dedupe {
				waitFor(t, "the first call", func() bool { return f.InFlight() == 1 })
				time.Sleep(50 * time.Millisecond) // the others join it
			} else {
				waitFor(t, "five calls", func() bool { return f.InFlight() == 5 })
			}
			g.open()
			wg.Wait()
			again := h.feedback("d9", "the same terrible text")
			want := int64(1)
			if !dedupe {
				want = 6
			}
			if ok.Load() != 5 || again.status != 200 || f.Calls() != want {
				t.Fatalf("%d of 5 answered NEGATIVE, then %d; %d calls, want %d", ok.Load(), again.status, f.Calls(), want)
			}
			if dedupe {
				if r := h.value(h.metrics(), "hfsent_reused_total"); r != 5 {
					t.Fatalf("hfsent_reused_total %v, want 5", r)
				}
			}
		})
	}
}

// TestMicroBatching: 64 requests at once with -c 2 --batch-size 16 are
// answered with at most 8 provider calls, each caller getting its own
// label.
func TestMicroBatching(t *testing.T) {
	f := &fakehf.Fake{Latency: 150 * time.Millisecond}
	var biggest atomic.Int64
	f.Script = func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
		for n := int64(len(texts)); n > biggest.Load(); {
			if biggest.CompareAndSwap(biggest.Load(), n) {
				break
			}
		}
		return fakehf.Reply{}
	}
	h := start(t, f, func(s *setup) {
		s.res.Concurrency = 2
		s.cfg.Pipeline.BatchSize = 16
		s.cfg.Pipeline.AdmissionWait = 10 * time.Second
		s.cfg.Pipeline.ShedStandingQueue = false // a queue is wanted here
	})
	text := func(i int) string {
		if i%3 == 0 {
			return fmt.Sprintf("review %d: a terrible experience", i)
		}
		return fmt.Sprintf("review %d: lovely", i)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for i := range 64 {
		wg.Go(func() {
			id := fmt.Sprint("m", i)
			a := h.feedback(id, text(i))
			if a.status != 200 {
				errs <- fmt.Sprintf("%s: %d %s", id, a.status, a.body)
				return
			}
			m := a.json(t)
			label, score := fakehf.Label(text(i))
			if m["request_id"] != id || m["label"] != label || m["score"] != score {
				errs <- fmt.Sprintf("%s got %s, want %s %v", id, a.body, label, score)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if f.Calls() > 8 || biggest.Load() > 16 {
		t.Fatalf("%d provider calls (at most 8 wanted), the largest of %d texts (at most 16)", f.Calls(), biggest.Load())
	}
	t.Logf("64 requests in %d calls, the largest of %d texts", f.Calls(), biggest.Load())
}

// TestClassifyItems: POST /v1/classify answers one result per item, in
// order, each with its own outcome; a refused item does not stop the
// others; items ride in one call with --batch-size.
func TestClassifyItems(t *testing.T) {
	f := &fakehf.Fake{Latency: 20 * time.Millisecond}
	h := start(t, f, func(s *setup) {
		s.cfg.Pipeline.BatchSize = 8
		s.cfg.Pipeline.AdmissionWait = 5 * time.Second
		s.cfg.Pipeline.ShedStandingQueue = false // a queue is wanted here
		s.res.Concurrency = 1
	})
	a := h.post(PathClassify, map[string]any{"items": []any{
		map[string]any{"request_id": "i1", "text": "great stuff"},
		map[string]any{"request_id": "i2", "text": "   "},
		map[string]any{"request_id": "i3", "text": "terrible stuff"},
		map[string]any{"request_id": "i1", "text": "a duplicate id"},
		map[string]any{"request_id": 7, "text": "a number as id"},
		map[string]any{"request_id": "i6", "text": "fine", "extra": true},
		map[string]any{"request_id": "i7", "text": "never ever again"},
	}})
	if a.status != 200 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	res, _ := a.json(t)["results"].([]any)
	want := []struct {
		id, outcome, label, errPart string
		status                      float64
	}{
		{"i1", "success", "POSITIVE", "", 200},
		{"i2", "invalid_input", "", "items[1].text: blank text", 422},
		{"i3", "success", "NEGATIVE", "", 200},
		{"i1", "invalid_input", "", "items[3].request_id: duplicate request id", 422},
		{"", "invalid_input", "", "items[4].request_id: want a string, got number", 422},
		{"i6", "invalid_input", "", "items[5].extra: unknown field", 422},
		{"i7", "success", "NEGATIVE", "", 200},
	}
	if len(res) != len(want) {
		t.Fatalf("%d results for %d items: %s", len(res), len(want), a.body)
	}
	for i, w := range want {
		r := res[i].(map[string]any)
		if r["request_id"] != w.id || r["outcome"] != w.outcome || r["status"] != w.status {
			t.Errorf("item %d: %v, want %+v", i, r, w)
		}
		if w.label != "" && r["label"] != w.label {
			t.Errorf("item %d label %v, want %s", i, r["label"], w.label)
		}
		if w.errPart != "" && r["error"] != w.errPart {
			t.Errorf("item %d error %v, want %q", i, r["error"], w.errPart)
		}
	}
	if f.Calls() != 1 {
		t.Fatalf("the three valid items took %d calls, want 1 (they ride together)", f.Calls())
	}
}

// TestDeadlineNamesServesFlag: a request that passes its deadline is told
// which flag bounds it: serve's --request-timeout, never classify's
// --row-deadline.
func TestDeadlineNamesServesFlag(t *testing.T) {
	h := start(t, &fakehf.Fake{Latency: 3 * time.Second}, func(s *setup) {
		s.cfg.RequestTimeout = 300 * time.Millisecond
	})
	a := h.feedback("d1", "slower than the request's deadline")
	msg, _ := a.detail(t)["message"].(string)
	if a.status != 504 || a.code(t) != string(outcome.UpstreamTimeout) ||
		!strings.Contains(msg, "--request-timeout") || strings.Contains(msg, "--row-deadline") {
		t.Fatalf("answered %d %s", a.status, a.body)
	}
}
