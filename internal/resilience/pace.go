package resilience

import (
	"math"
	"time"
)

// pace is a token rate learnt from a provider's refusals, for a provider
// whose limits cannot be read: it sends no x-ratelimit header, or its
// headers describe a bucket with room in it while a shorter window it does
// not show refuses (OpenAI warns that a per-minute limit may be enforced
// over shorter periods). The token layer paces every call by it once it
// is learnt, beside the headers' buckets.
//
// It is an additive-increase, multiplicative-decrease on the rate, in the
// manner of TCP's congestion window, with the plateau of CUBIC:
//
//   - nothing is learnt before the first such refusal: a provider that
//     refuses nothing is not paced (the headers' buckets still are);
//   - a refusal sets the edge to the tokens the provider accepted over the
//     last few seconds (its real rate, as far as this process can see it),
//     or the rate itself if lower, and cuts the rate to paceBeta of it
//     (unless it accepted nothing lately: refusing every call says nothing
//     of a rate, and the shared pause waits it out). A refusal of a call that took its turn before the last cut reports the
//     same excess and cuts nothing;
//   - while calls wait for their turn and succeed, the rate grows
//     additively with time: back to the edge in about a second, then past
//     it slowly (paceProbe of the rate a second, since every test of the
//     edge costs a refusal), doubling that step every second no call is
//     refused, so that an edge measured too low is soon left behind.
//
// The calls that had their turn before a cut take a new one at the new
// rate (epoch), so that a cut takes effect at once rather than after the
// calls already scheduled.
type pace struct {
	rate    float64   // tokens a second; 0: nothing learnt
	edge    float64   // where the last cut put the provider's rate
	bucket  bucket    // at rate, in bursts of paceBurst of it
	epoch   uint64    // bumped on every cut
	grownAt time.Time // when the rate last grew
	aboveAt time.Time // when it last reached the edge (zero: not since the cut)
	// accepted is the tokens of the calls answered 200 within the last
	// paceWindow, oldest first.
	accepted []paced
	cuts     int
}

type paced struct {
	at     time.Time
	tokens float64
}

const (
	// paceBeta is the multiplicative decrease.
	paceBeta = 0.8
	// paceWindow is how far back the accepted tokens measure the rate:
	// long enough that a burst the provider allows after a quiet spell
	// (a shorter window's worth) counts little.
	paceWindow = 3 * time.Second
	// paceRecover is how fast the rate returns to the edge after a cut
	// (a share of the edge a second); paceProbe how fast it grows past it.
	paceRecover = 0.25
	paceProbe   = 0.02
	// paceBurst is the learnt bucket's size, in seconds of its rate: small,
	// as the window that refused is unknown.
	paceBurst = 0.1
)

// learnt reports whether calls are paced by a learnt rate.
func (p *pace) learnt() bool { return p.rate > 0 }

// take reserves n tokens and says how long to wait; the epoch is the cut
// the turn was given under.
func (p *pace) take(n float64, now time.Time) (time.Duration, uint64) {
	if !p.learnt() {
		return 0, p.epoch
	}
	return p.bucket.take(n, now), p.epoch
}

// give returns a turn not used, given under epoch.
func (p *pace) give(n float64, epoch uint64, now time.Time) {
	if p.learnt() && epoch == p.epoch {
		p.bucket.give(n, now)
	}
}

// ok records a call answered 200 that cost n tokens; waited says the call
// waited for its turn (the rate held it back), and only then does the rate
// grow: a rate nothing asked for proves nothing.
func (p *pace) ok(n float64, waited bool, now time.Time) {
	p.accepted = append(p.accepted, paced{now, n})
	p.prune(now)
	if !p.learnt() || !waited {
		p.grownAt = now
		return
	}
	dt := math.Min(now.Sub(p.grownAt).Seconds(), 1)
	p.grownAt = now
	step := paceRecover
	if p.rate >= p.edge {
		// Past the edge, slowly at first, then faster the longer no call
		// is refused (CUBIC's convex probe): an edge measured low, when
		// something else held the calls back, is left in a few seconds.
		if p.aboveAt.IsZero() {
			p.aboveAt = now
		}
		step = math.Min(paceProbe*math.Exp2(now.Sub(p.aboveAt).Seconds()), 1)
	}
	p.setRate(p.rate+step*math.Max(p.edge, p.rate)*dt, now)
}

// refused records a 429 that the headers did not explain, for a call whose
// turn was given under epoch and cost about n tokens; it reports whether
// it cut the rate (not when nothing was accepted lately).
func (p *pace) refused(n float64, epoch uint64, now time.Time) bool {
	if p.learnt() && epoch != p.epoch {
		return false // sent before the last cut: the same excess
	}
	p.prune(now)
	seen := 0.0
	for _, a := range p.accepted {
		seen += a.tokens
	}
	// Over as much of the window as has passed since the first accepted
	// call, but at least a second: a provider's burst, spent in the first
	// milliseconds, is not its rate.
	span := paceWindow
	if len(p.accepted) > 0 {
		span = min(span, max(time.Second, now.Sub(p.accepted[0].at)))
	}
	seen /= span.Seconds()
	edge := seen
	if p.learnt() {
		edge = math.Min(edge, p.rate)
	}
	if seen < n {
		// Nothing accepted lately: the provider refuses every call, which
		// says nothing of its rate (the shared pause, doubling, and the
		// rows' backoff wait it out). A rate learnt from it would be ~0.
		return false
	}
	p.edge = edge
	p.epoch++
	p.cuts++
	p.setRate(paceBeta*edge, now)
	// The provider is out of tokens now: no burst until the rate refills it.
	p.bucket.level = math.Min(p.bucket.level, 0)
	p.grownAt, p.aboveAt = now, time.Time{}
	return true
}

func (p *pace) setRate(r float64, now time.Time) {
	p.bucket.refill(now)
	p.rate = r
	p.bucket.known, p.bucket.rate, p.bucket.capacity = true, r, r*paceBurst
	p.bucket.level = math.Min(p.bucket.level, p.bucket.capacity)
	p.bucket.at = now
}

func (p *pace) prune(now time.Time) {
	i := 0
	for i < len(p.accepted) && now.Sub(p.accepted[i].at) > paceWindow {
		i++
	}
	p.accepted = append(p.accepted[:0], p.accepted[i:]...)
}
