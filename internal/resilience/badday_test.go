package resilience

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// These tests hold the rules that keep a bad day (poison texts, random
// failures, an outage, all at once) from costing more than its own share.

// textStub answers by text: reply decides the error for each call.
type textStub struct {
	model    string
	reply    func(text string) error
	calls    atomic.Int64
	inFlight atomic.Int64
	maxIn    atomic.Int64
}

func (s *textStub) Model() string { return s.model }

func (s *textStub) Classify(ctx context.Context, call provider.Call) (provider.Answer, error) {
	texts := call.Texts
	s.calls.Add(1)
	cur := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for m := s.maxIn.Load(); cur > m && !s.maxIn.CompareAndSwap(m, cur); m = s.maxIn.Load() {
	}
	if !sleep(ctx, nil, time.Millisecond) {
		return provider.Answer{}, ctx.Err()
	}
	if s.reply != nil {
		if err := s.reply(texts[0]); err != nil {
			return provider.Answer{}, err
		}
	}
	return provider.Answer{Predictions: []provider.Prediction{{Label: "POSITIVE", Score: 0.9}}, Model: s.model}, nil
}

func classifyText(cls *Guard, text string, deadline time.Duration) (provider.Answer, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	row := &Row{}
	ans, err := cls.Classify(ctx, row, []string{text})
	return ans, row.Attempts(), err
}

// A few poison texts, each failing every one of its five attempts, must not
// open the breaker: a row's repeated failures count once. Counted per
// attempt, the first poison row alone (five failures among eleven calls)
// would open it.
func TestPoisonRowsDoNotOpenTheBreaker(t *testing.T) {
	prim := &textStub{reply: func(text string) error {
		if strings.HasPrefix(text, "poison") {
			return status(500)
		}
		return nil
	}}
	c := &Counters{}
	cls := Build(prim, Config{Retries: 4, BackoffBase: time.Millisecond, BreakerThreshold: 0.2,
		BreakerMinCalls: 10, BreakerWindow: time.Minute, BreakerCooldown: time.Minute, Counters: c})
	for i := range 60 {
		text := "good"
		if i%15 == 10 {
			text = "poison"
		}
		_, attempts, err := classifyText(cls, text, 5*time.Second)
		switch {
		case text == "good" && err != nil:
			t.Fatalf("row %d: %v; the poison rows opened the breaker", i, err)
		case text == "poison" && (provider.OutcomeOf(err) != outcome.UpstreamFailed || attempts != 5):
			t.Fatalf("poison row %d: %v after %d attempts, want upstream_failed after 5", i, err, attempts)
		}
	}
	if n := c.BreakerOpenings.Load(); n != 0 {
		t.Fatalf("the breaker opened %d times for 4 poison rows among 60", n)
	}
}

// A real outage, where every row fails, still opens it: on the first
// failure of as few rows as --breaker-min-calls.
func TestOutageStillOpensTheBreaker(t *testing.T) {
	prim := &textStub{reply: func(string) error { return status(503) }}
	c := &Counters{}
	cls := Build(prim, Config{Retries: 4, BackoffBase: 50 * time.Millisecond, BreakerThreshold: 0.5,
		BreakerMinCalls: 8, BreakerWindow: time.Minute, BreakerCooldown: time.Minute, Counters: c})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { _, _, _ = classifyText(cls, "x", 300*time.Millisecond) })
	}
	wg.Wait()
	if c.BreakerOpenings.Load() != 1 {
		t.Fatal("eight rows all failing did not open the breaker")
	}
	// Each row was sent once: their retries met the open breaker.
	if n := prim.calls.Load(); n != 8 {
		t.Fatalf("%d calls, want 8: a retry went into the open breaker", n)
	}
}

// While rows that have not failed wait for the breaker, they probe it, not
// a poison row that would fail the probe and keep the breaker open.
func TestProbesAreSentByRowsThatHaveNotFailed(t *testing.T) {
	var down atomic.Bool
	down.Store(true)
	prim := &textStub{reply: func(text string) error {
		if strings.HasPrefix(text, "poison") || down.Load() {
			return status(500)
		}
		return nil
	}}
	var log syncBuffer
	c := &Counters{}
	cls := Build(prim, Config{Retries: 8, BackoffBase: time.Millisecond, BreakerThreshold: 0.5,
		BreakerMinCalls: 4, BreakerWindow: time.Minute, BreakerCooldown: 60 * time.Millisecond,
		BreakerProbes: 1, Concurrency: 32, Counters: c, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	var wg sync.WaitGroup
	// The poison rows fail first and open the breaker; fresh rows arrive
	// and wait for it.
	for i := range 6 {
		wg.Go(func() { _, _, _ = classifyText(cls, "poison "+string(rune('a'+i)), 20*time.Second) })
	}
	for c.BreakerOpenings.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	errs := make(chan error, 6)
	for range 6 {
		wg.Go(func() {
			if _, _, err := classifyText(cls, "fresh", 20*time.Second); err != nil {
				errs <- err
			}
		})
	}
	time.Sleep(20 * time.Millisecond)
	down.Store(false)
	before := strings.Count(log.String(), "breaker open again")
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a fresh row failed: %v", err)
	}
	// After the provider came back, the first probe went to a fresh row and
	// closed the breaker; a poison row probing would have opened it again.
	if again := strings.Count(log.String(), "breaker open again") - before; again > 0 {
		t.Fatalf("the breaker opened again %d times after the provider recovered: poison rows probed\n%s", again, log.String())
	}
}

// One view of an outage, with a later stage (Escalates): a row whose last
// call failed as the breaker opened, and a row that met it open, both end
// at once, for the engine to send on; none waits for the breaker's
// cooldown (a minute here).
func TestFinalFailureInAnOutageEscalatesAtOnce(t *testing.T) {
	prim := &textStub{model: "primary", reply: func(string) error { return status(500) }}
	cls := Build(prim, Config{Retries: 0, BreakerThreshold: 0.5, BreakerMinCalls: 4,
		BreakerWindow: time.Minute, BreakerCooldown: time.Minute, Concurrency: 8, Escalates: true})
	var wg sync.WaitGroup
	var open, failed atomic.Int64
	start := time.Now()
	for range 8 {
		wg.Go(func() {
			_, _, err := classifyText(cls, "x", 30*time.Second)
			switch provider.OutcomeOf(err) {
			case outcome.CircuitOpen:
				open.Add(1)
			case outcome.UpstreamFailed:
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	if open.Load()+failed.Load() != 8 || time.Since(start) > 20*time.Second {
		t.Fatalf("%d circuit_open and %d upstream_failed of 8 in %s; want every row back at once with its failure", open.Load(), failed.Load(), time.Since(start))
	}
	if !cls.HasFallback() {
		t.Fatal("HasFallback is false with Escalates")
	}
	// Without Escalates the same row waits for the breaker (here, until
	// its deadline).
	wait := Build(prim, Config{Retries: 0, BreakerThreshold: 0.5, BreakerMinCalls: 1,
		BreakerWindow: time.Minute, BreakerCooldown: time.Minute})
	_, _, _ = classifyText(wait, "x", time.Second) // opens it
	start = time.Now()
	if _, _, err := classifyText(wait, "y", 300*time.Millisecond); time.Since(start) < 250*time.Millisecond || provider.OutcomeOf(err) != outcome.CircuitOpen {
		t.Fatalf("without Escalates: %v after %s; want circuit_open at its deadline", err, time.Since(start))
	}
}

// --retries N caps a row's calls at N+1, whatever it waits for between
// them: a wait for the breaker does not start a fresh budget.
func TestRetriesCapCallsAcrossBreakerWaits(t *testing.T) {
	prim := &textStub{reply: func(string) error { return status(500) }}
	cls := Build(prim, Config{Retries: 1, BackoffBase: time.Millisecond, BreakerThreshold: 0.5,
		BreakerMinCalls: 2, BreakerWindow: time.Minute, BreakerCooldown: 10 * time.Millisecond, Concurrency: 8})
	var wg sync.WaitGroup
	var most atomic.Int64
	for range 20 {
		wg.Go(func() {
			_, attempts, _ := classifyText(cls, "x", 500*time.Millisecond)
			for m := most.Load(); int64(attempts) > m && !most.CompareAndSwap(m, int64(attempts)); m = most.Load() {
			}
		})
	}
	wg.Wait()
	if most.Load() > 2 {
		t.Fatalf("a row was sent %d times with --retries 1", most.Load())
	}
}

// Timeouts cut the adaptive limit only when they are widespread among
// recent calls: one slow text timing out, again and again, among calls that
// succeed is not overload.
func TestOneSlowTextDoesNotCutTheAdaptiveLimit(t *testing.T) {
	s := NewSlots(16, true, &Counters{})
	s.aimd.limit, s.aimd.slowStart = 16, false
	timeout := &provider.Error{Outcome: outcome.UpstreamTimeout, Msg: "no answer"}
	for round := range 20 {
		var ps []*Permit
		for range s.Limit() {
			p, err := s.Acquire(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		for i, p := range ps {
			if i == 0 {
				p.again = round > 0 // the same text, timing out again
				p.Release(timeout)
				continue
			}
			p.Release(nil)
		}
	}
	if l := s.Limit(); l < 15 {
		t.Fatalf("limit %d after one slow text timed out 20 times among 300 successes, want it near 16", l)
	}
	// When most calls time out, it is overload: the limit comes down.
	for range 3 {
		fullRound(s, timeout)
	}
	if l := s.Limit(); l > 8 {
		t.Fatalf("limit %d after three rounds of timeouts only, want it cut", l)
	}
}

// fullRound sends as many calls as the limit allows, all ending with err.
func fullRound(s *Slots, err error) {
	var ps []*Permit
	for range s.Limit() {
		p, _ := s.Acquire(context.Background(), nil)
		ps = append(ps, p)
	}
	for _, p := range ps {
		p.Release(err)
	}
}

// After an outage the adaptive limit returns to where it was: the cuts of
// the outage say nothing of the provider's capacity once it is back.
func TestAdaptiveLimitReturnsWhenTheBreakerCloses(t *testing.T) {
	s := NewSlots(20, true, &Counters{})
	s.aimd.limit, s.aimd.slowStart = 20, false
	s.outageStarted()
	timeout := &provider.Error{Outcome: outcome.UpstreamTimeout, Msg: "no answer"}
	for range 5 {
		fullRound(s, timeout)
	}
	if l := s.Limit(); l > 5 {
		t.Fatalf("limit %d during the outage, want it cut", l)
	}
	s.outageEnded()
	if l := s.Limit(); l != 20 {
		t.Fatalf("limit %d after the breaker closed, want the 20 it had before the outage", l)
	}
}

// A slot is held for one attempt: a row backing off before its retry
// holds none, so -c bounds calls in flight and other rows go on.
func TestARowInBackoffHoldsNoSlot(t *testing.T) {
	prim := &textStub{reply: func(text string) error {
		if text == "poison" {
			return status(503)
		}
		return nil
	}}
	cls := Build(prim, Config{Retries: 4, BackoffBase: 200 * time.Millisecond, Concurrency: 1, BreakerMinCalls: 1000})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _, _ = classifyText(cls, "poison", 20*time.Second)
	}()
	for prim.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	// While the poison row backs off (at least 100ms, then 200ms, 400ms,
	// 800ms), the one slot serves other rows.
	start := time.Now()
	for range 10 {
		if _, _, err := classifyText(cls, "good", 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-done:
		t.Fatal("the poison row finished before the good rows: nothing was tested")
	default:
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Fatalf("ten good rows took %s at -c 1 while a row backed off: it held the slot", d)
	}
	if m := prim.maxIn.Load(); m > 1 {
		t.Fatalf("%d calls in flight at -c 1", m)
	}
	<-done
}
