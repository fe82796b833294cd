// Package resilience holds the provider policies, each a decorator around a
// provider.Classifier: retries with backoff, a shared cooldown after 429s,
// the calls-in-flight bound (-c, and the adaptive limit below it), a rate
// limit, a circuit breaker, and the fallback (or the wait) while the breaker
// is open. Build assembles them in the one order that makes their promises
// hold:
//
//	row     (retries, fallback, waits for the breaker)  once per row
//	  gate  (shared cooldown, then a slot)              per attempt
//	    breaker (permit; a row's failures count once)    per attempt
//	      rate limit (--rps, --burst)                    per attempt
//	        meter (counters) -> client                   per attempt
//
// A slot is held for one attempt only: a row waiting for its next attempt
// (backoff, a cooldown, an open breaker) holds none, so -c bounds calls in
// flight, not rows in retry. The rate limiter sits inside the breaker so
// that an attempt the breaker refuses costs no token, and the fallback goes
// through the same limiter, so fallback rows are paced like provider calls.
// The breaker is inside the row loop so that a retry meets an open breaker
// and waits there (no retry is sent into an open breaker). All of them share
// one view of an outage: the breaker's state.
package resilience

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// Config sets the policies. Zero values take the defaults noted.
type Config struct {
	// Retries is the number of retries after a failure that may recover: a
	// row is sent at most Retries+1 times, whatever it waits for between.
	Retries int
	// BackoffBase and BackoffMax bound the exponential backoff: retry n
	// waits a random time between half and all of min(max, base×2^(n-1)),
	// counted from when the failed attempt was sent; defaults 250ms and 30s.
	BackoffBase, BackoffMax time.Duration
	// MaxRetryAfter caps how long a Retry-After, the RateLimit header's
	// reset or a loading model's estimated_time is honoured, by a row and by
	// the pause every call shares after a 429; default 10m (the default row
	// deadline). A row's deadline bounds its own waits anyway: a wait that
	// would end past it is not waited.
	MaxRetryAfter time.Duration
	// Timeout is the per-attempt timeout the client applies (for the
	// longer attempt that waits for a loading model); default 12s.
	Timeout time.Duration

	// RPS limits calls per second (0: none); Burst allows that many at once.
	RPS   float64
	Burst int

	// Concurrency is -c, the most calls in flight; default 8. Adaptive
	// turns on the AIMD limit between 1 and Concurrency.
	Concurrency int
	Adaptive    bool

	// The breaker opens when at least BreakerMinCalls calls in the last
	// BreakerWindow failed at a rate >= BreakerThreshold, stays open for
	// BreakerCooldown, then lets BreakerProbes calls through (default 3)
	// and closes when all but one of them (at least one) succeed.
	BreakerThreshold float64
	BreakerWindow    time.Duration
	BreakerMinCalls  int
	BreakerCooldown  time.Duration
	BreakerProbes    int

	// Fallback answers rows while the breaker is open; nil means rows wait.
	Fallback provider.Classifier

	// OnPause, when set, is told when a 429 made this process pause every
	// call, and until when; OnOpen when its breaker opened, and until when
	// it will not probe. Processes that share a provider account (queue
	// workers) pass them on, and apply each other's with PauseUntil and
	// OpenUntil. They must be quick.
	OnPause func(until time.Time)
	OnOpen  func(until time.Time)

	Logger   *slog.Logger
	Counters *Counters
}

func (c *Config) defaults() {
	if c.BackoffBase <= 0 {
		c.BackoffBase = 250 * time.Millisecond
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = 30 * time.Second
	}
	if c.MaxRetryAfter <= 0 {
		c.MaxRetryAfter = 10 * time.Minute
	}
	if c.Timeout <= 0 {
		c.Timeout = 12 * time.Second
	}
	if c.Burst < 1 {
		c.Burst = 1
	}
	if c.Concurrency < 1 {
		c.Concurrency = 8
	}
	if c.BreakerThreshold <= 0 || c.BreakerThreshold > 1 {
		c.BreakerThreshold = 0.3
	}
	if c.BreakerWindow <= 0 {
		c.BreakerWindow = 60 * time.Second
	}
	if c.BreakerMinCalls < 1 {
		c.BreakerMinCalls = 20
	}
	if c.BreakerCooldown <= 0 {
		c.BreakerCooldown = 60 * time.Second
	}
	if c.BreakerProbes < 1 {
		c.BreakerProbes = 3
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Counters == nil {
		c.Counters = &Counters{}
	}
}

// Guard is the guarded classifier: the client wrapped in every policy. It
// is the one classifier classify, serve and worker call.
type Guard struct {
	inner    provider.Classifier // gate -> breaker -> rate -> meter -> client
	fallback provider.Classifier // gate -> rate -> fallback meter -> fallback; nil: rows wait
	slots    *Slots
	br       *breaker
	cool     *cooldown
	run      *runState
	cfg      Config
}

// Build wraps client in the policies of cfg.
func Build(client provider.Classifier, cfg Config) *Guard {
	cfg.defaults()
	g := &Guard{cfg: cfg, run: &runState{verdict: newVerdict()}}
	g.slots = NewSlots(cfg.Concurrency, cfg.Adaptive, cfg.Counters)
	g.cool = &cooldown{slots: g.slots, max: cfg.MaxRetryAfter, log: cfg.Logger, c: cfg.Counters, onPause: cfg.OnPause}
	var chain provider.Classifier = &meter{inner: client, c: cfg.Counters, run: g.run}
	var limiter *rateLayer
	if cfg.RPS > 0 {
		limiter = newRateLayer(cfg.RPS, cfg.Burst)
		chain = limiter.wrap(chain)
	}
	g.br = newBreaker(chain, cfg, g.slots, g.run)
	g.inner = &gate{inner: g.br, slots: g.slots, cool: g.cool}
	if cfg.Fallback != nil {
		var fb provider.Classifier = &fallbackMeter{inner: cfg.Fallback, c: cfg.Counters}
		if limiter != nil {
			fb = limiter.wrap(fb)
		}
		g.fallback = &gate{inner: fb, slots: g.slots}
	}
	return g
}

// Model names the primary model.
func (g *Guard) Model() string { return g.br.Model() }

// Slots is the calls-in-flight bound the engine takes a row's first slot
// from (its admission).
func (g *Guard) Slots() *Slots { return g.slots }

// Counters is what the policies saw.
func (g *Guard) Counters() *Counters { return g.cfg.Counters }

// HasFallback reports whether rows are answered by a fallback model while
// the breaker is open.
func (g *Guard) HasFallback() bool { return g.fallback != nil }

// BreakerOpen reports whether the breaker refuses calls now, and for how
// much longer before it probes (0 when probing).
func (g *Guard) BreakerOpen() (open bool, remaining time.Duration) {
	if ext := g.br.external(); ext > 0 {
		return true, max(ext, g.br.cb.RemainingDelay())
	}
	if g.br.cb.IsClosed() {
		return false, 0
	}
	return true, g.br.cb.RemainingDelay()
}

// Verdict is what the first answers of the run say of the endpoint: whether
// it refuses every call.
func (g *Guard) Verdict() *Verdict { return g.run.verdict }

// DownCause names the most common failure when the provider has failed
// every call since the start, the breaker's probes included; "" otherwise.
func (g *Guard) DownCause() string { return g.run.DownCause() }

// OnDown sets f to be called, once, when the provider is found down: it
// has failed every call for a whole breaker window since the run's first
// call, and the breaker's probes failed too (never with a fallback, whose
// rows are answered meanwhile). A batch stops there; a server goes on, and
// its breaker keeps probing. Set it before the first call.
func (g *Guard) OnDown(f func(cause string)) {
	g.run.mu.Lock()
	g.run.onDown = f
	g.run.mu.Unlock()
}

// Cooldown is how long new calls must still wait after a 429.
func (g *Guard) Cooldown() time.Duration { return max(0, g.cool.remaining()) }

// PauseUntil holds every new call back until t, as a 429 seen here would:
// another process sharing the account saw one.
func (g *Guard) PauseUntil(t time.Time) {
	if d := time.Until(t); d > 0 {
		g.slots.Pause(d)
	}
}

// OpenUntil refuses every call until t, as an open breaker does (rows wait,
// or the fallback answers): another process sharing the provider saw it
// fail and is probing it.
func (g *Guard) OpenUntil(t time.Time) { g.br.openUntil(t) }

// errOpen is what an attempt gets when the breaker refuses it. It is a
// provider error (circuit_open), so that if it escapes the row is recorded
// right, and it unwraps to circuitbreaker.ErrOpen.
func errOpen() error {
	return &provider.Error{Outcome: outcome.CircuitOpen, Msg: "circuit breaker open", Err: circuitbreaker.ErrOpen}
}

func isOpen(err error) bool { return errors.Is(err, circuitbreaker.ErrOpen) }

// isCtxErr reports whether err is the context ending rather than a provider
// answer (an attempt's own timeout is a provider error that wraps one).
func isCtxErr(err error) bool {
	if _, ok := provider.AsError(err); ok {
		return false
	}
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// sleep waits d, or until ctx ends or stop is closed; it reports whether the
// wait was complete.
func sleep(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil && !closed(stop)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// waitKind is what a row is waiting for, so that a row whose deadline
// passes before it was ever sent is recorded for what held it.
type waitKind uint8

const (
	waitNone waitKind = iota
	waitSlot
	waitRate
	waitCooldown
	waitBreaker
	waitBackoff
	waitCall
)

// rowState is what the layers know about one row's calls. A row's layers
// run on one goroutine, one after the other, so it needs no lock.
type rowState struct {
	sent      int       // calls sent to the primary provider
	sentAt    time.Time // when the last one was sent
	last      error     // the last real provider error
	failed    bool      // an attempt failed in a way that counts for the breaker
	timedOut  bool      // an attempt timed out
	freshWait bool      // counted among the breaker's fresh waiters
	counted   bool      // and that failure is already in the breaker's rate
	waiting   waitKind
	// handoff is the slot the engine's admission took for the first attempt.
	handoff *Permit
	// A loading model: later attempts ask the API to hold the call until it
	// is up, and may take that long.
	waitForModel   bool
	attemptTimeout time.Duration
	// An endpoint that may be scaled to zero answered 503 before it ever
	// answered: later attempts ask its proxy to hold them (WithScaleUp).
	scaleUp bool
}

func (r *rowState) wait(k waitKind) {
	if r != nil {
		r.waiting = k
	}
}

type rowKey struct{}

func withRow(ctx context.Context, s *rowState) context.Context {
	return context.WithValue(ctx, rowKey{}, s)
}

func rowFrom(ctx context.Context) *rowState {
	s, _ := ctx.Value(rowKey{}).(*rowState)
	return s
}

type permitKey struct{}

// handoff carries the admission's slot to the first attempt that takes it.
type handoff struct{ p atomic.Pointer[Permit] }

// WithPermit hands the slot the caller's admission took to the first
// attempt sent under ctx (later ones take their own). The caller must
// Cancel it after the call: a no-op once used.
func WithPermit(ctx context.Context, p *Permit) context.Context {
	h := &handoff{}
	h.p.Store(p)
	return context.WithValue(ctx, permitKey{}, h)
}

func takePermit(ctx context.Context) *Permit {
	if h, ok := ctx.Value(permitKey{}).(*handoff); ok {
		return h.p.Swap(nil)
	}
	return nil
}

type stopKey struct{}

// WithStop returns a context in which no call is sent after stop is closed
// (an interrupt, --max-duration): waits for a slot, the rate limit, a
// cooldown, a backoff or the breaker end there, while calls already sent
// go on under ctx.
func WithStop(ctx context.Context, stop <-chan struct{}) context.Context {
	return context.WithValue(ctx, stopKey{}, stop)
}

func stopFrom(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(stopKey{}).(<-chan struct{})
	return ch
}

type failFastKey struct{}

// WithFailFast returns a context in which a row does not wait for an open
// breaker (it ends circuit_open at once, unless a fallback answers) nor for
// a cooldown longer than its deadline allows: a server answers such
// requests at once with a Retry-After instead of holding them.
func WithFailFast(ctx context.Context) context.Context {
	return context.WithValue(ctx, failFastKey{}, true)
}

func failFast(ctx context.Context) bool {
	v, _ := ctx.Value(failFastKey{}).(bool)
	return v
}

// meter counts every call sent to the primary provider, remembers the row's
// last real answer, and notices a provider that cannot be reached at all.
type meter struct {
	inner provider.Classifier
	c     *Counters
	run   *runState
	// answered is set once any call got an HTTP answer; until then,
	// connectFailures counts the calls that could not connect.
	answered        atomic.Bool
	connectFailures atomic.Int32
}

func (m *meter) Model() string { return m.inner.Model() }

func (m *meter) Classify(ctx context.Context, texts []string) (provider.Answer, error) {
	row := rowFrom(ctx)
	if row != nil {
		row.sent++
		row.sentAt = time.Now()
		row.waiting = waitCall
		if row.sent > 1 {
			m.c.Retries.Add(1)
		}
	}
	m.c.Calls.Add(1)
	m.c.callStarted()
	start := time.Now()
	m.run.first.CompareAndSwap(0, start.UnixNano())
	ans, err := m.inner.Classify(ctx, texts)
	d := time.Since(start)
	m.c.callEnded(d)
	if m.c.Observe != nil {
		m.c.Observe(d, err)
	}
	if err == nil {
		m.run.succeeded.Store(true)
	}
	err = m.run.verdict.observe(ctx, texts, err, m.sample)
	pe, ok := provider.AsError(err)
	if !ok {
		if err == nil {
			m.answered.Store(true)
		}
		return ans, err
	}
	switch pe.Outcome {
	case outcome.UpstreamRateLimited:
		m.c.RateLimited.Add(1)
	case outcome.UpstreamTimeout:
		m.c.Timeouts.Add(1)
	}
	if pe.Status != 0 {
		m.answered.Store(true)
	} else if pe.Connect && !m.answered.Load() && m.connectFailures.Add(1) >= UnreachableAfter {
		// No call has ever got an answer and every one so far failed to
		// connect: nothing will, so say so rather than retry for the
		// row deadline.
		pe = pe.Clone()
		pe.Unreachable = true
		err = pe
	}
	if row != nil {
		row.last = err
	}
	return ans, err
}

// sample sends the verdict's harmless sample text: a call like any other
// for the counters, outside the breaker and the limits.
func (m *meter) sample(ctx context.Context, texts []string) (provider.Answer, error) {
	m.c.Calls.Add(1)
	ans, err := m.inner.Classify(ctx, texts)
	if err == nil {
		m.run.succeeded.Store(true)
	}
	return ans, err
}

// UnreachableAfter is how many calls must fail to connect, with none ever
// answered, before the provider is called unreachable.
const UnreachableAfter = 3

// fallbackMeter counts the fallback model's calls apart from the primary's.
type fallbackMeter struct {
	inner provider.Classifier
	c     *Counters
}

func (m *fallbackMeter) Model() string { return m.inner.Model() }

func (m *fallbackMeter) Classify(ctx context.Context, texts []string) (provider.Answer, error) {
	m.c.FallbackCalls.Add(1)
	// The fallback's calls are not the primary's attempts: it counts into
	// the trace's fallback count.
	if tr := provider.TraceFrom(ctx); tr != nil {
		ctx = provider.WithTrace(ctx, tr.Fallback())
	}
	return m.inner.Classify(ctx, texts)
}
