package resilience

import (
	"context"
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

// The Hub's RateLimit reset is honoured whole, up to the row's deadline
// (MaxRetryAfter, 10 minutes by default): t=200 waits 200 s, where it was
// cut to 60 s, so every retry landed inside the window. The pause every
// call shares after it lasts as long.
func TestRateLimitResetHonouredPastAMinute(t *testing.T) {
	cfg := Config{}
	cfg.defaults()
	g := Build(&stub{}, cfg)
	reset := &provider.Error{Outcome: outcome.UpstreamRateLimited, Status: 429, RetryAfter: provider.ParseRateLimit(`"api";r=0;t=200`)}
	if d := g.retryDelay(reset, &rowState{sent: 1}); d != 200*time.Second {
		t.Fatalf("RateLimit t=200 waits %s, want 200s", d)
	}
	f := &fakehf.Fake{Script: fakehf.Load("router_429_ratelimit").Script()}
	srv := fakehf.Start(f)
	defer srv.Close()
	hf, err := provider.NewHF(provider.HFConfig{Endpoint: srv.URL, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	g = Build(hf, Config{Retries: 0})
	if _, _, err := classifyRow(g, 2*time.Second); provider.OutcomeOf(err) != outcome.UpstreamRateLimited {
		t.Fatalf("%v", err)
	}
	if p := g.Cooldown(); p < 199*time.Second || p > 201*time.Second {
		t.Fatalf("the shared pause is %s, want the 200 s the RateLimit header gave", p)
	}
}

// A 429 that says nothing of when backs off four times longer than a 5xx:
// five attempts no longer go in about 3.5 s.
func TestRateLimitWithoutHeaderBacksOffLonger(t *testing.T) {
	cfg := Config{}
	cfg.defaults()
	g := Build(&stub{}, cfg)
	bare := &provider.Error{Outcome: outcome.UpstreamRateLimited, Status: 429}
	five := &provider.Error{Outcome: outcome.UpstreamFailed, Status: 503}
	var total429, total5xx time.Duration
	for n := 1; n <= 4; n++ {
		r429, r5xx := &rowState{sent: n, sentAt: time.Now()}, &rowState{sent: n, sentAt: time.Now()}
		d, e := g.retryDelay(bare, r429), g.retryDelay(five, r5xx)
		ceil := min(4*cfg.BackoffBase<<(n-1), cfg.BackoffMax)
		if d < ceil/2-time.Millisecond || d > ceil {
			t.Fatalf("retry %d after a bare 429: %s, want within [%s, %s]", n, d, ceil/2, ceil)
		}
		ceil5 := min(cfg.BackoffBase<<(n-1), cfg.BackoffMax)
		if e < ceil5/2-time.Millisecond || e > ceil5 {
			t.Fatalf("retry %d after a 503: %s, want within [%s, %s]", n, e, ceil5/2, ceil5)
		}
		// The fixed half of a 429's backoff is twice the longest a 5xx's
		// can be: longer on every retry, whatever the jitter draws.
		if d <= e {
			t.Fatalf("retry %d: %s after a bare 429, %s after a 503", n, d, e)
		}
		total429 += d
		total5xx += e
	}
	if total429 < 7*time.Second || total429 <= total5xx {
		t.Fatalf("four retries after bare 429s wait %s in all (after 5xx: %s)", total429, total5xx)
	}
}

// A provider that has answered nothing but failures since the start, for a
// whole breaker window, with the breaker's probes failing too, is down: the
// guard says so (OnDown, with the commonest cause), and a batch stops its
// rows there instead of letting them wait out their deadline in the open
// breaker; they end with their last failure, none final.
func TestDownSinceTheStartIsTold(t *testing.T) {
	prim := &stub{model: "p", reply: func(int64, int64) error { return status(503) }}
	cfg := breakerConfig(&Counters{}, &syncBuffer{})
	cfg.BreakerWindow, cfg.BreakerCooldown = 300*time.Millisecond, 100*time.Millisecond
	g := Build(prim, cfg)
	stop := make(chan struct{})
	var told sync.Once
	causes := make(chan string, 1)
	g.OnDown(func(cause string) { told.Do(func() { causes <- cause; close(stop) }) })
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := g.Classify(ctx, &Row{Stop: stop}, []string{"it works"})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	select {
	case cause := <-causes:
		if cause != g.DownCause() || !strings.Contains(cause, "HTTP 503") {
			t.Fatalf("cause %q, DownCause %q", cause, g.DownCause())
		}
	default:
		t.Fatal("never told down")
	}
	for err := range errs {
		if pe, ok := provider.AsError(err); ok && pe.Outcome.Final() || !ok && !IsStopped(err) {
			t.Fatalf("a row ended %v", err)
		}
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("took %s to find the provider down", d)
	}
}

// A bad day is not down: once a call has succeeded, an outage as long as
// any, its probes failing, never stops anything; rows wait for recovery.
func TestOutageAfterASuccessIsNeverDown(t *testing.T) {
	var o outage
	prim := &stub{model: "p", reply: o.reply}
	cfg := breakerConfig(&Counters{}, &syncBuffer{})
	cfg.BreakerWindow, cfg.BreakerCooldown = 200*time.Millisecond, 100*time.Millisecond
	// Backoff long enough that every row meets the open breaker first, and
	// retries enough that no row spends them on the failing probes: this is
	// about the stop, not the retry budget.
	cfg.BackoffBase, cfg.Retries = 100*time.Millisecond, 50
	g := Build(prim, cfg)
	if _, _, err := classifyRow(g, time.Second); err != nil {
		t.Fatal(err)
	}
	o.down.Store(true)
	time.AfterFunc(1500*time.Millisecond, func() { o.down.Store(false) })
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, _, err := classifyRow(g, 30*time.Second); err != nil {
				t.Errorf("a row ended %v during a bad day", err)
			}
		})
	}
	wg.Wait()
	if g.DownCause() != "" {
		t.Fatalf("found down: %s", g.DownCause())
	}
}

// With a later stage (Escalates) the rows are answered elsewhere while
// the breaker is open: a provider down since the start does not stop the
// run. Without one, the same provider is found down (TestDownSinceStart).
func TestDownWithALaterStageGoesOn(t *testing.T) {
	prim := &stub{model: "p", reply: func(int64, int64) error { return status(503) }}
	cfg := breakerConfig(&Counters{}, &syncBuffer{})
	cfg.BreakerWindow, cfg.BreakerCooldown = 100*time.Millisecond, 50*time.Millisecond
	cfg.Escalates = true
	g := Build(prim, cfg)
	var told atomic.Bool
	g.OnDown(func(string) { told.Store(true) })
	deadline := time.Now().Add(2 * time.Second)
	rows := 0
	for time.Now().Before(deadline) {
		if _, _, err := classifyRow(g, time.Second); err == nil {
			t.Fatal("the primary answered")
		}
		rows++
	}
	if told.Load() || g.DownCause() != "" {
		t.Fatalf("found down with a later stage answering (%d rows)", rows)
	}
}

// The endpoint's verdict: a success proves it serves; three texts refused
// with the same 4xx, then the sample refused too, prove it refuses every
// call; three poison texts first, then a sample that succeeds, prove
// nothing against it.
func TestVerdict(t *testing.T) {
	for _, c := range []struct {
		name    string
		sample  int // the sample's status
		refuses bool
	}{{"refuses", 422, true}, {"poison texts first", 200, false}, {"sample meets a 503", 503, false}} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakehf.Fake{Script: func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
				if texts[0] == provider.SampleText {
					if c.sample == 200 {
						return fakehf.Reply{}
					}
					return fakehf.Reply{Status: c.sample}
				}
				return fakehf.Load("router_422_text_plain").Exchanges[0].Reply()
			}}
			g := Build(startFake(t, f), Config{Retries: 0})
			v := g.Verdict()
			for i := 1; i <= RefusedAfter; i++ {
				_, _, err := classifyRow(g, time.Second)
				if i < RefusedAfter && !v.Pending(err) {
					t.Fatalf("call %d: %v not pending before the verdict", i, err)
				}
				if i == RefusedAfter {
					pe, _ := provider.AsError(err)
					if c.refuses != (pe.Outcome == outcome.UpstreamEndpoint) || c.refuses != pe.StopsRun() {
						t.Fatalf("third refusal: %v", err)
					}
				}
			}
			select {
			case <-v.Done():
			default:
				t.Fatal("no verdict after the sample")
			}
			if v.Refuses() != c.refuses || f.Calls() != RefusedAfter+1 {
				t.Fatalf("refuses=%v after %d calls", v.Refuses(), f.Calls())
			}
			// Later refusals are judged by the verdict.
			_, _, err := classifyRow(g, time.Second)
			if got := provider.OutcomeOf(err); (got == outcome.UpstreamEndpoint) != c.refuses {
				t.Fatalf("after the verdict: %v", err)
			}
		})
	}
}
