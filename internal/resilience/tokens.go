package resilience

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/hfsent/hfsent/internal/outcome"
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
	// pace is the rate learnt from 429s the headers did not explain
	// (headers only; pace.go).
	pace pace
	log  *slog.Logger
	c    *Counters // shows the pace's rate (LearntTokensPerMinute)
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

func newTokenLayer(inner attempter, est provider.TokenEstimator, tpm float64, log *slog.Logger, c *Counters) *tokenLayer {
	t := &tokenLayer{inner: inner, estimate: est.EstimateTokens, fixed: tpm > 0, answered: make(chan struct{}), log: log, c: c}
	if t.fixed {
		perSec := tpm / 60
		t.tokens = bucket{known: true, level: perSec, capacity: perSec, rate: perSec, at: time.Now()}
	}
	return t
}

func (t *tokenLayer) attempt(ctx context.Context, row *Row, c provider.Call) (provider.Answer, error) {
	est := float64(t.estimate(c.Texts))
	if !t.fixed {
		probe, err := t.waitProbe(ctx, row)
		if err != nil {
			return provider.Answer{}, err
		}
		if probe {
			// Its answer (or its end) lets the others go.
			defer t.once.Do(func() { close(t.answered) })
		}
	}
	turn, err := t.reserve(ctx, row, est)
	if err != nil {
		return provider.Answer{}, err
	}
	ans, err := t.inner.attempt(ctx, row, c)
	usage, limits := reported(ans, err)
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
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
		return ans, err
	case limits.Tokens || limits.Requests:
		if limits.Tokens {
			t.tokens.set(float64(limits.RemainingTokens), t.inFlight, limits.LimitTokens, limits.ResetTokens, now)
		}
		if limits.Requests {
			t.requests.set(float64(limits.RemainingRequests), float64(t.calls), limits.LimitRequests, limits.ResetRequests, now)
		}
	}
	t.learn(est, turn, usage, limits, err, now)
	return ans, err
}

// turn is a call's reservation: the learnt pace's epoch it was given
// under, and whether the pace held it back.
type turn struct {
	epoch  uint64
	waited bool
}

// waitProbe holds every call but the first until the first is answered
// (headers only): the headers are not known before. It reports whether
// the call is that first one, which must close t.answered once answered.
func (t *tokenLayer) waitProbe(ctx context.Context, row *Row) (probe bool, err error) {
	t.mu.Lock()
	probe = !t.probing
	t.probing = true
	t.mu.Unlock()
	if probe {
		return true, nil
	}
	row.wait(waitTokens)
	select {
	case <-t.answered:
		return false, nil
	case <-ctx.Done():
	case <-row.Stop:
	}
	return false, stopOrCtx(ctx, row.Stop)
}

// reserve takes the call's turn from the buckets and waits for it. A turn
// given by the learnt pace before a cut is taken again at the new rate.
func (t *tokenLayer) reserve(ctx context.Context, row *Row, est float64) (turn, error) {
	now := time.Now()
	t.mu.Lock()
	d := t.tokens.take(est, now)
	if !t.fixed {
		d = max(d, t.requests.take(1, now))
	}
	pd, epoch := t.pace.take(est, now)
	d = max(d, pd)
	tr := turn{epoch: epoch, waited: pd > 0}
	t.inFlight += est
	t.calls++
	t.mu.Unlock()
	row.wait(waitTokens)
	for {
		if !sleep(ctx, row.Stop, d) {
			t.mu.Lock()
			now := time.Now()
			t.tokens.give(est, now)
			if !t.fixed {
				t.requests.give(1, now)
			}
			t.pace.give(est, tr.epoch, now)
			t.inFlight -= est
			t.calls--
			t.mu.Unlock()
			return tr, stopOrCtx(ctx, row.Stop)
		}
		t.mu.Lock()
		if t.pace.epoch == tr.epoch {
			t.mu.Unlock()
			return tr, nil
		}
		d, tr.epoch = t.pace.take(est, time.Now())
		tr.waited = tr.waited || d > 0
		t.mu.Unlock()
	}
}

// learn feeds the learnt pace (headers only) a call's answer: a success
// its tokens, a 429 the headers do not explain a cut (t.mu held).
func (t *tokenLayer) learn(est float64, tr turn, usage provider.Usage, limits provider.Limits, err error, now time.Time) {
	// The turn was the estimate: what the call cost replaces it, as with
	// --tpm (a refusal cost nothing), so that the learnt rate and the
	// accepted tokens it is measured by count the same tokens.
	spent := est
	if usage.Known {
		spent = float64(usage.Total())
	}
	pe, ok := provider.AsError(err)
	if ok && pe.Status >= 400 && pe.Status < 500 {
		spent = 0
	}
	t.pace.give(est-spent, tr.epoch, now)
	// The rate moves on a success (it grows) and on a cut: shown as it is
	// after either, for the summary and /metrics.
	defer func() { t.c.learntTPM.Store(int64(math.Round(t.pace.rate * 60))) }()
	if err == nil {
		t.pace.ok(spent, tr.waited, now)
		return
	}
	if !ok || pe.Status != 429 || pe.Outcome != outcome.UpstreamRateLimited || !roomShown(limits, est) {
		return
	}
	if t.pace.refused(est, tr.epoch, now) {
		t.log.Info("rate limited (HTTP 429) though the rate-limit headers showed room, or there were none: pacing by the rate learnt",
			"tokens_per_s", math.Round(t.pace.rate), "cuts", t.pace.cuts)
	}
}

// roomShown reports whether a 429's headers said there was room for the
// call (or there were none): the server refuses by a limit it does not
// show, which only its refusals can teach.
func roomShown(l provider.Limits, est float64) bool {
	if !l.Known() {
		return true
	}
	if l.Tokens && float64(l.RemainingTokens) < est {
		return false
	}
	return !l.Requests || l.RemainingRequests >= 1
}
