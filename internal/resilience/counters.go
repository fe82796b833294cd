package resilience

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/hfsent/hfsent/internal/provider"
)

// Counters are what the layers saw during a run. The caller makes one and
// passes it to Build; every field is safe for concurrent use.
type Counters struct {
	Calls           atomic.Int64 // calls sent to the primary provider, retries included
	Retries         atomic.Int64 // calls after the first of a row
	RateLimited     atomic.Int64 // 429 answers
	Timeouts        atomic.Int64 // attempts that got no answer within --timeout
	BreakerOpenings atomic.Int64 // closed -> open transitions (outages, not failed probes)
	FallbackRows    atomic.Int64 // rows a later stage answered after this provider failed (engine)
	FallbackCalls   atomic.Int64 // calls sent to later stages for this provider's rows (engine)
	// PromptTokens and CompletionTokens sum the usage the provider
	// reported (chat), failed calls' too; TokenCalls counts the calls that
	// reported some.
	PromptTokens     atomic.Int64
	CompletionTokens atomic.Int64
	TokenCalls       atomic.Int64
	// ReasoningTokens are the completion tokens a reasoning model spent
	// reasoning (in CompletionTokens too).
	ReasoningTokens atomic.Int64
	// CachedPromptTokens are the prompt tokens the server read from its
	// prompt cache: part of PromptTokens, not added to them.
	CachedPromptTokens atomic.Int64

	// Observe, when set before the run, is told of every primary call's
	// duration and result (for a latency histogram).
	Observe func(d time.Duration, err error)

	inFlight    atomic.Int64
	maxInFlight atomic.Int64
	limit       atomic.Int64 // the adaptive limit now; 0 when not adaptive
	latency     atomic.Int64 // moving average of a call's duration, nanos

	openNanos atomic.Int64 // time spent not closed, finished spells
	openedAt  atomic.Int64 // unix nanos of the current spell, 0 when closed
	cooldowns atomic.Int64 // shared pauses started by a 429 with Retry-After
	// learntTPM is the token rate learnt from the provider's refusals
	// (tokens.go's pace), in tokens a minute as --tpm counts them; 0 while
	// nothing is learnt.
	learntTPM atomic.Int64
}

// reported is what a call's server said with its answer: the tokens it
// cost and the rate-limit headers; a failed call's are on its error.
func reported(ans provider.Answer, err error) (provider.Usage, provider.Limits) {
	if pe, ok := provider.AsError(err); ok {
		return pe.Usage, pe.Limits
	}
	return ans.Usage(), ans.Limits
}

// countUsage adds what a call cost to the counters and to its row.
func (c *Counters) countUsage(r *Row, ans provider.Answer, err error) {
	u, _ := reported(ans, err)
	if !u.Known {
		return
	}
	r.usage = r.usage.Add(u)
	satAdd(&c.PromptTokens, int64(u.Prompt))
	satAdd(&c.CompletionTokens, int64(u.Completion))
	satAdd(&c.ReasoningTokens, int64(u.Reasoning))
	satAdd(&c.CachedPromptTokens, int64(u.Cached))
	c.TokenCalls.Add(1)
}

// satAdd adds n (at least 0) to a, which stops at the largest int64
// rather than wrap: a server's usage is not to be trusted.
func satAdd(a *atomic.Int64, n int64) {
	for {
		cur := a.Load()
		next := cur + max(n, 0)
		if next < cur {
			next = math.MaxInt64
		}
		if a.CompareAndSwap(cur, next) {
			return
		}
	}
}

func (c *Counters) callStarted() {
	n := c.inFlight.Add(1)
	for m := c.maxInFlight.Load(); n > m && !c.maxInFlight.CompareAndSwap(m, n); m = c.maxInFlight.Load() {
	}
}

func (c *Counters) callEnded(d time.Duration) {
	c.inFlight.Add(-1)
	// An exponential moving average over about the last eight calls.
	for {
		old := c.latency.Load()
		next := int64(d)
		if old != 0 {
			next = old + (int64(d)-old)/8
		}
		if c.latency.CompareAndSwap(old, next) {
			return
		}
	}
}

// Latency is about how long a call takes lately (0 before any).
func (c *Counters) Latency() time.Duration { return time.Duration(c.latency.Load()) }

// breakerOpened starts a spell unless one is running (half-open -> open
// continues the same outage).
func (c *Counters) breakerOpened(now time.Time) {
	if c.openedAt.CompareAndSwap(0, now.UnixNano()) {
		c.BreakerOpenings.Add(1)
	}
}

func (c *Counters) breakerClosed(now time.Time) {
	if at := c.openedAt.Swap(0); at != 0 {
		c.openNanos.Add(now.UnixNano() - at)
	}
}

// LearntTokensPerMinute is the token rate the guard learnt from the
// provider's 429s that its headers did not explain, and paces calls by
// now, in tokens a minute (0: nothing learnt).
func (c *Counters) LearntTokensPerMinute() int64 { return c.learntTPM.Load() }

// Limit is the adaptive limit now (0 when not adaptive).
func (c *Counters) Limit() int { return int(c.limit.Load()) }

// Stats is a plain copy of the counters for summaries.
type Stats struct {
	// Policies: the calls went through the policies (retries, limits, the
	// breaker); false for a Plain guard's, which only bounds and counts them.
	Policies      bool
	Calls         int64 // calls sent to the primary provider, retries included
	Retries       int64 // calls after the first of a row
	FallbackCalls int64 // calls sent to later stages (--fallback-model, a cascade's)
	// Tokens reported (chat); TokenCalls: the calls that reported them.
	PromptTokens, CompletionTokens, TokenCalls int64
	ReasoningTokens                            int64 // of CompletionTokens
	RateLimited                                int64
	Timeouts                                   int64
	BreakerOpenings                            int64
	BreakerOpen                                time.Duration // time the breaker was open or probing
	FallbackRows                               int64
	Cooldowns                                  int64 // shared pauses after a 429 with Retry-After
	MaxInFlight                                int64
	Limit                                      int // final adaptive limit; 0 when not adaptive
	CallsPerSec                                float64
	// CachedPromptTokens: the part of PromptTokens read from the
	// server's prompt cache.
	CachedPromptTokens int64
	// LearntTokensPerMinute is the token rate learnt from the provider's
	// 429s at the end (0: nothing learnt).
	LearntTokensPerMinute int64
}

// Snapshot copies the counters; elapsed is the run's wall time, for calls/s.
func (c *Counters) Snapshot(elapsed time.Duration) Stats {
	if c == nil {
		return Stats{}
	}
	open := time.Duration(c.openNanos.Load())
	if at := c.openedAt.Load(); at != 0 {
		open += time.Since(time.Unix(0, at))
	}
	s := Stats{
		Calls:                 c.Calls.Load(),
		Retries:               c.Retries.Load(),
		FallbackCalls:         c.FallbackCalls.Load(),
		PromptTokens:          c.PromptTokens.Load(),
		CompletionTokens:      c.CompletionTokens.Load(),
		TokenCalls:            c.TokenCalls.Load(),
		ReasoningTokens:       c.ReasoningTokens.Load(),
		RateLimited:           c.RateLimited.Load(),
		Timeouts:              c.Timeouts.Load(),
		BreakerOpenings:       c.BreakerOpenings.Load(),
		BreakerOpen:           open,
		FallbackRows:          c.FallbackRows.Load(),
		Cooldowns:             c.cooldowns.Load(),
		MaxInFlight:           c.maxInFlight.Load(),
		Limit:                 c.Limit(),
		CachedPromptTokens:    c.CachedPromptTokens.Load(),
		LearntTokensPerMinute: c.LearntTokensPerMinute(),
	}
	if secs := elapsed.Seconds(); secs > 0 {
		s.CallsPerSec = float64(s.Calls) / secs
	}
	return s
}
