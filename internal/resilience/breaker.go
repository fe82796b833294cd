package resilience

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// breaker is failsafe-go's circuit breaker used by hand (TryAcquirePermit,
// RecordSuccess/RecordFailure) rather than through an executor, so that it
// decides exactly what is a failure and never leaks a half-open permit when
// a row is cancelled mid-call.
type breaker struct {
	inner    provider.Classifier
	cb       circuitbreaker.CircuitBreaker[any]
	log      *slog.Logger
	counters *Counters
	cfg      Config

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every state change
}

func newBreaker(inner provider.Classifier, cfg Config) *breaker {
	b := &breaker{inner: inner, log: cfg.Logger, counters: cfg.Counters, cfg: cfg, changed: make(chan struct{})}
	probes := uint(cfg.BreakerProbes)
	need := max(1, probes-1)
	b.cb = circuitbreaker.NewBuilder[any]().
		WithFailureRateThreshold(cfg.BreakerThreshold, uint(cfg.BreakerMinCalls), cfg.BreakerWindow).
		WithDelay(cfg.BreakerCooldown).
		WithSuccessThresholdRatio(need, probes).
		OnStateChanged(b.stateChanged).
		Build()
	return b
}

func (b *breaker) Model() string { return b.inner.Model() }

func (b *breaker) Classify(ctx context.Context, texts []string) (provider.Answer, error) {
	if !b.cb.TryAcquirePermit() {
		return provider.Answer{}, errOpen()
	}
	probe := b.cb.IsHalfOpen()
	ans, err := b.inner.Classify(ctx, texts)
	switch {
	case err == nil:
		b.cb.RecordSuccess()
	case isFailure(err):
		b.cb.RecordFailure()
	case isCtxErr(err):
		// The row ended, not the provider. A probe must still hand its
		// permit back, or the breaker would stay half-open for good; as a
		// failure, because a probe that got no answer proved nothing.
		if probe {
			b.cb.RecordFailure()
		}
	default:
		// 429, other 4xx, a malformed 200: the provider is up and
		// answering. These never open the breaker.
		b.cb.RecordSuccess()
	}
	return ans, err
}

// isFailure is what counts toward opening the breaker: 5xx, timeouts and
// connection errors. A 503 "model is loading" is a warm-up with an estimated
// time, not an outage, so it does not count.
func isFailure(err error) bool {
	pe, ok := provider.AsError(err)
	if !ok {
		return false
	}
	switch pe.Outcome {
	case outcome.UpstreamTimeout:
		return true
	case outcome.UpstreamFailed:
		return !pe.Loading && (pe.Status == 0 || pe.Status >= 500)
	}
	return false
}

// wait blocks until the breaker may let a call through (its cooldown is
// over, or it changed state), or ctx ends.
func (b *breaker) wait(ctx context.Context) error {
	b.mu.Lock()
	ch := b.changed
	b.mu.Unlock()
	if b.cb.IsClosed() {
		return nil
	}
	d := b.cb.RemainingDelay()
	if d <= 0 {
		// Half-open with every probe permit taken: wait for the verdict,
		// re-checking now and then in case it never comes.
		d = min(b.cfg.BreakerCooldown, time.Second)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

func (b *breaker) stateChanged(ev circuitbreaker.StateChangedEvent) {
	now := time.Now()
	// The numbers come from the breaker's own locked accessors, not from
	// ev.Metrics(): failsafe-go calls listeners unlocked, and the event's
	// metrics are the live stats other calls are still recording into.
	switch ev.NewState {
	case circuitbreaker.OpenState:
		b.counters.breakerOpened(now)
		m := b.cb.Metrics()
		failures, calls := m.Failures(), m.Executions()
		if ev.OldState == circuitbreaker.HalfOpenState {
			b.log.Warn(fmt.Sprintf("breaker open again: %d of %d probe calls failed; probing again in %s",
				failures, calls, b.cfg.BreakerCooldown))
		} else {
			b.log.Warn(fmt.Sprintf("breaker open: %.0f%% of %d calls failed in %s; probing again in %s",
				100*m.FailureRate(), calls, b.cfg.BreakerWindow, b.cfg.BreakerCooldown))
		}
	case circuitbreaker.HalfOpenState:
		b.log.Info(fmt.Sprintf("breaker half-open: sending up to %d probe calls", b.cfg.BreakerProbes))
	case circuitbreaker.ClosedState:
		b.counters.breakerClosed(now)
		b.log.Info("breaker closed: the probe calls succeeded; calls resume")
	}
	b.mu.Lock()
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}
