package resilience

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/hfsent/hfsent/internal/provider"
)

// tokenLayer paces calls by the tokens they cost, for a provider that
// counts them (chat). Each call reserves its estimate before it is sent
// and waits while the bucket is in debt; what the call reports then
// corrects the bucket:
//
//   - with --tpm N (fixed), the bucket is ours: N/60 tokens a second, in
//     bursts of at most one second's worth (a provider refills
//     continuously, and a client that spends a minute's budget at once is
//     refused for the rest of it); the usage reported replaces the
//     estimate.
//   - without (headers), the bucket is the server's, as its
//     x-ratelimit-remaining-tokens / -requests headers and their reset
//     times say: each answer sets what remains, less the estimates of the
//     calls still in flight (the server counted it before they reached
//     it), and the refill rate is the limit's (limit-remaining over the
//     time to reset). Until the first answer, one call goes alone: the
//     headers are not known yet, and a first burst of -c calls could spend
//     more than the server holds; after it, a server that sent none is
//     not paced.
type tokenLayer struct {
	inner    attempter
	estimate func([]string) int
	fixed    bool

	mu       sync.Mutex
	tokens   bucket
	requests bucket  // headers only: the request limit, a call costing 1
	inFlight float64 // estimates of the calls sent and not answered
	calls    int     // and how many they are
	// headers only: probing is set while the first call is out; answered
	// is closed when it is back.
	probing  bool
	answered chan struct{}
	once     sync.Once
}

// bucket is a token bucket that may go into debt: a reservation takes its
// cost at once, and the caller waits until the debt is paid back.
type bucket struct {
	known     bool
	level     float64 // may be negative: owed
	capacity  float64
	rate      float64   // per second; 0: refills whole at resetAt
	at        time.Time // when level was true
	resetAt   time.Time
	fullAfter bool // rate 0: at resetAt the level is the capacity again
}

func (b *bucket) refill(now time.Time) {
	if !b.known {
		return
	}
	switch {
	case b.rate > 0:
		b.level = math.Min(b.capacity, b.level+now.Sub(b.at).Seconds()*b.rate)
	case b.fullAfter && !b.resetAt.IsZero() && !now.Before(b.resetAt):
		b.level, b.fullAfter = b.capacity, false
	}
	b.at = now
}

// take reserves n and says how long to wait before sending.
func (b *bucket) take(n float64, now time.Time) time.Duration {
	if !b.known {
		return 0
	}
	b.refill(now)
	b.level -= n
	if b.level >= 0 {
		return 0
	}
	if b.rate > 0 {
		return time.Duration(-b.level / b.rate * float64(time.Second))
	}
	if b.fullAfter && b.resetAt.After(now) {
		return b.resetAt.Sub(now)
	}
	return 0
}

// give returns n (a reservation not sent, or an estimate above the use).
func (b *bucket) give(n float64, now time.Time) {
	if !b.known {
		return
	}
	b.refill(now)
	b.level = math.Min(b.capacity, b.level+n)
}

// set is what a server's headers said remains (less what is in flight),
// of limit, whole again after reset.
func (b *bucket) set(remaining, inFlight float64, limit int64, reset time.Duration, now time.Time) {
	b.known, b.at = true, now
	b.level = remaining - inFlight
	if limit > 0 {
		b.capacity = float64(limit)
	}
	b.capacity = math.Max(b.capacity, remaining)
	if reset > 0 {
		b.resetAt = now.Add(reset)
		if gap := b.capacity - remaining; gap > 0 {
			b.rate = gap / reset.Seconds()
		}
	}
	b.fullAfter = b.rate <= 0
}

func newTokenLayer(inner attempter, est provider.TokenEstimator, tpm float64) *tokenLayer {
	t := &tokenLayer{inner: inner, estimate: est.EstimateTokens, fixed: tpm > 0, answered: make(chan struct{})}
	if t.fixed {
		perSec := tpm / 60
		t.tokens = bucket{known: true, level: perSec, capacity: perSec, rate: perSec, at: time.Now()}
	}
	return t
}

func (t *tokenLayer) attempt(ctx context.Context, row *Row, c provider.Call) (provider.Answer, error) {
	est := float64(t.estimate(c.Texts))
	if !t.fixed {
		t.mu.Lock()
		probe := !t.probing
		t.probing = true
		t.mu.Unlock()
		if probe {
			defer t.once.Do(func() { close(t.answered) })
		} else {
			row.wait(waitTokens)
			select {
			case <-t.answered:
			case <-ctx.Done():
				return provider.Answer{}, stopOrCtx(ctx, row.Stop)
			case <-row.Stop:
				return provider.Answer{}, stopOrCtx(ctx, row.Stop)
			}
		}
	}
	now := time.Now()
	t.mu.Lock()
	d := t.tokens.take(est, now)
	if !t.fixed {
		d = max(d, t.requests.take(1, now))
	}
	t.inFlight += est
	t.calls++
	t.mu.Unlock()
	row.wait(waitTokens)
	if !sleep(ctx, row.Stop, d) {
		t.mu.Lock()
		now := time.Now()
		t.tokens.give(est, now)
		if !t.fixed {
			t.requests.give(1, now)
		}
		t.inFlight -= est
		t.calls--
		t.mu.Unlock()
		return provider.Answer{}, stopOrCtx(ctx, row.Stop)
	}
	ans, err := t.inner.attempt(ctx, row, c)
	usage, limits := reported(ans, err)
	t.mu.Lock()
	defer t.mu.Unlock()
	now = time.Now()
	t.inFlight -= est
	t.calls--
	switch {
	case t.fixed:
		// What the call cost: its usage; else the estimate stands, but for
		// a call the server refused (a 4xx, a 429), which cost nothing.
		spent := est
		if usage.Known {
			spent = float64(usage.Total())
		} else if pe, ok := provider.AsError(err); ok && pe.Status >= 400 && pe.Status < 500 {
			spent = 0
		}
		t.tokens.give(est-spent, now)
	case limits.Tokens || limits.Requests:
		if limits.Tokens {
			t.tokens.set(float64(limits.RemainingTokens), t.inFlight, limits.LimitTokens, limits.ResetTokens, now)
		}
		if limits.Requests {
			t.requests.set(float64(limits.RemainingRequests), float64(t.calls), limits.LimitRequests, limits.ResetRequests, now)
		}
	}
	return ans, err
}
