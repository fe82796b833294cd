package resilience

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/retrypolicy"

	"github.com/hfsent/hfsent/internal/provider"
)

// retry re-sends a row's call after a failure that may recover, with
// exponential backoff and full jitter, or after the wait the provider asked
// for (Retry-After, RateLimit, a loading model's estimated_time).
type retry struct {
	inner  provider.Classifier
	policy retrypolicy.RetryPolicy[provider.Answer]
}

func newRetry(inner provider.Classifier, cfg Config) *retry {
	c := cfg.Counters
	p := retrypolicy.NewBuilder[provider.Answer]().
		// Only provider errors that say so: never 4xx, 401/403, 402, a bad
		// payload, nor the context ending.
		HandleIf(func(_ provider.Answer, err error) bool {
			pe, ok := provider.AsError(err)
			return ok && pe.Retryable()
		}).
		// An open breaker is not retried into (errOpen is not retryable
		// anyway; this states the rule where it is enforced).
		AbortOnErrors(circuitbreaker.ErrOpen).
		WithMaxRetries(cfg.Retries).
		ReturnLastFailure().
		WithDelayFunc(func(exec failsafe.ExecutionAttempt[provider.Answer]) time.Duration {
			return retryDelay(exec.LastError(), exec.Attempts(), cfg)
		}).
		OnRetry(func(failsafe.ExecutionEvent[provider.Answer]) { c.Retries.Add(1) }).
		Build()
	return &retry{inner: inner, policy: p}
}

// retryDelay is the wait before retry number n (1 for the first): what the
// provider asked for, capped, else full-jitter exponential backoff.
func retryDelay(err error, n int, cfg Config) time.Duration {
	if pe, ok := provider.AsError(err); ok && pe.RetryAfter > 0 {
		return min(pe.RetryAfter, cfg.MaxRetryAfter)
	}
	ceil := cfg.BackoffBase
	for i := 1; i < n && ceil < cfg.BackoffMax; i++ {
		ceil *= 2
	}
	ceil = min(ceil, cfg.BackoffMax)
	return time.Duration(rand.Int64N(int64(ceil) + 1))
}

func (r *retry) Model() string { return r.inner.Model() }

func (r *retry) Classify(ctx context.Context, texts []string) (provider.Answer, error) {
	waitForModel := false
	return failsafe.With(r.policy).WithContext(ctx).GetWithExecution(func(exec failsafe.Execution[provider.Answer]) (provider.Answer, error) {
		actx := exec.Context()
		if pe, ok := provider.AsError(exec.LastError()); ok && pe.Loading {
			// Once the model said it is loading, every later attempt asks
			// the API to hold the request until it is ready.
			waitForModel = true
		}
		if waitForModel {
			actx = provider.WithWaitForModel(actx)
		}
		return r.inner.Classify(actx, texts)
	})
}
