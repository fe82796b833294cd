package resilience

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// breaker is failsafe-go's circuit breaker used by hand (TryAcquirePermit,
// RecordSuccess/RecordFailure) rather than through an executor, so that it
// decides exactly what counts: it judges the provider, not a text.
//
//   - A row's repeated failures count once: the first failure of a row that
//     counts (5xx, timeout, connection) is recorded; its retries' failures
//     are not. A few poison texts failing five times each then weigh as a
//     few failures, not as an outage, while a real outage, where every row
//     fails, opens it as fast as ever.
//   - Probes are sent by rows that have not failed yet, while there are
//     such rows waiting: a poison text probing would keep it open for ever.
type breaker struct {
	inner    attempter
	cb       circuitbreaker.CircuitBreaker[any]
	log      *slog.Logger
	counters *Counters
	slots    *Slots
	cfg      Config
	// run is told when the probes fail while nothing has succeeded since
	// the start (not with Escalates: a later stage answers the rows).
	run *runState

	// fresh counts rows that have not failed and are waiting for the
	// breaker, from the start of their wait until the breaker next decides
	// on them: while there are some, rows that have failed leave the
	// probes to them.
	fresh atomic.Int32
	// extUntil (unix nanos) refuses calls as if open: another process
	// sharing the provider saw it fail (OpenUntil).
	extUntil atomic.Int64

	mu      sync.Mutex
	changed chan struct{}  // closed and replaced on every state change
	causes  map[string]int // of the failures recorded since the last change
}

func newBreaker(inner attempter, cfg Config, slots *Slots, run *runState) *breaker {
	b := &breaker{inner: inner, log: cfg.Logger, counters: cfg.Counters, slots: slots, cfg: cfg, run: run,
		changed: make(chan struct{}), causes: map[string]int{}}
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

func (b *breaker) closed() bool { return b.cb.IsClosed() && b.external() == 0 }

// external is how long calls are still refused on another process's word.
func (b *breaker) external() time.Duration {
	until := b.extUntil.Load()
	if until == 0 {
		return 0
	}
	return max(0, time.Duration(until-time.Now().UnixNano()))
}

func (b *breaker) openUntil(t time.Time) { RaiseUntil(&b.extUntil, t) }

// RaiseUntil moves until (unix nanoseconds) to t, unless it is already
// later: a pause's or an open breaker's end, told by several goroutines
// (the OnPause and OnOpen hooks, another process's word), only grows.
func RaiseUntil(until *atomic.Int64, t time.Time) {
	n := t.UnixNano()
	for {
		cur := until.Load()
		if cur >= n || until.CompareAndSwap(cur, n) {
			return
		}
	}
}

func (b *breaker) attempt(ctx context.Context, row *Row, c provider.Call) (provider.Answer, error) {
	b.decided(&row.rowState)
	if b.external() > 0 {
		return provider.Answer{}, errOpen()
	}
	// Not closed: open with its cooldown perhaps over, the next permit
	// being the first probe, or already half-open.
	if row.failed && !b.cb.IsClosed() && b.fresh.Load() > 0 {
		return provider.Answer{}, errOpen()
	}
	if !b.cb.TryAcquirePermit() {
		return provider.Answer{}, errOpen()
	}
	probe := b.cb.IsHalfOpen()
	if probe && !b.run.succeeded.Load() {
		// Nothing has answered yet: the endpoint may be scaled to zero, so
		// a probe asks its proxy to hold it until a replica is up.
		c.ScaleUp = true
	}
	ans, err := b.inner.attempt(ctx, row, c)
	switch {
	case err == nil:
		b.cb.RecordSuccess()
	case isFailure(err):
		first := !row.counted
		row.failed, row.counted = true, true
		// A probe's verdict always counts, or the breaker would stay
		// half-open for good.
		if probe || first {
			b.noteCause(err)
			b.cb.RecordFailure()
		}
	case isCtxErr(err):
		// The row ended, not the provider. A probe must still hand its
		// permit back, as a failure: a probe that got no answer proved
		// nothing.
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

// decided takes a fresh row that waited out of the count once the breaker
// decides on it again (or it gives up).
func (b *breaker) decided(row *rowState) {
	if row.freshWait {
		row.freshWait = false
		b.fresh.Add(-1)
	}
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
		return !pe.Loading && (pe.Status == 0 || pe.Status >= 500 || pe.Status == 424)
	}
	return false
}

func (b *breaker) noteCause(err error) {
	pe, _ := provider.AsError(err)
	b.mu.Lock()
	b.causes[pe.Cause()]++
	b.mu.Unlock()
}

// wait blocks until the breaker may let a call through (its cooldown is
// over, or it changed state), ctx ends or stop is closed.
func (b *breaker) wait(ctx context.Context, row *rowState, stop <-chan struct{}) error {
	b.mu.Lock()
	ch := b.changed
	b.mu.Unlock()
	ext := b.external()
	if b.cb.IsClosed() && ext == 0 {
		return nil
	}
	if !row.failed && !row.freshWait {
		row.freshWait = true
		b.fresh.Add(1)
	}
	row.wait(waitBreaker)
	d := max(b.cb.RemainingDelay(), ext)
	if b.cb.IsClosed() {
		d = ext
	}
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
	case <-stop:
		return errStopped
	}
	return nil
}

func (b *breaker) stateChanged(ev circuitbreaker.StateChangedEvent) {
	now := time.Now()
	b.mu.Lock()
	cause := mostCommon(b.causes)
	clear(b.causes)
	b.mu.Unlock()
	// The numbers come from the breaker's own locked accessors, not from
	// ev.Metrics(): failsafe-go calls listeners unlocked, and the event's
	// metrics are the live stats other calls are still recording into.
	switch ev.NewState {
	case circuitbreaker.OpenState:
		if ev.OldState == circuitbreaker.ClosedState {
			b.slots.outageStarted()
		}
		b.counters.breakerOpened(now)
		if b.cfg.OnOpen != nil {
			b.cfg.OnOpen(now.Add(b.cfg.BreakerCooldown))
		}
		m := b.cb.Metrics()
		failures, calls := m.Failures(), m.Executions()
		if ev.OldState == circuitbreaker.HalfOpenState {
			b.log.Warn(fmt.Sprintf("breaker open again: %d of %d probe calls failed (%s); probing again in %s",
				failures, calls, cause, b.cfg.BreakerCooldown))
			if !b.cfg.Escalates {
				// Nothing has succeeded for a whole window since the start,
				// and the probes failed too: down, not having a bad day.
				// (With a later stage the rows are answered meanwhile.)
				b.run.markDown(cause, b.cfg.BreakerWindow)
			}
		} else {
			b.log.Warn(fmt.Sprintf("breaker open: %.0f%% of %d calls failed in %s (%s; a row's repeated failures count once); probing again in %s",
				100*m.FailureRate(), calls, b.cfg.BreakerWindow, cause, b.cfg.BreakerCooldown))
		}
	case circuitbreaker.HalfOpenState:
		b.log.Info(fmt.Sprintf("breaker half-open: sending up to %d probe calls", b.cfg.BreakerProbes))
	case circuitbreaker.ClosedState:
		b.counters.breakerClosed(now)
		b.slots.outageEnded()
		b.log.Info("breaker closed: the probe calls succeeded; calls resume")
	}
	b.mu.Lock()
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

// mostCommon names the most frequent causes, e.g. "most often HTTP 503
// (12 of 15)".
func mostCommon(causes map[string]int) string {
	total := 0
	type kv struct {
		k string
		n int
	}
	var all []kv
	for k, n := range causes {
		all = append(all, kv{k, n})
		total += n
	}
	if total == 0 {
		return "no cause recorded"
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n || (all[i].n == all[j].n && all[i].k < all[j].k) })
	return fmt.Sprintf("most often %s (%d of %d)", all[0].k, all[0].n, total)
}
