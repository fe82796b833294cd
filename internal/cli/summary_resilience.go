package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/hfsent/hfsent/internal/resilience"
)

// resilienceLine is the part of the summary line about the provider
// policies: what the provider answered and what the policies did about it.
// It is empty when no call went through them (none was sent, or the
// provider is the embedded model, guarded Plain).
func resilienceLine(r resilience.Stats) string {
	if !r.Policies || r.Calls == 0 && r.FallbackRows == 0 && r.Limit == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, " provider_calls=%d 429s=%d timeouts=%d max_in_flight=%d calls/s=%.1f",
		r.Calls, r.RateLimited, r.Timeouts, r.MaxInFlight, r.CallsPerSec)
	if r.Cooldowns > 0 {
		fmt.Fprintf(&b, " cooldowns=%d", r.Cooldowns)
	}
	if r.BreakerOpenings > 0 {
		fmt.Fprintf(&b, " breaker_openings=%d breaker_open=%s", r.BreakerOpenings, r.BreakerOpen.Round(time.Millisecond))
	}
	if r.FallbackRows > 0 {
		fmt.Fprintf(&b, " fallback_rows=%d", r.FallbackRows)
	}
	if r.Limit > 0 {
		fmt.Fprintf(&b, " adaptive_limit=%d", r.Limit)
	}
	if r.LearntTokensPerMinute > 0 {
		// The provider refused calls by a limit its headers did not show:
		// the rate the calls were paced by at the end.
		fmt.Fprintf(&b, " learnt_tokens_per_minute=%d", r.LearntTokensPerMinute)
	}
	return b.String()
}

type resilienceJSON struct {
	ProviderCalls   int64   `json:"provider_calls"`
	Retries         int64   `json:"retries"`
	RateLimited     int64   `json:"rate_limited_429s"`
	Timeouts        int64   `json:"timeouts"`
	Cooldowns       int64   `json:"cooldowns"`
	BreakerOpenings int64   `json:"breaker_openings"`
	BreakerOpenSec  float64 `json:"breaker_open_s"`
	FallbackRows    int64   `json:"fallback_rows"`
	MaxInFlight     int64   `json:"max_in_flight"`
	AdaptiveLimit   int     `json:"adaptive_limit,omitempty"`
	CallsPerSec     float64 `json:"calls_per_s"`
	// LearntTPM is the token rate learnt from 429s the rate-limit headers
	// did not explain, at the end (0: nothing learnt).
	LearntTPM int64 `json:"learnt_tokens_per_minute"`
}

// newResilienceJSON is the policies' part of --summary-json: zeros for the
// embedded model, whose calls go through none (its calls are the summary's
// own "calls").
func newResilienceJSON(r resilience.Stats) resilienceJSON {
	if !r.Policies {
		return resilienceJSON{}
	}
	return resilienceJSON{
		ProviderCalls:   r.Calls,
		Retries:         r.Retries,
		RateLimited:     r.RateLimited,
		Timeouts:        r.Timeouts,
		Cooldowns:       r.Cooldowns,
		BreakerOpenings: r.BreakerOpenings,
		BreakerOpenSec:  r.BreakerOpen.Seconds(),
		FallbackRows:    r.FallbackRows,
		MaxInFlight:     r.MaxInFlight,
		AdaptiveLimit:   r.Limit,
		CallsPerSec:     r.CallsPerSec,
		LearntTPM:       r.LearntTokensPerMinute,
	}
}
