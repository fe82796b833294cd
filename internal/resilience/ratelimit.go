package resilience

import (
	"context"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/hfsent/hfsent/internal/provider"
)

// rateLayer paces calls with one token bucket shared by everything wrapped
// with it (the attempts, and the rows sent on to a later stage while the
// breaker is open: Guard.Pace).
type rateLayer struct {
	lim *rate.Limiter

	// changed is closed and replaced when the limit is set from outside (a
	// fleet budget's share, setLimit): a call waiting for a turn the old
	// limit gave (never, at 0) asks again under the new one. An atomic
	// pointer: every call reads it, and a lock would be one more on the way
	// to the provider.
	changed atomic.Pointer[chan struct{}]
}

func newRateLayer(rps float64, burst int) *rateLayer {
	r := &rateLayer{lim: rate.NewLimiter(rate.Limit(rps), burst)}
	ch := make(chan struct{})
	r.changed.Store(&ch)
	return r
}

func (r *rateLayer) wrap(inner attempter) attempter {
	return &rated{inner: inner, layer: r}
}

// Pace waits for a turn of the guard's rate limit (--rps), holding one of
// its slots meanwhile, as a call would, without making one; at once
// without a limit. A row that a later stage answers while this guard's
// breaker is open takes its turn here first, as the fallback's calls once
// did through this limiter: the slots it holds keep admission at the same
// pace, so a short outage sends on only its share of the rows, not every
// row behind it at once, and rows are left to probe the breaker.
func (g *Guard) Pace(ctx context.Context, r *Row) error {
	if g.limiter == nil {
		return nil
	}
	turn := &gate{inner: g.limiter.wrap(turnOnly{}), slots: g.slots}
	_, err := turn.attempt(ctx, r, provider.Call{})
	return err
}

// turnOnly is the call Pace makes once its turn comes: none.
type turnOnly struct{}

func (turnOnly) attempt(context.Context, *Row, provider.Call) (provider.Answer, error) {
	return provider.Answer{}, nil
}

// setLimit changes the rate and wakes the calls waiting for a turn.
func (r *rateLayer) setLimit(l rate.Limit) {
	if r.lim.Limit() == l {
		return
	}
	r.lim.SetLimit(l)
	next := make(chan struct{})
	close(*r.changed.Swap(&next))
}

type rated struct {
	inner attempter
	layer *rateLayer
}

func (r *rated) attempt(ctx context.Context, row *Row, c provider.Call) (provider.Answer, error) {
	// Reserve and sleep rather than lim.Wait: Wait fails at once when the
	// token comes after the deadline, which would end the row early with an
	// error that is not the context's; and the wait must also end when
	// sending stops.
	row.wait(waitRate)
	for {
		changed := *r.layer.changed.Load()
		res := r.layer.lim.Reserve()
		delay := res.Delay()
		if delay <= 0 {
			if ctx.Err() != nil || closed(row.Stop) {
				res.Cancel()
				return provider.Answer{}, stopOrCtx(ctx, row.Stop)
			}
			return r.inner.attempt(ctx, row, c)
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
			return r.inner.attempt(ctx, row, c)
		case <-changed:
			// The limit changed: this turn was given under the old one.
			t.Stop()
			res.Cancel()
			continue
		case <-ctx.Done():
		case <-row.Stop:
		}
		t.Stop()
		res.Cancel()
		return provider.Answer{}, stopOrCtx(ctx, row.Stop)
	}
}
