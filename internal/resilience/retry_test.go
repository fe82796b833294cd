package resilience

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// arrivals records when the fake received each call.
type arrivals struct {
	mu sync.Mutex
	at []time.Time
}

func (a *arrivals) add() {
	a.mu.Lock()
	a.at = append(a.at, time.Now())
	a.mu.Unlock()
}

func (a *arrivals) get() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]time.Time(nil), a.at...)
}

// startFake runs f on loopback and returns the real HF client pointed at it.
func startFake(t *testing.T, f *fakehf.Fake) *provider.HF {
	t.Helper()
	srv := fakehf.Start(f)
	t.Cleanup(srv.Close)
	hf, err := provider.NewHF(provider.HFConfig{Model: "m", Endpoint: srv.URL + "/models/{model}",
		Concurrency: 32, Timeout: 2 * time.Second, ConnectTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return hf
}

// classifyRow calls cls the way the engine does, with a row and a deadline.
func classifyRow(cls *Guard, deadline time.Duration) (provider.Answer, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	row := &Row{}
	ans, err := cls.Classify(ctx, row, []string{"it works"})
	return ans, row.Attempts(), err
}

func TestRetryAfterSecondsIsHonoured(t *testing.T) {
	var arr arrivals
	f := &fakehf.Fake{Script: func(n int64, _ []string, _ *http.Request) fakehf.Reply {
		arr.add()
		if n == 1 {
			return fakehf.Reply{Status: 429, Header: map[string]string{"Retry-After": "1"}}
		}
		return fakehf.Reply{}
	}}
	c := &Counters{}
	cls := Build(startFake(t, f), Config{Retries: 4, BackoffBase: time.Millisecond, Counters: c})
	ans, attempts, err := classifyRow(cls, 10*time.Second)
	if err != nil {
		t.Fatalf("want success after the 429, got %v", err)
	}
	if ans.Predictions[0].Label != "POSITIVE" || attempts != 2 {
		t.Fatalf("got %+v after %d attempts, want POSITIVE after 2", ans, attempts)
	}
	at := arr.get()
	if gap := at[1].Sub(at[0]); gap < time.Second {
		t.Fatalf("retried %s after a 429 with Retry-After: 1, want at least 1s", gap)
	}
	if s := c.Snapshot(time.Second); s.Calls != 2 || s.Retries != 1 || s.RateLimited != 1 || s.Cooldowns != 1 {
		t.Fatalf("counters %+v, want 2 calls, 1 retry, 1 429, 1 cooldown", s)
	}
}

func TestRetryAfterHTTPDateIsHonoured(t *testing.T) {
	var arr arrivals
	f := &fakehf.Fake{Script: func(n int64, _ []string, _ *http.Request) fakehf.Reply {
		arr.add()
		if n == 1 {
			// HTTP-dates have whole seconds: 2s ahead means a wait in (1s, 2s].
			when := time.Now().Add(2 * time.Second).UTC().Format(http.TimeFormat)
			return fakehf.Reply{Status: 503, Header: map[string]string{"Retry-After": when}}
		}
		return fakehf.Reply{}
	}}
	cls := Build(startFake(t, f), Config{Retries: 4, BackoffBase: time.Millisecond})
	if _, attempts, err := classifyRow(cls, 10*time.Second); err != nil || attempts != 2 {
		t.Fatalf("got %v after %d attempts, want success after 2", err, attempts)
	}
	at := arr.get()
	if gap := at[1].Sub(at[0]); gap < 900*time.Millisecond {
		t.Fatalf("retried %s after Retry-After two seconds ahead, want about 1-2s", gap)
	}
}

func TestPermanentErrorsAreSentOnce(t *testing.T) {
	for _, status := range []int{400, 401, 402, 403, 404, 413, 422} {
		f := &fakehf.Fake{Script: func(int64, []string, *http.Request) fakehf.Reply {
			return fakehf.Reply{Status: status}
		}}
		cls := Build(startFake(t, f), Config{Retries: 4, BackoffBase: time.Millisecond})
		_, attempts, err := classifyRow(cls, 5*time.Second)
		if err == nil || attempts != 1 || f.Calls() != 1 {
			t.Fatalf("HTTP %d: sent %d times (%d attempts, err %v), want exactly once and an error", status, f.Calls(), attempts, err)
		}
		if provider.OutcomeOf(err) == outcome.CircuitOpen {
			t.Fatalf("HTTP %d opened the breaker", status)
		}
	}
}

// A loading model: the router's 503 says estimated_time 20, but the model
// is up sooner. The retry goes after about a second with X-Wait-For-Model,
// which the router holds until the model is up (here 2.5s, longer than the
// client's 2s attempt timeout), as huggingface_hub does, rather than
// sleeping the whole estimate first.
func TestLoadingModelRetriesSoonAndWaitsForTheModel(t *testing.T) {
	var arr arrivals
	up := time.Now().Add(2500 * time.Millisecond)
	f := &fakehf.Fake{Script: func(n int64, _ []string, r *http.Request) fakehf.Reply {
		arr.add()
		if left := time.Until(up); left > 0 {
			if r.Header.Get("X-Wait-For-Model") != "" {
				return fakehf.Reply{Delay: left}
			}
			return fakehf.Reply{Status: 503, Body: `{"error":"Model m is currently loading","estimated_time":20.0}`}
		}
		return fakehf.Reply{}
	}}
	cls := Build(startFake(t, f), Config{Retries: 4, BackoffBase: time.Millisecond, Timeout: 2 * time.Second})
	start := time.Now()
	if _, attempts, err := classifyRow(cls, 60*time.Second); err != nil || attempts != 2 {
		t.Fatalf("got %v after %d attempts, want success after 2", err, attempts)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("answered after %s: it slept the 20 s estimate instead of waiting for the model", d)
	}
	h := f.Headers()
	if h[0].Get("X-Wait-For-Model") != "" || h[1].Get("X-Wait-For-Model") != "1" {
		t.Fatalf("X-Wait-For-Model: first %q, retry %q; want none, then 1", h[0].Get("X-Wait-For-Model"), h[1].Get("X-Wait-For-Model"))
	}
	at := arr.get()
	if gap := at[1].Sub(at[0]); gap < 900*time.Millisecond || gap > 5*time.Second {
		t.Fatalf("retried %s after the loading 503, want about a second", gap)
	}
}

func TestRetriesStopAtTheLimitWithTheLastOutcome(t *testing.T) {
	f := &fakehf.Fake{Script: func(int64, []string, *http.Request) fakehf.Reply {
		return fakehf.Reply{Status: 502}
	}}
	// A high breaker bar, so that this is about the retry alone.
	cls := Build(startFake(t, f), Config{Retries: 2, BackoffBase: time.Millisecond, BreakerMinCalls: 100})
	_, attempts, err := classifyRow(cls, 5*time.Second)
	if provider.OutcomeOf(err) != outcome.UpstreamFailed || attempts != 3 {
		t.Fatalf("got %v after %d attempts, want upstream_failed after 1 + 2 retries", err, attempts)
	}
}

func TestRowDeadlineEndsWithTheLastOutcome(t *testing.T) {
	f := &fakehf.Fake{Script: func(int64, []string, *http.Request) fakehf.Reply {
		return fakehf.Reply{Status: 429, Header: map[string]string{"Retry-After": "30"}}
	}}
	cls := Build(startFake(t, f), Config{Retries: 4})
	start := time.Now()
	_, attempts, err := classifyRow(cls, 300*time.Millisecond)
	if provider.OutcomeOf(err) != outcome.UpstreamRateLimited || attempts != 1 {
		t.Fatalf("got %v after %d attempts, want upstream_rate_limited after 1", err, attempts)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the row took %s, past its deadline", d)
	}
}

func TestBackoffBounds(t *testing.T) {
	cfg := Config{}
	cfg.defaults()
	for n := 1; n <= 12; n++ {
		ceil := min(cfg.BackoffBase<<(n-1), cfg.BackoffMax)
		for range 50 {
			if d := Backoff(n, cfg.BackoffBase, cfg.BackoffMax); d < ceil/2 || d > ceil {
				t.Fatalf("retry %d: delay %s outside [%s, %s]", n, d, ceil/2, ceil)
			}
		}
	}
	g := Build(&stub{}, cfg)
	long := &provider.Error{Outcome: outcome.UpstreamRateLimited, Status: 429, RetryAfter: time.Hour}
	if d := g.retryDelay(long, &rowState{sent: 1}); d != cfg.MaxRetryAfter {
		t.Fatalf("Retry-After of an hour gave %s, want the cap %s", d, cfg.MaxRetryAfter)
	}
}
