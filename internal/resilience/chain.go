// Package resilience holds the provider policies, each a decorator around a
// provider.Classifier: retries with backoff, a shared cooldown after 429s,
// the calls-in-flight bound (-c, and the adaptive limit below it), a rate
// limit, a circuit breaker, and the wait while the breaker is open (or,
// when a later stage of a cascade answers such rows, none: Escalates).
// Build assembles them in the one order that makes their promises hold:
//
//	row     (retries, waits for the breaker)             once per row
//	  gate  (shared cooldown, then a slot)              per attempt
//	    breaker (permit; a row's failures count once)    per attempt
//	      rate limit (--rps, --burst)                    per attempt
//	        meter (attempts, timings) -> client          per attempt
//
// Every provider goes through a Guard, the embedded model too (Plain: the
// bound on calls in flight and the meter, nothing else). The row's state
// travels explicitly, as failsafe-go passes its Execution: the caller's
// *Row to Classify, then to each layer beside the context, which carries
// only cancellation and deadlines; each attempt's provider.Call says what
// the layers ask of it.
//
// A slot is held for one attempt only: a row waiting for its next attempt
// (backoff, a cooldown, an open breaker) holds none, so -c bounds calls in
// flight, not rows in retry. The rate limiter sits inside the breaker so
// that an attempt the breaker refuses costs no token. The breaker is inside the row loop so that a retry meets an open breaker
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
	"golang.org/x/time/rate"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/spend"
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
	// RateLimitWait, when set (and Retries is not 0), bounds a row's
	// retries after rate limits (429, a busy server) by time rather than
	// by Retries: such a row is asked again, however many calls that
	// takes, until RateLimitWait has passed since its first refusal (or
	// its deadline comes first); Retries counts its other failures. Each
	// wait is what the provider asked for, and at least twice the row's
	// last wait after a refusal in a row (from a few ms to BackoffMax), so
	// that its retries are never spent within milliseconds. 0: rate limits
	// count against Retries like any failure (a server, whose callers
	// wait).
	RateLimitWait time.Duration
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

	// TPM paces the tokens sent (prompt and completion) to at most TPM a
	// minute, TPM/60 a second in bursts of one second's worth: each call
	// reserves the client's estimate first (a provider.TokenEstimator) and
	// is corrected by the usage it reports (tokens.go). 0: none.
	TPM float64
	// PaceByHeaders, without TPM, holds calls back when the server's
	// x-ratelimit-remaining-* headers say the next would be refused,
	// counting the calls in flight against what they say remains.
	PaceByHeaders bool

	// Escalates: a later stage (a --cascade's, or --fallback-model's)
	// answers this provider's rows when they fail: a row does not wait for
	// an open breaker (it ends circuit_open at once, and the caller sends
	// it on), and the provider is never found down (rows are answered
	// meanwhile; OnDown is not called).
	Escalates bool

	// Plain applies no policy but the bound on calls in flight
	// (Concurrency), and records the calls: no retry, breaker, rate limit,
	// pause, fallback or verdict on the endpoint. It is for a provider that
	// cannot fail and recover (the embedded model).
	Plain bool
	// WarmUpOnly asks a row again only while the provider warms up: a
	// loading model (for as long as Retries and the row's deadline allow),
	// or an endpoint that may be starting a replica (once, asking its proxy
	// to hold the call); any other answer is the row's. It is for a
	// preflight (check), which reports that answer rather than retry it.
	WarmUpOnly bool
	// OnRetry, when set, is told of each failure a row is about to wait
	// out before its next call, and for how long (it must be quick).
	OnRetry func(err *provider.Error, wait time.Duration)

	// OnPause, when set, is told when a 429 made this process pause every
	// call, and until when; OnOpen when its breaker opened, and until when
	// it will not probe. Processes that share a provider account (queue
	// workers) pass them on, and apply each other's with PauseUntil and
	// OpenUntil. They must be quick.
	OnPause func(until time.Time)
	OnOpen  func(until time.Time)

	// Shared: the process is a member of a fleet's budget, which bounds its
	// calls in flight and its rate from outside (SetShare, below -c and
	// --rps). No call is granted before the first SetShare, nor once its
	// lease has passed, and a call is sent only while the lease holds.
	Shared bool

	// Ledger, when set, is charged every call's reported usage, and holds
	// each call's estimate against its limit (--max-spend) while it is in
	// flight (spend.go). nil: nothing is charged.
	Ledger *spend.Ledger

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
	if c.Plain {
		c.Retries, c.RPS, c.Adaptive = 0, 0, false
	}
}

// Guard is the guarded classifier: the client wrapped in every policy. It
// is the one path classify, serve, worker and check send their calls by.
type Guard struct {
	client  provider.Classifier
	inner   attempter // gate -> breaker -> rate -> meter -> client
	slots   *Slots
	br      *breaker // nil when Plain
	cool    *cooldown
	limiter *rateLayer // nil without --rps (or Plain); always there when Shared
	run     *runState
	cfg     Config
}

// attempter is one layer an attempt goes through. The row is passed
// explicitly, as failsafe-go's policies pass their Execution; the call says
// what the layers above ask of this attempt (a layer may add to its copy).
type attempter interface {
	attempt(ctx context.Context, r *Row, c provider.Call) (provider.Answer, error)
}

// Build wraps client in the policies of cfg.
func Build(client provider.Classifier, cfg Config) *Guard {
	cfg.defaults()
	g := &Guard{client: client, cfg: cfg, run: &runState{verdict: newVerdict()}}
	g.slots = NewSlots(cfg.Concurrency, cfg.Adaptive, cfg.Counters)
	if cfg.Shared {
		// Nothing is granted before the budget's first share.
		g.slots.SetShare(0, time.Time{})
	}
	m := &meter{client: client, c: cfg.Counters, run: g.run, judge: !cfg.Plain}
	var sent attempter = m
	if cfg.Ledger != nil {
		sent = newSpendLayer(m, cfg.Ledger, client)
	}
	if cfg.Shared {
		// Innermost: the lease is checked again just before the call goes.
		sent = &leased{inner: m, slots: g.slots}
	}
	if cfg.Plain {
		// Nothing to judge of an endpoint, and no pause to share.
		g.run.verdict.decide(serves, nil)
		g.inner = &gate{inner: sent, slots: g.slots}
		return g
	}
	g.cool = &cooldown{slots: g.slots, max: cfg.MaxRetryAfter, log: cfg.Logger, c: cfg.Counters, onPause: cfg.OnPause}
	chain := sent
	var limiter *rateLayer
	if cfg.RPS > 0 || cfg.Shared {
		rps := rate.Limit(cfg.RPS)
		if cfg.RPS <= 0 {
			rps = rate.Inf // until the budget says otherwise (SetShare)
		}
		limiter = newRateLayer(float64(rps), cfg.Burst)
		chain = limiter.wrap(chain)
	}
	if est, ok := client.(provider.TokenEstimator); ok && (cfg.TPM > 0 || cfg.PaceByHeaders) {
		chain = newTokenLayer(chain, est, cfg.TPM, cfg.Logger, cfg.Counters)
	}
	g.limiter = limiter
	g.br = newBreaker(chain, cfg, g.slots, g.run)
	g.inner = &gate{inner: g.br, slots: g.slots, cool: g.cool}
	return g
}

// Model names the primary model.
func (g *Guard) Model() string { return g.client.Model() }

// Client is the model's client: a row's cache key is the request it
// would send.
func (g *Guard) Client() provider.Classifier { return g.client }

// Ledger is what the calls are charged to (nil: none).
func (g *Guard) Ledger() *spend.Ledger { return g.cfg.Ledger }

// CheckText says whether text can be sent to the primary provider at all
// (provider.TextChecker): an invalid_input *provider.Error when it cannot,
// nil when it can or the provider cannot tell.
func (g *Guard) CheckText(text string) error {
	if tc, ok := g.client.(provider.TextChecker); ok {
		return tc.CheckText(text)
	}
	return nil
}

// Slots is the calls-in-flight bound the engine takes a row's first slot
// from (its admission).
func (g *Guard) Slots() *Slots { return g.slots }

// Counters is what the policies saw.
func (g *Guard) Counters() *Counters { return g.cfg.Counters }

// Stats is a copy of the counters; elapsed is the run's wall time, for
// calls/s.
func (g *Guard) Stats(elapsed time.Duration) Stats {
	s := g.cfg.Counters.Snapshot(elapsed)
	s.Policies = !g.cfg.Plain
	return s
}

// HasFallback reports whether rows are answered elsewhere while the
// breaker is open: a later stage takes them (Config.Escalates).
func (g *Guard) HasFallback() bool { return g.cfg.Escalates }

// BreakerOpen reports whether the breaker refuses calls now, and for how
// much longer before it probes (0 when probing).
func (g *Guard) BreakerOpen() (open bool, remaining time.Duration) {
	if g.br == nil {
		return false, 0
	}
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
// call, and the breaker's probes failed too (never with Escalates: a later
// stage answers the rows meanwhile). A batch stops there; a server goes on, and
// its breaker keeps probing. Set it before the first call.
func (g *Guard) OnDown(f func(cause string)) {
	g.run.mu.Lock()
	g.run.onDown = f
	g.run.mu.Unlock()
}

// OnStop sets f to be called with an answer that stops the run (a token
// refused, no credit, no such model, the provider unreachable) the moment
// the call that got it returns, before its slot is given back: a batch
// stops its admission there, so that no row takes the slot and is sent
// after the stop. Set it before the first call.
func (g *Guard) OnStop(f func(*provider.Error)) {
	g.run.mu.Lock()
	g.run.onStop = f
	g.run.mu.Unlock()
}

// Cooldown is how long new calls must still wait after a 429.
func (g *Guard) Cooldown() time.Duration {
	if g.cool == nil {
		return 0
	}
	return max(0, g.cool.remaining())
}

// PauseUntil holds every new call back until t, as a 429 seen here would:
// another process sharing the account saw one. (A Plain guard has no
// account to share: it ignores it.)
func (g *Guard) PauseUntil(t time.Time) {
	if d := time.Until(t); d > 0 && !g.cfg.Plain {
		g.slots.Pause(d)
	}
}

// OpenUntil refuses every call until t, as an open breaker does (rows wait,
// or go on to a later stage): another process sharing the provider saw it
// fail and is probing it. (A Plain guard has no breaker: it ignores it.)
func (g *Guard) OpenUntil(t time.Time) {
	if g.br != nil {
		g.br.openUntil(t)
	}
}

// SetShare is a fleet budget's word for this process (Config.Shared): at
// most n calls in flight (and -c), at most rps calls a second (and --rps;
// rps < 0: the budget sets no rate), until until, past which nothing is
// sent until the next SetShare.
func (g *Guard) SetShare(n int, rps float64, until time.Time) {
	g.slots.SetShare(n, until)
	if g.limiter == nil {
		return
	}
	lim := rate.Inf
	if g.cfg.RPS > 0 {
		lim = rate.Limit(g.cfg.RPS)
	}
	if rps >= 0 && rate.Limit(rps) < lim {
		lim = rate.Limit(rps)
	}
	g.limiter.setLimit(lim)
}

// SetSafe is a fleet budget's safe share for this process: once the lease
// of the last SetShare passes without another, at most n calls in flight
// until until (n <= 0: none), with the rate of that SetShare. It takes
// effect with the next SetShare.
func (g *Guard) SetSafe(n int, until time.Time) { g.slots.SetSafe(n, until) }

// OnSafe reports whether this process sends on its fleet budget's safe
// share now (its lease passed without a renewal).
func (g *Guard) OnSafe() bool { return g.slots.OnSafe() }

// ShareHeld reports whether a fleet budget lets this process send now: no
// budget, or its lease or its safe share holds.
func (g *Guard) ShareHeld() bool {
	_, held := g.slots.Share()
	return held
}

// SetLapse is a fleet budget's word for why this process's share could
// not be renewed: the rows turned away once it lapses say it.
func (g *Guard) SetLapse(why string) { g.slots.SetLapse(why) }

// Demand is what a fleet's budget divides its cap by: the calls in flight
// now, and the most calls in flight plus rows waiting for a slot since the
// last Demand.
func (g *Guard) Demand() (inFlight, peak int) { return g.slots.TakeDemand() }

// Shared reports whether the guard's bounds are set by a fleet's budget.
func (g *Guard) Shared() bool { return g.cfg.Shared }

// closed reports whether calls may go to the primary provider: its breaker
// is closed (a Plain guard has none).
func (g *Guard) closed() bool { return g.br == nil || g.br.closed() }

// decided takes a row that waited for the breaker out of its count.
func (g *Guard) decided(r *Row) {
	if g.br != nil {
		g.br.decided(&r.rowState)
	}
}

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
	waitTokens
	waitCooldown
	waitBreaker
	waitBackoff
	waitLease
	waitCall
)

// Row is one row's (or one batch's) passage through the guard: what the
// caller asks of it, set before Classify, and what the layers learn of it
// as its calls go, read after. It is passed explicitly to Classify and to
// every layer, as failsafe-go passes its Execution; a row's layers run on
// one goroutine, one after the other, so it needs no lock. A Row is for
// one Classify.
type Row struct {
	// Permit is the slot the caller's admission took for the row's first
	// attempt (nil: the first attempt takes its own). The guard takes it
	// (Permit is nil after Classify); the caller should Cancel it after the
	// call anyway, a no-op once it was used.
	Permit *Permit
	// Stop, when closed, sends nothing more (an interrupt, --max-duration):
	// waits for a slot, the rate limit, a cooldown, a backoff or the
	// breaker end there, while calls already sent go on under the context.
	Stop <-chan struct{}
	// FailFast: the row does not wait for an open breaker (it ends
	// circuit_open at once) nor for a cooldown
	// longer than its deadline allows. A server answers such requests at
	// once with a Retry-After instead of holding them.
	FailFast bool
	// WaitForModel: every call asks the API to hold it while a loading
	// model comes up (X-Wait-For-Model), from the first; a loading answer
	// then says the API does not hold calls there, and its estimate is
	// waited before the next call. For a preflight (check), whose one call
	// may wait for the model.
	WaitForModel bool
	// Held, when set, says whether the row may still be sent: asked at the
	// last moment before each of its calls (after every wait: admission,
	// the rate limits, a backoff, the breaker), so that a row whose lease
	// outside the process lapsed meanwhile (a queue's claim, by the
	// process's own monotonic clock) is not sent. The row then ends with
	// ErrLapsed, not sent.
	Held func() bool

	rowState
}

// errLapsed is a row not sent because its lease outside the process lapsed
// (Row.Held).
var errLapsed = errors.New("not sent: the row's lease lapsed before its call")

// IsLapsed reports whether err says a row was not sent because its lease
// lapsed (Row.Held).
func IsLapsed(err error) bool { return errors.Is(err, errLapsed) }

// lapsed reports whether r may no longer be sent (Row.Held).
func (r *Row) lapsed() bool { return r.Held != nil && !r.Held() }

// Attempts is the number of calls sent to the primary provider for the
// row, the verdict's sample text included.
func (r *Row) Attempts() int { return r.sent + r.sampled }

// Usage is the tokens the row's calls cost (to either model), as far as
// the provider reported them.
func (r *Row) Usage() provider.Usage { return r.usage }

// Cost is what the row's calls cost (to either model), as the spend
// ledger priced their reported usage; ok is false when none of them had
// a known cost.
func (r *Row) Cost() (usd float64, ok bool) { return r.cost, r.costed }

// FirstAttempt is when the row's first call (to either model) was sent; ok
// is false if none was. The time it waited before (for the rate limit, the
// adaptive limit, a cooldown) is waiting, not time at the provider.
func (r *Row) FirstAttempt() (at time.Time, ok bool) { return r.first, !r.first.IsZero() }

// rowState is what the layers know about one row's calls.
type rowState struct {
	sent    int       // calls sent to the primary provider by the row's loop
	sampled int       // the verdict's sample texts sent on the row's behalf
	first   time.Time // when its first call (to either model) was sent
	sentAt  time.Time // when the last primary call was sent
	limited int       // calls of it refused for a rate limit
	// limitedSince is when its first rate-limit refusal came back; lastLimit
	// the wait after its last one, while they come one after the other.
	limitedSince time.Time
	lastLimit    time.Duration
	last         error          // the last real provider error
	usage        provider.Usage // tokens reported for its calls
	cost         float64        // USD its calls cost, as the ledger priced them
	costed       bool           // some call of it had a known cost
	failed       bool           // an attempt failed in a way that counts for the breaker
	timedOut     bool           // an attempt timed out
	freshWait    bool           // counted among the breaker's fresh waiters
	counted      bool           // and that failure is already in the breaker's rate
	waiting      waitKind
	// A loading model: later attempts ask the API to hold the call until it
	// is up, and may take that long. waitFromStart: the caller asked so for
	// every call (Row.WaitForModel).
	waitForModel   bool
	waitFromStart  bool
	attemptTimeout time.Duration
	// An endpoint that may be scaled to zero answered 503 before it ever
	// answered: later attempts ask its proxy to hold them (Call.ScaleUp).
	// coldRetried: such a 503, not a loading model's, was asked again.
	scaleUp     bool
	coldRetried bool
	// unlabelled is the chat answer of the row's first call, which named
	// no label: its second call says so (Call.Unlabelled).
	unlabelled *string
}

func (r *rowState) wait(k waitKind) { r.waiting = k }

// call is the provider.Call of the row's next attempt.
func (r *rowState) call(texts []string) provider.Call {
	return provider.Call{Texts: texts, WaitForModel: r.waitForModel, AttemptTimeout: r.attemptTimeout, ScaleUp: r.scaleUp, Unlabelled: r.unlabelled}
}

// meter records every call sent to the primary provider, in the one place
// where attempts and timings are counted (the row's, the counters'),
// remembers the row's last real answer, and notices a provider that cannot
// be reached at all.
type meter struct {
	client provider.Classifier
	c      *Counters
	run    *runState
	// judge: the answers are evidence about the endpoint (the verdict, an
	// unreachable provider); not for a Plain guard's client.
	judge bool
	// answered is set once any call got an HTTP answer; until then,
	// connectFailures counts the calls that could not connect.
	answered        atomic.Bool
	connectFailures atomic.Int32
}

func (m *meter) attempt(ctx context.Context, r *Row, c provider.Call) (provider.Answer, error) {
	if r.lapsed() {
		// Checked here, the last step before the call, after every wait.
		return provider.Answer{}, errLapsed
	}
	r.waiting = waitCall
	if err := ctx.Err(); err != nil {
		// The row ended before its call went: nothing is sent, or counted.
		return provider.Answer{}, err
	}
	start := time.Now()
	r.sent++
	r.sentAt = start
	if r.first.IsZero() {
		r.first = start
	}
	if r.sent > 1 {
		m.c.Retries.Add(1)
	}
	m.c.Calls.Add(1)
	m.c.callStarted()
	m.run.first.CompareAndSwap(0, start.UnixNano())
	var gate *provider.SendGate
	if r.Held != nil {
		// Asked again by the transport as it writes the request: the
		// process may be stopped between the check above and the write.
		gate = provider.NewSendGate(r.Held)
		ctx = provider.WithSendGate(ctx, gate)
	}
	ans, err := m.client.Classify(ctx, c)
	d := time.Since(start)
	m.c.callEnded(d)
	if gate != nil && gate.Refused() {
		m.unsent(r)
		return provider.Answer{}, errLapsed
	}
	if m.c.Observe != nil {
		m.c.Observe(d, err)
	}
	if err == nil {
		m.run.succeeded.Store(true)
	}
	m.c.countUsage(r, ans, err)
	if pe, ok := provider.AsError(err); ok {
		switch pe.Outcome {
		case outcome.UpstreamRateLimited:
			m.c.RateLimited.Add(1)
		case outcome.UpstreamTimeout:
			m.c.Timeouts.Add(1)
		}
	}
	if m.judge {
		err = m.judged(ctx, r, c, err)
	}
	if _, ok := provider.AsError(err); ok {
		r.last = err
		m.run.stopSeen(err)
	}
	return ans, err
}

// judged is err as evidence about the endpoint: the verdict's (a refusal
// of every call, proved with a sample), and whether the provider can be
// reached at all.
func (m *meter) judged(ctx context.Context, r *Row, c provider.Call, err error) error {
	err = m.run.verdict.observe(ctx, c.Texts, err, m.sampler(err, r, c))
	pe, ok := provider.AsError(err)
	switch {
	case !ok:
		if err == nil {
			m.answered.Store(true)
		}
	case pe.Status != 0:
		m.answered.Store(true)
	case pe.Connect && !m.answered.Load() && m.connectFailures.Add(1) >= UnreachableAfter:
		// No call has ever got an answer and every one so far failed to
		// connect: nothing will, so say so rather than retry for the
		// row deadline.
		pe = pe.Clone()
		pe.Unreachable = true
		return pe
	}
	return err
}

// unsent takes back the count of a call the send gate stopped: nothing
// reached the provider.
func (m *meter) unsent(r *Row) {
	if r.sent > 1 {
		m.c.Retries.Add(-1)
	}
	m.c.Calls.Add(-1)
	if r.sent--; r.sent == 0 {
		r.first = time.Time{}
	}
}

// sampler is how the verdict sends its harmless sample text on the row's
// behalf: a call like any other for the row's attempts and the counters,
// with the same hints as the call that prompted it, outside the breaker and
// the limits. Only a refusal (of one text or of a batch) can prompt it
// (nil otherwise: no closure on the way of every call).
func (m *meter) sampler(err error, r *Row, c provider.Call) func(context.Context, []string) (provider.Answer, error) {
	if pe, ok := provider.AsError(err); !ok || pe.Outcome != outcome.UpstreamRequestRejected {
		return nil
	}
	return func(ctx context.Context, texts []string) (provider.Answer, error) {
		if r.lapsed() {
			return provider.Answer{}, errLapsed
		}
		m.c.Calls.Add(1)
		r.sampled++
		sc := c
		sc.Texts = texts
		ans, err := m.client.Classify(ctx, sc)
		if err == nil {
			m.run.succeeded.Store(true)
		}
		return ans, err
	}
}

// UnreachableAfter is how many calls must fail to connect, with none ever
// answered, before the provider is called unreachable.
const UnreachableAfter = 3

// leased holds a call, just before it is sent, until the budget's lease
// holds (Config.Shared): its slot was granted under the lease, but it may
// have waited since (the rate limit, a stopped process).
type leased struct {
	inner attempter
	slots *Slots
}

func (l *leased) attempt(ctx context.Context, r *Row, c provider.Call) (provider.Answer, error) {
	r.wait(waitLease)
	err := l.slots.waitLease(ctx, r.Stop, r.FailFast)
	if errors.Is(err, errNoLease) {
		return provider.Answer{}, lapsedError(l.slots)
	}
	if err != nil {
		return provider.Answer{}, err
	}
	return l.inner.attempt(ctx, r, c)
}

// errNoLease is a row that would wait for the budget's lease to renew but
// may not wait (Row.FailFast).
var errNoLease = errors.New("the budget's lease lapsed")

// lapsedError is a row not sent because the budget's lease lapsed, and
// did not renew before it had to end (at once for a FailFast row, or at its
// deadline): local_capacity, saying why the lease lapsed, and to try again
// in a second (a renewal is due by then).
func lapsedError(s *Slots) error {
	return &provider.Error{Outcome: outcome.LocalCapacity, RetryAfter: time.Second, Msg: s.LapseMessage()}
}
