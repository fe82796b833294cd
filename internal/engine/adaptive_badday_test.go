package engine

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/input"
	"github.com/hfsent/hfsent/internal/resilience"
	"github.com/hfsent/hfsent/internal/results"
)

// badDay runs rows through a pipeline against a provider that allows six
// calls at once (429, Retry-After: 1, beyond) and fails every twentieth
// call with 503. It returns the total of the shared pauses, the 429s and
// the calls.
func badDay(t *testing.T, rows int, cfg resilience.Config) (paused time.Duration, limited, calls int64) {
	t.Helper()
	var mu sync.Mutex
	var fake *fakehf.Fake
	fake = &fakehf.Fake{Latency: 20 * time.Millisecond, NoRecord: true, Script: func(n int64, _ []string, _ *http.Request) fakehf.Reply {
		switch {
		case fake.InFlight() > 6:
			mu.Lock()
			limited++
			mu.Unlock()
			return fakehf.Reply{Status: 429, Header: map[string]string{"Retry-After": "1"}}
		case n%20 == 0:
			return fakehf.Reply{Status: 503}
		}
		return fakehf.Reply{}
	}}
	srv := fakehf.Start(fake)
	defer srv.Close()
	var pauses []time.Duration
	cfg.OnPause = func(until time.Time) {
		mu.Lock()
		pauses = append(pauses, time.Until(until))
		mu.Unlock()
	}
	cfg.Retries, cfg.RateLimitWait, cfg.MaxRetryAfter = 4, time.Minute, time.Minute
	cfg.BackoffBase, cfg.BackoffMax = 50*time.Millisecond, time.Second
	g := guarded(t, srv.URL, cfg)
	p := NewPipeline(context.Background(), g, Config{})
	var wg sync.WaitGroup
	for i := range rows {
		wg.Add(1)
		p.Submit(&Job{Row: input.Row{Seq: int64(i), ID: fmt.Sprint("r", i), Text: fmt.Sprint("order ", i, " works well")}, Done: func(results.Row) { wg.Done() }})
	}
	wg.Wait()
	p.Close()
	mu.Lock()
	defer mu.Unlock()
	for _, d := range pauses {
		paused += d
	}
	t.Logf("pauses %v", pauses)
	return paused, limited, fake.Calls()
}

// Issue 31: on a bad day, the adaptive limit's probes draw 429s by design;
// they step the limit back and pause no one. Before, 429s widespread among
// recent calls paused every call for a second or more (doubled when they
// came again): 9-10 shared pauses a run, the run twice as long.
func TestAdaptiveBadDayPausesNoOne(t *testing.T) {
	paused, limited, calls := badDay(t, 600, resilience.Config{Concurrency: 16, Adaptive: true})
	// The probes' 429s: 2.6% of calls on average over 25 runs under -race
	// on a quiet machine (at most 4.1%), 6.5% once under CI's load. The
	// issue's 5% is the storms' (internal/resilience/badday_storm_test.go,
	// where the bad day at the guard allows the same 10%).
	if paused > 0 || limited*10 > calls {
		t.Fatalf("shared pauses of %s, 429s %d of %d calls; want none, and at most 10%%", paused, limited, calls)
	}
}

// At a fixed -c 6 the provider's edge is never passed: no shared pause
// beyond the odd call the provider counts just after it ended.
func TestFixedBadDayBarelyPauses(t *testing.T) {
	paused, limited, calls := badDay(t, 600, resilience.Config{Concurrency: 6})
	if paused > 3*time.Second || limited*20 > calls {
		t.Fatalf("shared pauses of %s, 429s %d of %d calls", paused, limited, calls)
	}
}
