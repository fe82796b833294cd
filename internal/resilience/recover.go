package resilience

import (
	"context"
	"errors"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/fallback"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// recoverer is the outermost layer: when a row meets an open breaker it is
// answered by the fallback model, or, without one, it waits for the breaker
// to let calls through again, for as long as the row's context allows.
type recoverer struct {
	inner    provider.Classifier
	br       *breaker
	counters *Counters
	fb       fallback.Fallback[provider.Answer] // nil without a fallback model
}

func newRecover(inner provider.Classifier, fb provider.Classifier, br *breaker, cfg Config) *recoverer {
	r := &recoverer{inner: inner, br: br, counters: cfg.Counters}
	if fb != nil {
		r.fb = fallback.NewBuilderWithFunc(func(exec failsafe.Execution[provider.Answer]) (provider.Answer, error) {
			ans, err := fb.Classify(exec.Context(), textsFrom(exec.Context()))
			if err != nil {
				return ans, err
			}
			ans.Fallback = true
			if ans.Model == "" {
				ans.Model = fb.Model()
			}
			cfg.Counters.FallbackRows.Add(1)
			return ans, nil
		}).HandleIf(func(_ provider.Answer, err error) bool { return isOpen(err) }).Build()
	}
	return r
}

func (r *recoverer) Model() string { return r.inner.Model() }

type textsKey struct{}

func textsFrom(ctx context.Context) []string {
	t, _ := ctx.Value(textsKey{}).([]string)
	return t
}

func (r *recoverer) Classify(ctx context.Context, texts []string) (provider.Answer, error) {
	row := &rowState{}
	ctx = withRow(ctx, row)
	for {
		var ans provider.Answer
		var err error
		if r.fb != nil {
			fctx := context.WithValue(ctx, textsKey{}, texts)
			ans, err = failsafe.With(r.fb).WithContext(fctx).Get(func() (provider.Answer, error) {
				return r.inner.Classify(fctx, texts)
			})
		} else {
			ans, err = r.inner.Classify(ctx, texts)
		}
		if err == nil || !isOpen(err) {
			return ans, r.lastOutcome(ctx, row, err)
		}
		// Open, no fallback: wait for the probe rather than fail the row.
		if r.wait(ctx) != nil {
			return ans, r.lastOutcome(ctx, row, errOpen())
		}
	}
}

// lastOutcome: a row whose deadline passes while it waits (backoff, cooldown,
// an open breaker) ends with its last real answer, if it had one.
func (r *recoverer) lastOutcome(ctx context.Context, row *rowState, err error) error {
	if err == nil {
		return nil
	}
	deadline := errors.Is(ctx.Err(), context.DeadlineExceeded)
	if (isOpen(err) || isCtxErr(err)) && deadline && row.last != nil {
		return row.last
	}
	if isOpen(err) {
		return &provider.Error{Outcome: outcome.CircuitOpen, Msg: "circuit breaker open: the provider is failing and there is no --fallback-model", Err: err}
	}
	return err
}

type waitLimitKey struct{}

// WithWaitLimit returns a context in which rows stop waiting for an open
// breaker at t (classify's --max-duration): the context a row runs in lives
// on after admission stops, but its wait should not.
func WithWaitLimit(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, waitLimitKey{}, t)
}

func (r *recoverer) wait(ctx context.Context) error {
	if t, ok := ctx.Value(waitLimitKey{}).(time.Time); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, t)
		defer cancel()
	}
	return r.br.wait(ctx)
}
