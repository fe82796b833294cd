// Package resilience holds the provider policies, each a decorator around a
// provider.Classifier: retries with backoff, a shared cooldown after 429s, an
// adaptive (AIMD) concurrency limit, a rate limit, a circuit breaker, and
// the fallback (or the wait) while the breaker is open. Build assembles them
// in the one order that makes their promises hold:
//
//	recover (fallback, or wait for the breaker)        once per row
//	  retry (backoff + jitter, Retry-After, loading)  once per row
//	    cooldown (a 429's Retry-After pauses everyone) per attempt
//	      adaptive limit (AIMD on 429s and timeouts)   per attempt
//	        breaker (permit, failure rate)             per attempt
//	          rate limit (--rps, --burst)              per attempt
//	            meter (counters) -> client             per attempt
//
// The rate limiter sits inside the breaker so that an attempt the breaker
// refuses costs no token, and inside the retry so that every call sent counts;
// the fallback path goes through the same limiter, so fallback rows are paced
// like provider calls. The breaker is inside the retry so that a retry meets
// an open breaker and stops there (no retry is sent into an open breaker).
package resilience

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// Config sets the policies. Zero values take the defaults noted.
type Config struct {
	// Retries is the number of retries after a failure that may recover.
	Retries int
	// BackoffBase and BackoffMax bound the exponential backoff (full
	// jitter: a retry waits a random time in [0, min(max, base×2^n)]);
	// defaults 500ms and 30s.
	BackoffBase, BackoffMax time.Duration
	// MaxRetryAfter caps how long a Retry-After (or estimated_time) is
	// honoured; default 60s. The row deadline bounds everything anyway.
	MaxRetryAfter time.Duration

	// RPS limits calls per second (0: none); Burst allows that many at once.
	RPS   float64
	Burst int

	// Adaptive turns on the AIMD limit, between 1 and MaxConcurrency.
	Adaptive       bool
	MaxConcurrency int

	// The breaker opens when at least BreakerMinCalls calls in the last
	// BreakerWindow failed at a rate >= BreakerThreshold, stays open for
	// BreakerCooldown, then lets BreakerProbes calls through (default 3)
	// and closes when all but one of them (at least one) succeed.
	BreakerThreshold float64
	BreakerWindow    time.Duration
	BreakerMinCalls  int
	BreakerCooldown  time.Duration
	BreakerProbes    int

	// Fallback answers rows while the breaker is open; nil means rows wait.
	Fallback provider.Classifier

	Logger   *slog.Logger
	Counters *Counters
}

func (c *Config) defaults() {
	if c.BackoffBase <= 0 {
		c.BackoffBase = 500 * time.Millisecond
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = 30 * time.Second
	}
	if c.MaxRetryAfter <= 0 {
		c.MaxRetryAfter = 60 * time.Second
	}
	if c.Burst < 1 {
		c.Burst = 1
	}
	if c.MaxConcurrency < 1 {
		c.MaxConcurrency = 8
	}
	if c.BreakerThreshold <= 0 || c.BreakerThreshold > 1 {
		c.BreakerThreshold = 0.3
	}
	if c.BreakerWindow <= 0 {
		c.BreakerWindow = 60 * time.Second
	}
	if c.BreakerMinCalls < 1 {
		c.BreakerMinCalls = 20
	}
	if c.BreakerCooldown <= 0 {
		c.BreakerCooldown = 60 * time.Second
	}
	if c.BreakerProbes < 1 {
		c.BreakerProbes = 3
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Counters == nil {
		c.Counters = &Counters{}
	}
}

// Build wraps client in the policies of cfg.
func Build(client provider.Classifier, cfg Config) provider.Classifier {
	cfg.defaults()
	var chain provider.Classifier = &meter{inner: client, c: cfg.Counters}
	var limiter *rateLayer
	if cfg.RPS > 0 {
		limiter = newRateLayer(cfg.RPS, cfg.Burst)
		chain = limiter.wrap(chain)
	}
	br := newBreaker(chain, cfg)
	chain = br
	if cfg.Adaptive {
		chain = newAIMD(chain, cfg.MaxConcurrency, cfg.Counters)
	}
	chain = newCooldown(chain, cfg)
	chain = newRetry(chain, cfg)
	var fb provider.Classifier
	if cfg.Fallback != nil {
		fb = cfg.Fallback
		if limiter != nil {
			fb = limiter.wrap(fb)
		}
	}
	return newRecover(chain, fb, br, cfg)
}

// errOpen is what an attempt gets when the breaker refuses it. It is a
// provider error (circuit_open), so that if it escapes the row is recorded
// right, and it unwraps to circuitbreaker.ErrOpen for the retry to abort on.
func errOpen() error {
	return &provider.Error{Outcome: outcome.CircuitOpen, Msg: "circuit breaker open", Err: circuitbreaker.ErrOpen}
}

func isOpen(err error) bool { return errors.Is(err, circuitbreaker.ErrOpen) }

// isCtxErr reports whether err is the context ending rather than a provider
// answer.
func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// sleep waits d or until ctx ends; it reports whether the wait was complete.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// rowState carries what the outer layers need to know about a row's calls.
type rowState struct {
	last error // the last real provider error, for "ends with its last outcome"
}

type rowKey struct{}

func withRow(ctx context.Context, s *rowState) context.Context {
	return context.WithValue(ctx, rowKey{}, s)
}

func rowFrom(ctx context.Context) *rowState {
	s, _ := ctx.Value(rowKey{}).(*rowState)
	return s
}

// meter counts every call sent to the primary provider, and remembers the
// row's last real answer.
type meter struct {
	inner provider.Classifier
	c     *Counters
}

func (m *meter) Model() string { return m.inner.Model() }

func (m *meter) Classify(ctx context.Context, texts []string) (provider.Answer, error) {
	m.c.Calls.Add(1)
	m.c.callStarted()
	ans, err := m.inner.Classify(ctx, texts)
	m.c.callEnded()
	if pe, ok := provider.AsError(err); ok {
		switch pe.Outcome {
		case outcome.UpstreamRateLimited:
			m.c.RateLimited.Add(1)
		case outcome.UpstreamTimeout:
			m.c.Timeouts.Add(1)
		}
		if s := rowFrom(ctx); s != nil {
			s.last = err
		}
	}
	return ans, err
}
