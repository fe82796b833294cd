package resilience

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// cooldown makes a 429's Retry-After a pause for every call, not just the
// row that got it: the quota is shared, and everyone hitting it again at
// once is what a storm is.
type cooldown struct {
	inner provider.Classifier
	until atomic.Int64 // unix nanos; no new call starts before it
	max   time.Duration
	cfg   *Config
}

func newCooldown(inner provider.Classifier, cfg Config) *cooldown {
	return &cooldown{inner: inner, max: cfg.MaxRetryAfter, cfg: &cfg}
}

func (c *cooldown) Model() string { return c.inner.Model() }

func (c *cooldown) Classify(ctx context.Context, texts []string) (provider.Answer, error) {
	for {
		d := time.Until(time.Unix(0, c.until.Load()))
		if d <= 0 {
			break
		}
		// A little jitter, never less than the pause, so the rows that
		// waited do not all arrive in the same millisecond.
		d += time.Duration(rand.Int64N(int64(min(d/4, time.Second)) + 1))
		if !sleep(ctx, d) {
			return provider.Answer{}, ctx.Err()
		}
	}
	ans, err := c.inner.Classify(ctx, texts)
	if pe, ok := provider.AsError(err); ok && pe.Outcome == outcome.UpstreamRateLimited && pe.RetryAfter > 0 {
		c.pause(min(pe.RetryAfter, c.max))
	}
	return ans, err
}

func (c *cooldown) pause(d time.Duration) {
	now := time.Now()
	next := now.Add(d).UnixNano()
	for {
		cur := c.until.Load()
		if cur >= next {
			return
		}
		if c.until.CompareAndSwap(cur, next) {
			if cur < now.UnixNano() {
				c.cfg.Counters.cooldowns.Add(1)
				c.cfg.Logger.Info("rate limited (HTTP 429): pausing all calls", "for", d.Round(time.Millisecond))
			}
			return
		}
	}
}
