package resilience

import (
	"context"

	"golang.org/x/time/rate"

	"github.com/hfsent/hfsent/internal/provider"
)

// rateLayer paces calls with one token bucket shared by everything wrapped
// with it (the primary's attempts and the fallback's rows).
type rateLayer struct {
	lim *rate.Limiter
}

func newRateLayer(rps float64, burst int) *rateLayer {
	return &rateLayer{lim: rate.NewLimiter(rate.Limit(rps), burst)}
}

func (r *rateLayer) wrap(inner attempter) attempter {
	return &rated{inner: inner, lim: r.lim}
}

type rated struct {
	inner attempter
	lim   *rate.Limiter
}

func (r *rated) attempt(ctx context.Context, row *Row, c provider.Call) (provider.Answer, error) {
	// Reserve and sleep rather than lim.Wait: Wait fails at once when the
	// token comes after the deadline, which would end the row early with an
	// error that is not the context's; and the wait must also end when
	// sending stops.
	row.wait(waitRate)
	res := r.lim.Reserve()
	if !sleep(ctx, row.Stop, res.Delay()) {
		res.Cancel()
		return provider.Answer{}, stopOrCtx(ctx, row.Stop)
	}
	return r.inner.attempt(ctx, row, c)
}
