package resilience

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// Classify runs one row (or one batch of texts) through the policies: it
// sends it, retries what may recover, and while the breaker is open waits
// for it (or, when a later stage answers such rows, Config.Escalates, ends
// circuit_open at once), all within ctx's deadline. r says what the caller
// asks of the row, and records its attempts.
//
// The retry loop is written here rather than with failsafe-go's retry
// policy because its budget must span the waits for the breaker: a row is
// sent at most Retries+1 times in all, and a failsafe execution starts a
// fresh count each time it is run.
func (g *Guard) Classify(ctx context.Context, r *Row, texts []string) (provider.Answer, error) {
	defer g.decided(r) // a row that gives up while waiting
	if r.WaitForModel {
		r.waitForModel, r.waitFromStart = true, true
	}
	for {
		ans, err := g.inner.attempt(ctx, r, r.call(texts))
		if err == nil {
			return ans, nil
		}
		if isOpen(err) {
			// Refused by the breaker: nothing was sent.
			if r.lapsed() {
				return provider.Answer{}, errLapsed
			}
			if r.FailFast || g.cfg.Escalates {
				return provider.Answer{}, g.openError()
			}
			if werr := g.br.wait(ctx, &r.rowState, r.Stop); werr != nil {
				return provider.Answer{}, g.end(ctx, &r.rowState, werr)
			}
			continue
		}
		if IsLapsed(err) {
			// Not sent, and never to be by this process: another may
			// hold the row now.
			return provider.Answer{}, err
		}
		if IsStopped(err) || isCtxErr(err) {
			return provider.Answer{}, g.end(ctx, &r.rowState, err)
		}
		pe, ok := provider.AsError(err)
		if !ok || !pe.Retryable() || pe.Unreachable {
			return provider.Answer{}, err
		}
		if pe.Outcome.Retry() == outcome.RetryOnce {
			if r.sent > 1 {
				// Asked again once already (a chat answer naming no label).
				return provider.Answer{}, err
			}
			// The second call quotes the first answer back, saying it named
			// no label: not the same bytes again.
			answer := pe.Answer
			r.unlabelled = &answer
		}
		if g.cfg.WarmUpOnly && !pe.Loading && (!pe.Cold || r.coldRetried) {
			// Not warming up (or a replica still not up to a call its
			// proxy was asked to hold): this is the row's answer.
			return provider.Answer{}, err
		}
		if pe.Cold {
			// The endpoint may be starting a replica: the next calls ask
			// its proxy to hold them until one is up (and may take that
			// long).
			r.scaleUp = true
			r.coldRetried = r.coldRetried || !pe.Loading
		}
		outage := isFailure(err) && !g.closed()
		limited := g.byTime(pe, &r.rowState)
		if !limited {
			r.lastLimit = 0
		}
		if limited && g.limitWaited(&r.rowState) || !limited && r.sent-r.limited > g.cfg.Retries {
			// No call left to send: with Config.Escalates, a later stage
			// answers it, as it answers a row that met the open breaker.
			return provider.Answer{}, err
		}
		if outage {
			continue // the next attempt meets the open breaker and waits there
		}
		d := g.retryDelay(pe, &r.rowState)
		if limited {
			d = g.limitDelay(d, &r.rowState)
		}
		if !fitsDeadline(ctx, d) {
			// A wait that ends past the row's deadline is not waited
			// (a server does not hold its caller through it either): the
			// answer, and its Retry-After, are known now.
			return provider.Answer{}, err
		}
		r.wait(waitBackoff)
		if g.cfg.OnRetry != nil {
			g.cfg.OnRetry(pe, d)
		}
		if !sleep(ctx, r.Stop, d) {
			return provider.Answer{}, g.end(ctx, &r.rowState, stopOrCtx(ctx, r.Stop))
		}
	}
}

// retryDelay is the wait before the row's next call: what the provider
// asked for (Retry-After, or the RateLimit header's reset), capped; about a
// second for a loading model (the next call asks the API to hold it until
// the model is up, as huggingface_hub does), or its estimate when the call
// had asked that from the start (Row.WaitForModel); else exponential backoff with
// jitter, counted from when the failed call was sent, so a call that took
// long to fail is not made to wait twice. A 429 that says nothing of when
// backs off from RateLimitBackoff, four times the base: a quota frees up
// more slowly than a server recovers from a 5xx.
func (g *Guard) retryDelay(pe *provider.Error, row *rowState) time.Duration {
	if pe.Loading {
		row.waitForModel = true
		row.attemptTimeout = max(g.cfg.Timeout, min(pe.RetryAfter, g.cfg.MaxRetryAfter)+30*time.Second)
		if row.waitFromStart {
			// The call asked to be held and was not: the API does not hold
			// calls there (a dedicated endpoint scaling from zero), so its
			// estimate is waited.
			if pe.RetryAfter <= 0 {
				return time.Second
			}
			return min(pe.RetryAfter, g.cfg.MaxRetryAfter)
		}
		return time.Second
	}
	if pe.RetryAfter > 0 {
		return min(pe.RetryAfter, g.cfg.MaxRetryAfter)
	}
	base := g.cfg.BackoffBase
	if pe.Outcome == outcome.UpstreamRateLimited {
		base *= rateLimitBackoff
	}
	return Backoff(row.sent, base, g.cfg.BackoffMax) - time.Since(row.sentAt)
}

// byTime reports whether the row's retry after pe is bounded by time
// (Config.RateLimitWait), and counts the refusal; a refusal of such a row
// is counted outside Retries.
func (g *Guard) byTime(pe *provider.Error, row *rowState) bool {
	if g.cfg.RateLimitWait <= 0 || g.cfg.Retries == 0 || pe.Outcome != outcome.UpstreamRateLimited {
		return false
	}
	row.limited++
	if row.limitedSince.IsZero() {
		row.limitedSince = time.Now()
	}
	return true
}

// limitWaited reports whether a row refused for rate limits has waited for
// them as long as it may.
func (g *Guard) limitWaited(row *rowState) bool {
	return time.Since(row.limitedSince) >= g.cfg.RateLimitWait
}

// limitDelay is the wait before a row's next call after a rate limit:
// what the provider asked for (d), and at least twice the row's last wait
// after a refusal in a row, up to BackoffMax; never past RateLimitWait.
func (g *Guard) limitDelay(d time.Duration, row *rowState) time.Duration {
	if row.lastLimit > 0 {
		d = max(d, min(2*row.lastLimit, g.cfg.BackoffMax))
	}
	row.lastLimit = max(d, time.Millisecond)
	left := g.cfg.RateLimitWait - time.Since(row.limitedSince)
	return max(0, min(d, left))
}

// rateLimitBackoff is how many times longer a 429 with no Retry-After
// backs off than a 5xx: from 1 s (0.5 to 1 s, then 1 to 2 s ...) at the
// default base.
const rateLimitBackoff = 4

// Backoff is the wait before retry n (1 for the first): a random time
// between half and all of min(max, base×2^(n-1)). The half that is fixed
// spaces a row's calls, so that in an outage the breaker opens (on the first
// failures of many rows) before any row has spent its retries; the random
// half spreads the rows out.
func Backoff(n int, base, maxWait time.Duration) time.Duration {
	ceil := base
	for i := 1; i < n && ceil < maxWait; i++ {
		ceil *= 2
	}
	ceil = min(ceil, maxWait)
	return ceil/2 + time.Duration(rand.Int64N(int64(ceil/2)+1))
}

func (g *Guard) openError() error {
	_, d := g.BreakerOpen()
	return &provider.Error{Outcome: outcome.CircuitOpen, RetryAfter: d,
		Msg: "circuit breaker open: the provider is failing and there is no --fallback-model or later --cascade stage", Err: errOpen()}
}

// end is the outcome of a row whose waiting was cut short: by its deadline,
// by sending stopping (an interrupt, --max-duration), or by its caller.
// A row that was sent ends with its last real answer; one that never was
// ends with what held it back.
func (g *Guard) end(ctx context.Context, row *rowState, err error) error {
	deadline := errors.Is(ctx.Err(), context.DeadlineExceeded)
	if row.waiting == waitCall {
		return err // no answer to the call in flight: the caller says why
	}
	if (deadline || IsStopped(err)) && row.last != nil {
		return row.last
	}
	if !deadline {
		return err
	}
	switch row.waiting {
	case waitBreaker:
		return g.openError()
	case waitCooldown:
		return &provider.Error{Outcome: outcome.UpstreamRateLimited, RetryAfter: g.Cooldown(),
			Msg: "not sent: the provider's Retry-After pause outlasted the row's deadline"}
	case waitSlot:
		return &provider.Error{Outcome: outcome.LocalCapacity,
			Msg: fmt.Sprintf("not sent: no free slot (--concurrency %d) before the row's deadline", g.slots.Max())}
	case waitTokens:
		what := "the server's x-ratelimit headers"
		if g.cfg.TPM > 0 {
			what = fmt.Sprintf("--tpm %g", g.cfg.TPM)
		}
		return &provider.Error{Outcome: outcome.LocalCapacity,
			Msg: fmt.Sprintf("not sent: the token limit (%s) had no turn for it before the row's deadline", what)}
	case waitLease:
		return lapsedError(g.slots)
	case waitRate:
		return &provider.Error{Outcome: outcome.LocalCapacity,
			Msg: fmt.Sprintf("not sent: the rate limit (--rps %g) had no turn for it before the row's deadline", g.cfg.RPS)}
	}
	return err
}
