package resilience

import (
	"context"
	"fmt"
	"time"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// gate is where an attempt waits for its turn: first for a shared cooldown
// to pass, then for a slot. The slot is held only while the attempt is in
// flight; a row that must wait for a cooldown gives back the slot its
// admission took rather than sit on it.
type gate struct {
	inner attempter
	slots *Slots
	cool  *cooldown // nil: no shared cooldown (a Plain guard)
}

func (g *gate) attempt(ctx context.Context, r *Row, c provider.Call) (provider.Answer, error) {
	p := r.Permit
	r.Permit = nil
	if p != nil && closed(r.Stop) {
		// Admitted, but sending stopped before it went: not sent.
		p.Cancel()
		return provider.Answer{}, errStopped
	}
	paused := g.pause()
	if paused > 0 && p != nil {
		// The slot the admission took must not sit idle through the pause:
		// it goes back, and this row queues for one like everyone else.
		p.Cancel()
		p = nil
	}
	if p == nil {
		if paused > 0 && r.FailFast && !fitsDeadline(ctx, paused) {
			return provider.Answer{}, &provider.Error{Outcome: outcome.UpstreamRateLimited, RetryAfter: paused,
				Msg: fmt.Sprintf("not sent: the provider asked for a pause of %s (HTTP 429 Retry-After)", paused.Round(time.Second))}
		}
		if paused > 0 {
			r.wait(waitCooldown)
		} else {
			r.wait(waitSlot)
		}
		var err error
		if p, err = g.slots.acquire(ctx, r.Stop, g.cool == nil); err != nil {
			return provider.Answer{}, err
		}
	}
	ans, err := g.inner.attempt(ctx, r, c)
	if isTimeout(err) {
		p.again = r.timedOut
		r.timedOut = true
	}
	p.Release(err)
	if g.cool == nil {
		return ans, err
	}
	if pe, ok := provider.AsError(err); ok && pe.Outcome == outcome.UpstreamRateLimited &&
		pe.RetryAfter > 0 && g.slots.pauseAll() {
		g.cool.refused(pe.RetryAfter, r.sentAt)
	} else if err == nil {
		g.cool.ok(r.sentAt)
	}
	return ans, err
}

func (g *gate) pause() time.Duration {
	if g.cool == nil {
		return 0
	}
	return g.cool.remaining()
}

// fitsDeadline reports whether a wait of d ends before ctx's deadline.
func fitsDeadline(ctx context.Context, d time.Duration) bool {
	dl, ok := ctx.Deadline()
	return !ok || time.Until(dl) > d
}

// stopOrCtx is the error for a wait cut short.
func stopOrCtx(ctx context.Context, stop <-chan struct{}) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if closed(stop) {
		return errStopped
	}
	return context.Canceled
}
