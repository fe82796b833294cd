package resilience

import (
	"context"

	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/spend"
)

// spendLayer charges every call sent to its model to the spend ledger, at
// the usage the call reported (a failed call's too, when it reported
// some), and adds the cost to the row's. With a limit (--max-spend) it
// first reserves the call's estimate (the client's bound, priced): a call
// whose reservation is refused is not sent, and the row stops as rows do
// when sending stops (the ledger's OnLimit stops the run). It sits just
// outside the meter, after every wait, so that a reservation is held only
// while its call is out.
type spendLayer struct {
	inner  attempter
	ledger *spend.Ledger
	model  string
	// bound is the client's generous estimate of a call's usage (nil: the
	// client cannot say; it is reserved at nothing).
	bound func(text string) provider.Usage
}

func newSpendLayer(inner attempter, l *spend.Ledger, c provider.Classifier) *spendLayer {
	s := &spendLayer{inner: inner, ledger: l, model: c.Model()}
	if est, ok := c.(provider.UsageEstimator); ok {
		s.bound = func(text string) provider.Usage { _, b := est.EstimateUsage(text); return b }
	}
	return s
}

func (s *spendLayer) attempt(ctx context.Context, r *Row, c provider.Call) (provider.Answer, error) {
	est := 0.0
	if s.bound != nil && s.ledger.Limited() {
		for _, t := range c.Texts {
			if usd, ok := s.ledger.Cost(s.model, s.bound(t), false); ok {
				est += usd
			}
		}
	}
	res, ok := s.ledger.Reserve(est)
	if !ok {
		return provider.Answer{}, errStopped
	}
	calls := r.sent
	ans, err := s.inner.attempt(ctx, r, c)
	if r.sent == calls {
		res.Cancel() // the row ended before its call went
		return ans, err
	}
	u, _ := reported(ans, err)
	if usd, ok := res.Settle(s.model, u); ok {
		r.cost += usd
		r.costed = true
	}
	return ans, err
}
