package resilience

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// Issue 31, item 2: the bad day and issue 25's storms, side by side, so
// that a change to the pacing or the adaptive limit is tried against both
// at once (-count=20). The bad day: a provider that allows 6 calls at once
// and answers 429 (Retry-After: 1) beyond, and 503 to one call in twenty.
// An adaptive limit probing for that edge draws 429s by design: they step
// the limit back, and must not pause every call (on the day the issue was
// filed they doubled a shared pause up to 10 s: 0.46 of the ideal time).
// The storms: a provider whose limits cannot be read, and a bare 429 for
// 9 s. The time figures are bench/badday.sh's and bench/chat_storm.sh's.

// badDay sends rows through the guard at c at once (the engine's -c) and
// reports the shared pauses, the rows that failed, the 429s and the calls.
func badDay(t *testing.T, cfg Config, rows, c int) (paused time.Duration, failed int, limited, calls int64) {
	t.Helper()
	var fake *fakehf.Fake
	var r429 atomic.Int64
	fake = &fakehf.Fake{Latency: 20 * time.Millisecond, NoRecord: true, Script: func(n int64, _ []string, _ *http.Request) fakehf.Reply {
		switch {
		case fake.InFlight() > 6:
			r429.Add(1)
			return fakehf.Reply{Status: 429, Header: map[string]string{"Retry-After": "1"}}
		case n%20 == 0:
			return fakehf.Reply{Status: 503}
		}
		return fakehf.Reply{}
	}}
	var mu sync.Mutex
	cfg.OnPause = func(until time.Time) {
		mu.Lock()
		paused += time.Until(until)
		mu.Unlock()
	}
	cfg.Retries, cfg.RateLimitWait, cfg.MaxRetryAfter = 4, time.Minute, time.Minute
	cfg.BackoffBase, cfg.BackoffMax = 50*time.Millisecond, time.Second
	g := Build(startFake(t, fake), cfg)
	var wg sync.WaitGroup
	var nfailed atomic.Int64
	sem := make(chan struct{}, c)
	for range rows {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, _, err := classifyRow(g, time.Minute); err != nil {
				nfailed.Add(1)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	return paused, int(nfailed.Load()), r429.Load(), fake.Calls()
}

func TestBadDay(t *testing.T) {
	for _, c := range []struct {
		about    string
		cfg      Config
		c        int
		maxPause time.Duration
		max429   float64 // of the calls
	}{
		// Probes draw 429s by design (5.4% in one run of twenty under
		// -race on a loaded machine): no shared pause at all.
		{"adaptive, -c 16", Config{Concurrency: 16, Adaptive: true}, 16, 0, 0.10},
		// The edge is never passed, but the provider may count a call
		// just after it ended: the odd pause of Retry-After.
		{"fixed -c 6", Config{Concurrency: 6}, 6, 3 * time.Second, 0.05},
	} {
		t.Run(c.about, func(t *testing.T) {
			paused, failed, limited, calls := badDay(t, c.cfg, 600, c.c)
			t.Logf("shared pauses %s, %d rows failed, %d 429s of %d calls", paused.Round(time.Millisecond), failed, limited, calls)
			if failed > 0 {
				t.Errorf("%d rows failed", failed)
			}
			if paused > c.maxPause {
				t.Errorf("shared pauses of %s, want at most %s", paused.Round(time.Millisecond), c.maxPause)
			}
			if float64(limited) > c.max429*float64(calls) {
				t.Errorf("%d 429s of %d calls, want at most %.0f%%", limited, calls, 100*c.max429)
			}
		})
	}
}

// Against a provider whose limits cannot be read, the default flags learn
// its rate from its refusals: every row succeeds, at most 5% of calls are
// refused, and the run takes little longer than the provider's rate
// allows; with the adaptive limit too. On main: 58 and 83 of 600 rows
// failed with 55% and 64% of calls refused; --adaptive 8.3% and 7.8%
// (at these figures).
func TestStormWithUnreadableLimits(t *testing.T) {
	const rate, rows, c = 16000, 600, 32
	for name, fake := range stormForms(rate) {
		for _, adaptive := range []bool{false, true} {
			cfg := chatDefaults()
			cfg.Adaptive = adaptive
			res := storm(t, fake(), cfg, rows, c)
			res.ratio = res.wall.Seconds() / res.ideal.Seconds()
			var floor time.Duration
			if res.ratio > 1.5 {
				// The ideal is the provider's rate, or what this machine
				// does with no limit at all if it is slower (loaded).
				floor = storm(t, &fakehf.Chat{Latency: 20 * time.Millisecond, NoRecord: true}, cfg, rows, c).wall
				res.ratio = res.wall.Seconds() / max(res.ideal, floor).Seconds()
			}
			t.Logf("%s, adaptive %v: %s (no limit: %s)", name, adaptive, res, floor.Round(time.Millisecond))
			if res.failed > 0 {
				t.Errorf("%s, adaptive %v: %d rows failed: %q", name, adaptive, res.failed, res.firstFailures)
			}
			if res.share > 0.05 {
				t.Errorf("%s, adaptive %v: %.1f%% of calls refused, want at most 5%%", name, adaptive, 100*res.share)
			}
			// bench/chat_storm.sh shows at most 1.3× with the real binary
			// (about 1.05×); a test on a shared machine allows its noise.
			if res.ratio > 1.5 {
				t.Errorf("%s, adaptive %v: wall %.2f× the ideal, want at most 1.5× here (1.3× in bench/chat_storm.sh)", name, adaptive, res.ratio)
			}
		}
	}
}

// A bare 429 (no Retry-After, no RateLimit header) for the first 9 s of a
// run, at 3 rows and -c 3, ends with every row success, every time; and
// for 12 s too. Time is scaled down tenfold (the backoff base, the window,
// the wait), so that five runs take seconds. With the 429s counted against
// --retries 4, the backoff's waits added up to 7.5 to 15 s (0.75 to 1.5 s
// here): a row whose draws were short ended upstream_rate_limited, in some
// runs at 9 s and in most at 12 s.
func TestBare429WindowIsOutlasted(t *testing.T) {
	windows := []time.Duration{900 * time.Millisecond, 1200 * time.Millisecond}
	for run := range 5 {
		window := windows[run%2]
		var first atomic.Int64
		f := &fakehf.Fake{Script: func(int64, []string, *http.Request) fakehf.Reply {
			first.CompareAndSwap(0, time.Now().UnixNano())
			if time.Since(time.Unix(0, first.Load())) < window {
				return fakehf.Reply{Status: 429}
			}
			return fakehf.Reply{}
		}}
		cfg := Config{Retries: 4, Concurrency: 3, BackoffBase: 25 * time.Millisecond, BackoffMax: 3 * time.Second,
			RateLimitWait: 12 * time.Second, MaxRetryAfter: time.Minute}
		g := Build(startFake(t, f), cfg)
		var wg sync.WaitGroup
		var failed atomic.Int64
		for range 3 {
			wg.Go(func() {
				if _, _, err := classifyRow(g, time.Minute); err != nil {
					failed.Add(1)
					t.Logf("run %d: %v", run, err)
				}
			})
		}
		wg.Wait()
		if n := failed.Load(); n > 0 {
			t.Errorf("run %d: %d of 3 rows failed after %s of bare 429s", run, n, window)
		}
	}
}
