package resilience

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// stub is a provider whose answer to call n (from 1) is decided by reply;
// it records how many calls it held at once.
type stub struct {
	model    string
	latency  time.Duration
	reply    func(n int64, inFlight int64) error
	calls    atomic.Int64
	inFlight atomic.Int64
	maxIn    atomic.Int64
	mu       sync.Mutex
	at       []time.Time
}

func (s *stub) Model() string { return s.model }

func (s *stub) Classify(ctx context.Context, _ provider.Call) (provider.Answer, error) {
	n := s.calls.Add(1)
	cur := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for m := s.maxIn.Load(); cur > m && !s.maxIn.CompareAndSwap(m, cur); m = s.maxIn.Load() {
	}
	s.mu.Lock()
	s.at = append(s.at, time.Now())
	s.mu.Unlock()
	if !sleep(ctx, nil, s.latency) {
		return provider.Answer{}, ctx.Err()
	}
	if s.reply != nil {
		if err := s.reply(n, cur); err != nil {
			return provider.Answer{}, err
		}
	}
	return provider.Answer{Predictions: []provider.Prediction{{Label: "POSITIVE", Score: 0.9}}, Model: s.model}, nil
}

func (s *stub) arrivals() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.at...)
}

func status(code int) error {
	pe := &provider.Error{Status: code, Outcome: outcome.UpstreamFailed, Msg: "server error"}
	if code == 429 {
		pe.Outcome = outcome.UpstreamRateLimited
	}
	return pe
}

// syncBuffer is a log sink safe for the breaker's concurrent logging.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// outage fails every call while down is set.
type outage struct{ down atomic.Bool }

func (o *outage) reply(int64, int64) error {
	if o.down.Load() {
		return status(500)
	}
	return nil
}

func breakerConfig(c *Counters, log *syncBuffer) Config {
	return Config{Retries: 4, BackoffBase: time.Millisecond, BreakerThreshold: 0.5, BreakerMinCalls: 4,
		BreakerWindow: time.Second, BreakerCooldown: 100 * time.Millisecond, Counters: c,
		Logger: slog.New(slog.NewTextHandler(log, nil))}
}

// The breaker opens on an outage; with a later stage (Escalates) every row
// that meets it open ends circuit_open at once (the engine sends it on),
// and the failing provider is spared the calls.
func TestBreakerOpensAndRowsEscalate(t *testing.T) {
	var o outage
	o.down.Store(true)
	prim := &stub{model: "primary", reply: o.reply}
	c := &Counters{}
	var log syncBuffer
	cfg := breakerConfig(c, &log)
	cfg.Escalates = true
	// Backoff long enough that no row spends its five calls before the
	// others' first failures (on a loaded machine) have opened the breaker.
	cfg.BackoffBase = 20 * time.Millisecond
	cls := Build(prim, cfg)
	// The first rows arrive together, as the engine sends them: each one's
	// first failure counts, so four of them open the breaker, and every
	// row's retry meets it open and ends circuit_open.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if _, _, err := classifyRow(cls, 5*time.Second); provider.OutcomeOf(err) != outcome.CircuitOpen && provider.OutcomeOf(err) != outcome.UpstreamFailed {
				t.Errorf("row %d: got %v; want circuit_open (or its last failure)", i, err)
			}
		})
	}
	wg.Wait()
	for i := range 32 {
		if _, _, err := classifyRow(cls, 5*time.Second); provider.OutcomeOf(err) != outcome.CircuitOpen {
			t.Fatalf("row %d: got %v; want circuit_open at once", i, err)
		}
	}
	// Four failures open it; each probe round (every 100ms at most) adds a
	// few more: far fewer than the 40 rows x 4 attempts without a breaker.
	if n := prim.calls.Load(); n > 12 {
		t.Fatalf("the failing provider got %d calls, want the breaker to stop them", n)
	}
	if s := c.Snapshot(time.Second); s.BreakerOpenings < 1 {
		t.Fatalf("counters %+v: want the breaker opened", s)
	}
	// Four failures are the least that open it; rows failing at the same
	// moment may land a fifth or more before it is judged or before the
	// line tallies the statuses: every one of them an HTTP 500.
	openLine := regexp.MustCompile(`breaker open: 100% of ([4-8]) calls failed in 1s \(most often HTTP 500 \(([4-8]) of ([4-8])\); a row's repeated failures count once\); probing again in 100ms`)
	if m := openLine.FindStringSubmatch(log.String()); m == nil || m[2] != m[3] {
		t.Fatalf("log lacks the open line:\n%s", log.String())
	}
	// Recovery: after the cooldown a probe goes through and closes it.
	o.down.Store(false)
	time.Sleep(150 * time.Millisecond)
	for range 3 {
		if ans, _, err := classifyRow(cls, 5*time.Second); err != nil {
			t.Fatalf("after recovery got %+v, %v; want the primary", ans, err)
		}
	}
	if !strings.Contains(log.String(), "breaker closed") {
		t.Fatalf("log lacks the close line:\n%s", log.String())
	}
	if c.Snapshot(time.Second).BreakerOpen <= 0 {
		t.Fatal("no time counted open")
	}
}

func TestWithoutFallbackRowsWaitForRecovery(t *testing.T) {
	var o outage
	o.down.Store(true)
	prim := &stub{model: "primary", reply: o.reply}
	c := &Counters{}
	var log syncBuffer
	cls := Build(prim, breakerConfig(c, &log))
	time.AfterFunc(600*time.Millisecond, func() { o.down.Store(false) })
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			if _, _, err := classifyRow(cls, 10*time.Second); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a row failed instead of waiting for recovery: %v", err)
	}
	if c.BreakerOpenings.Load() < 1 {
		t.Fatal("the breaker never opened")
	}
}

func TestOpenBreakerPastTheDeadlineIsCircuitOpenOrLastOutcome(t *testing.T) {
	prim := &stub{model: "primary", reply: func(int64, int64) error { return status(500) }}
	c := &Counters{}
	var log syncBuffer
	cfg := breakerConfig(c, &log)
	cfg.BreakerCooldown = time.Minute
	cfg.Retries = 0
	cls := Build(prim, cfg)
	for range 4 { // open it
		if _, _, err := classifyRow(cls, time.Second); provider.OutcomeOf(err) != outcome.UpstreamFailed {
			t.Fatalf("want upstream_failed while closed, got %v", err)
		}
	}
	_, attempts, err := classifyRow(cls, 100*time.Millisecond)
	if provider.OutcomeOf(err) != outcome.CircuitOpen || attempts != 0 {
		t.Fatalf("a fresh row at an open breaker: %v after %d attempts, want circuit_open after 0", err, attempts)
	}
	if n := prim.calls.Load(); n != 4 {
		t.Fatalf("the open breaker let %d calls through, want 4", n)
	}
}

func Test429sAndClientErrorsDoNotOpenTheBreaker(t *testing.T) {
	prim := &stub{model: "primary", reply: func(n int64, _ int64) error {
		if n%2 == 0 {
			return status(429)
		}
		return &provider.Error{Status: 400, Outcome: outcome.UpstreamRequestRejected, Msg: "rejected"}
	}}
	c := &Counters{}
	var log syncBuffer
	cfg := breakerConfig(c, &log)
	cfg.Retries = 0
	cls := Build(prim, cfg)
	for range 20 {
		_, _, err := classifyRow(cls, time.Second)
		if provider.OutcomeOf(err) == outcome.CircuitOpen {
			t.Fatal("429s and 400s opened the breaker")
		}
	}
	if c.BreakerOpenings.Load() != 0 {
		t.Fatal("breaker opened")
	}
}

func TestCooldownPausesEveryone(t *testing.T) {
	prim := &stub{model: "primary", reply: func(n int64, _ int64) error {
		if n == 1 {
			pe := status(429).(*provider.Error)
			pe.RetryAfter = 300 * time.Millisecond
			return pe
		}
		return nil
	}}
	cls := Build(prim, Config{Retries: 0})
	start := time.Now()
	if _, _, err := classifyRow(cls, time.Second); provider.OutcomeOf(err) != outcome.UpstreamRateLimited {
		t.Fatalf("want the 429, got %v", err)
	}
	// Another row, not the one that got the 429, must wait too.
	if _, _, err := classifyRow(cls, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	at := prim.arrivals()
	if gap := at[1].Sub(start); gap < 300*time.Millisecond {
		t.Fatalf("the next call went %s after a 429 with Retry-After 0.3s, want >= 300ms", gap)
	}
}

func TestAIMDSettlesNearCapacity(t *testing.T) {
	const capacity = 6
	prim := &stub{model: "primary", latency: 10 * time.Millisecond, reply: func(_ int64, inFlight int64) error {
		if inFlight > capacity {
			return status(429)
		}
		return nil
	}}
	c := &Counters{}
	cls := Build(prim, Config{Retries: 8, BackoffBase: 5 * time.Millisecond, Adaptive: true, Concurrency: 32, Counters: c})
	var wg sync.WaitGroup
	var failed atomic.Int64
	sem := make(chan struct{}, 32) // the engine's -c 32
	for range 400 {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, _, err := classifyRow(cls, 10*time.Second); err != nil {
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	s := c.Snapshot(time.Second)
	if failed.Load() != 0 {
		t.Fatalf("%d rows failed", failed.Load())
	}
	if share := float64(s.RateLimited) / float64(s.Calls); share >= 0.1 {
		t.Fatalf("429s were %.0f%% of %d calls, want under 10%%", 100*share, s.Calls)
	}
	if s.Limit < 2 || s.Limit > capacity+2 {
		t.Fatalf("final limit %d, want near the capacity %d", s.Limit, capacity)
	}
	if s.MaxInFlight > 2*capacity { // slow start may overshoot for one round trip
		t.Fatalf("max in flight %d, far above the capacity %d", s.MaxInFlight, capacity)
	}
}

func TestAIMDDecreasesOncePerRoundTrip(t *testing.T) {
	s := NewSlots(32, true, &Counters{})
	s.aimd.limit, s.aimd.slowStart = 20, false
	var ps []*Permit
	for range 10 {
		p, err := s.Acquire(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	for _, p := range ps { // ten 429s from calls sent together
		p.Release(status(429))
	}
	if s.aimd.limit != 20*aimdBeta {
		t.Fatalf("limit %g after one round of 429s, want one decrease to %g", s.aimd.limit, 20*aimdBeta)
	}
}

func TestRateLimitCountsEveryAttempt(t *testing.T) {
	prim := &stub{model: "primary", reply: func(n int64, _ int64) error {
		if n%2 == 1 {
			return status(503)
		}
		return nil
	}}
	cls := Build(prim, Config{Retries: 2, BackoffBase: time.Millisecond, RPS: 20, Burst: 1, BreakerMinCalls: 1000})
	for range 5 {
		if _, attempts, err := classifyRow(cls, 5*time.Second); err != nil || attempts != 2 {
			t.Fatalf("got %v after %d attempts, want success after 2", err, attempts)
		}
	}
	at := prim.arrivals()
	// Ten calls (five rows, each retried once) at 20/s: 9 gaps of 50ms.
	if span := at[len(at)-1].Sub(at[0]); len(at) != 10 || span < 400*time.Millisecond {
		t.Fatalf("%d calls over %s, want 10 paced at 20/s (>= 450ms)", len(at), span)
	}
}

func TestStopEndsTheWaitForAnOpenBreaker(t *testing.T) {
	prim := &stub{model: "primary", reply: func(int64, int64) error { return status(500) }}
	var log syncBuffer
	cfg := breakerConfig(&Counters{}, &log)
	cfg.BreakerCooldown, cfg.Retries = time.Minute, 0
	cls := Build(prim, cfg)
	for range 4 { // open it
		_, _, _ = classifyRow(cls, time.Second)
	}
	stop := make(chan struct{})
	time.AfterFunc(100*time.Millisecond, func() { close(stop) })
	start := time.Now()
	_, err := cls.Classify(context.Background(), &Row{Stop: stop}, []string{"x"})
	if !IsStopped(err) || time.Since(start) > 5*time.Second {
		t.Fatalf("got %v after %s, want the row ended unsent when sending stopped", err, time.Since(start))
	}
}
