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
	lossAt    float64 // calls in flight when the last refused call was sent (+Inf before any)
	probing   bool    // a call at or above lossAt is out
	probeWins int     // probes at lossAt that succeeded since the last loss
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
	// aimdProbeWins is how many calls must succeed at the level refused
	// last time before it counts as safe.
	aimdProbeWins = 3
)

func newAIMD(inner provider.Classifier, maxConc int, c *Counters) *aimd {
	a := &aimd{inner: inner, c: c, max: float64(maxConc), limit: float64(min(maxConc, aimdStart)),
		slowStart: true, lossAt: math.Inf(1), changed: make(chan struct{})}
	c.limit.Store(int64(a.limit))
	return a
}

func (a *aimd) Model() string { return a.inner.Model() }

type permit struct {
	epoch uint64
	full  bool // the call took the last free place: the limit was binding
	k     int  // calls in flight when this one was sent, itself included
	probe bool // k reached the level refused last time
}

func (a *aimd) acquire(ctx context.Context) (permit, error) {
	for {
		a.mu.Lock()
		// Once the limit climbs back to the level where calls were refused,
		// one call at a time tests it: 429s come back a round trip late,
		// and every call sent at that level meanwhile would be refused too.
		atEdge := float64(a.inFlight+1) >= a.lossAt
		if a.inFlight < int(a.limit) && !(atEdge && a.probing) {
			a.inFlight++
			p := permit{epoch: a.epoch, full: a.inFlight >= int(a.limit), k: a.inFlight, probe: atEdge}
			a.probing = a.probing || atEdge
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
	if p.probe {
		a.probing = false
		if err == nil {
			// Seen from here a call may look alone at a level while the
			// provider has already let another go, so one success proves
			// little: after a few, the level holds and the edge is above.
			if a.probeWins++; a.probeWins >= aimdProbeWins {
				a.lossAt = float64(p.k + 1)
				a.probeWins = 0
			}
		}
	}
	switch {
	case isLoss(err):
		// One decrease per round trip: calls sent before the last decrease
		// report the same overload and must not cut the limit again.
		if p.epoch == a.epoch {
			a.lossAt = float64(p.k)
			a.limit = math.Max(1, a.limit*aimdBeta)
			a.epoch++
			a.slowStart = false
		}
		// Refusals of one round trip come back in any order: the edge is
		// the lowest level refused.
		a.lossAt = math.Min(a.lossAt, float64(p.k))
		a.probeWins = 0
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
