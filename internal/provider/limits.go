package provider

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Limits is what an OpenAI-style server's rate-limit headers said at one
// answer: x-ratelimit-{limit,remaining,reset}-{tokens,requests}. A
// dimension counts only when its remaining value was sent (Tokens,
// Requests).
type Limits struct {
	// At is when the answer was read; zero when no header was sent.
	At time.Time
	// Tokens: the token headers were sent; RemainingTokens is what was
	// left, LimitTokens the limit (0: not sent), ResetTokens how long until
	// the limit is whole again.
	Tokens          bool
	RemainingTokens int64
	LimitTokens     int64
	ResetTokens     time.Duration
	// Requests: the same for requests.
	Requests          bool
	RemainingRequests int64
	LimitRequests     int64
	ResetRequests     time.Duration
}

// Known reports whether any rate-limit header was read.
func (l Limits) Known() bool { return l.Tokens || l.Requests }

// ParseLimits reads the x-ratelimit-* headers OpenAI and the servers that
// copy it send (the router passes its providers' on).
func ParseLimits(h http.Header, now time.Time) Limits {
	var l Limits
	if n, ok := headerInt(h, "X-Ratelimit-Remaining-Tokens"); ok {
		l.Tokens, l.RemainingTokens = true, n
		l.LimitTokens, _ = headerInt(h, "X-Ratelimit-Limit-Tokens")
		l.ResetTokens = ParseResetDuration(h.Get("X-Ratelimit-Reset-Tokens"))
	}
	if n, ok := headerInt(h, "X-Ratelimit-Remaining-Requests"); ok {
		l.Requests, l.RemainingRequests = true, n
		l.LimitRequests, _ = headerInt(h, "X-Ratelimit-Limit-Requests")
		l.ResetRequests = ParseResetDuration(h.Get("X-Ratelimit-Reset-Requests"))
	}
	if l.Known() {
		l.At = now
	}
	return l
}

func headerInt(h http.Header, name string) (int64, bool) {
	v := strings.TrimSpace(h.Get(name))
	if v == "" {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || f < 0 || f > 1e15 {
		return 0, false
	}
	return int64(f), true
}

// ParseResetDuration reads a reset header's value: a Go-style duration as
// OpenAI sends it ("1s", "6m0s", "20ms", "1m30.5s") or plain seconds
// ("2", "0.5"). It returns 0 for a value it cannot read, and caps at a day.
func ParseResetDuration(v string) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if math.IsNaN(secs) || secs <= 0 {
			return 0
		}
		return min(time.Duration(secs*float64(time.Second)), 24*time.Hour)
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0
	}
	return min(d, 24*time.Hour)
}

// retryAfterMs reads retry-after-ms, which OpenAI's clients honour before
// Retry-After.
func retryAfterMs(h http.Header) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After-Ms"))
	if v == "" {
		return 0
	}
	ms, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(ms) || ms <= 0 || ms > 86400e3 {
		return 0
	}
	return time.Duration(ms * float64(time.Millisecond))
}
