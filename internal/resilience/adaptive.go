package resilience

import (
	"context"
	"math"
	"sync"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// aimd is a loss-based concurrency limit: additive increase while calls
// succeed at full use, multiplicative decrease on a 429 or a timeout.
//
// failsafe-go's adaptivelimiter was not used: it moves its limit on the
// trend of execution times (a latency gradient) and has no way to feed it a
// loss. A quota-limited API answers a 429 as fast as a success, so latency
// never rises when the quota is exceeded; the 429 itself is the signal.
type aimd struct {
	inner provider.Classifier
	c     *Counters

	mu        sync.Mutex
	limit     float64
	max       float64
	inFlight  int
	epoch     uint64  // bumped on every decrease
	slowStart bool    // until the first loss: +1 per success, doubling per round trip
	lossAt    float64 // the limit at the last loss
	changed   chan struct{}
}

const (
	// aimdStart is where the limit begins: slow start reaches -c in a few
	// round trips, while a storm starting at -c would cost a wave of 429s.
	aimdStart = 4
	// aimdBeta is the multiplicative decrease.
	aimdBeta = 0.7
	// aimdPlateau slows the increase this many times within one of the
	// limit where the last loss happened: a quota's edge does not move
	// often, and each probe past it costs 429s (and, with Retry-After, a
	// pause for everyone), so the limit recovers fast to just below the
	// edge and then probes it rarely.
	aimdPlateau = 10
)

func newAIMD(inner provider.Classifier, maxConc int, c *Counters) *aimd {
	a := &aimd{inner: inner, c: c, max: float64(maxConc), limit: float64(min(maxConc, aimdStart)),
		slowStart: true, changed: make(chan struct{})}
	c.limit.Store(int64(a.limit))
	return a
}

func (a *aimd) Model() string { return a.inner.Model() }

type permit struct {
	epoch uint64
	full  bool // the call took the last free place: the limit was binding
}

func (a *aimd) acquire(ctx context.Context) (permit, error) {
	for {
		a.mu.Lock()
		if a.inFlight < int(a.limit) {
			a.inFlight++
			p := permit{epoch: a.epoch, full: a.inFlight >= int(a.limit)}
			a.mu.Unlock()
			return p, nil
		}
		ch := a.changed
		a.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return permit{}, ctx.Err()
		}
	}
}

// release returns p and moves the limit on the call's result.
func (a *aimd) release(p permit, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.inFlight--
	switch {
	case isLoss(err):
		// One decrease per round trip: calls sent before the last decrease
		// report the same overload and must not cut the limit again.
		if p.epoch == a.epoch {
			a.lossAt = a.limit
			a.limit = math.Max(1, a.limit*aimdBeta)
			a.epoch++
			a.slowStart = false
		}
	case err == nil && p.full:
		switch {
		case a.slowStart:
			a.limit++
		case a.limit+1 >= a.lossAt && a.limit < a.lossAt+1:
			a.limit += 1 / (aimdPlateau * a.limit)
		default:
			a.limit += 1 / a.limit // about +1 per round trip
		}
		a.limit = math.Min(a.limit, a.max)
	}
	a.c.limit.Store(int64(a.limit))
	close(a.changed)
	a.changed = make(chan struct{})
}

func isLoss(err error) bool {
	pe, ok := provider.AsError(err)
	return ok && (pe.Outcome == outcome.UpstreamRateLimited || pe.Outcome == outcome.UpstreamTimeout)
}

func (a *aimd) Classify(ctx context.Context, texts []string) (provider.Answer, error) {
	p, err := a.acquire(ctx)
	if err != nil {
		return provider.Answer{}, err
	}
	ans, err := a.inner.Classify(ctx, texts)
	a.release(p, err)
	return ans, err
}
