// Package serve is hfsent's HTTP service: the classify pipeline
// (internal/engine) behind a small JSON API, with admission control, one
// deadline per request, Prometheus metrics, an OpenAPI document and a
// graceful drain. A request takes the same path to its outcome as a CSV
// row: the same rules, the same guarded client, the same outcome table.
package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/input"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/resilience"
	"github.com/hfsent/hfsent/internal/results"
)

// Config sets up a server. Zero values take the defaults noted.
type Config struct {
	// Pipeline is the engine's configuration: AdmissionWait, Rules,
	// BatchSize, BatchWait (default 5ms here), Dedupe, DedupeSize,
	// ShedStandingQueue (--shed: serve turns it on), Advice. The server sets the
	// rest: a request never waits for an open breaker or a long cooldown
	// (FailFast), a 401/402/404 answers the request and the server goes
	// on (no StopOnFatal), RowDeadline is RequestTimeout.
	Pipeline engine.Config
	// RequestTimeout bounds one request: admission, every attempt,
	// backoff and cooldown; default 15s.
	RequestTimeout time.Duration
	// Grace is how long requests in flight may finish after a stop;
	// default 10s.
	Grace time.Duration
	// MaxBody bounds a request body in bytes; default 1 MiB.
	MaxBody int64
	// MaxItems bounds the items of one /v1/classify request; default 256.
	MaxItems int
	// BodyBudget bounds the bytes request bodies being read, decoded and
	// answered may hold at once (see bodyCost); default DefaultBodyBudget,
	// and never below what a body of MaxBody needs (MinBodyBudget).
	BodyBudget int64
	// MaxConns bounds the connections open at once; past it a new one is
	// answered 503 at once and closed. Default DefaultMaxConns.
	MaxConns int
	// Version is shown in the OpenAPI document.
	Version string
	// Stage: answers say the stage of the cascade (Pipeline.Stages) that
	// answered them (--cascade).
	Stage bool
	// Extra are the results' extra columns the run fills: answers carry
	// scores with Extra.Scores (the first Extra.TopK of them when set)
	// and cached_prompt_tokens with Extra.CachedTokens. Its other fields
	// are not read here (Stage, Pipeline.Marks say those).
	Extra  results.Extra
	Logger *slog.Logger
}

// Defaults of Config, which serve's flags show as theirs.
const (
	DefaultRequestTimeout = 15 * time.Second
	DefaultGrace          = 10 * time.Second
	DefaultMaxBody        = 1 << 20
	DefaultMaxItems       = 256
	DefaultBatchWait      = 5 * time.Millisecond
	// DefaultMaxConns: each open connection may hold about 128 KiB (64 KiB
	// of headers read slowly), so 1,024 of them hold at most 128 MiB.
	DefaultMaxConns = 1024

	// A request that finds every slot busy waits this long, then is
	// answered 503 at once: callers arrive faster than the model answers,
	// and a queue would only make every answer late.
	DefaultAdmissionWait = 35 * time.Millisecond
	// One retry: it covers a passing failure (a reset connection, one 503,
	// a loading model) within the request's deadline, while more would
	// multiply the load on a provider that is already failing, for callers
	// that have their own retries and are waiting.
	DefaultRetries = 1
)

// Server timeouts. A request's own work is bounded by RequestTimeout; these
// bound the connection around it, so that a slow or silent client cannot
// hold a connection (and its goroutine) for ever.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 30 * time.Second // headers and body
	idleTimeout       = 120 * time.Second
	maxHeaderBytes    = 64 << 10
	// writeSlack is added to readTimeout+RequestTimeout for WriteTimeout,
	// which runs from the end of the headers to the end of the answer.
	writeSlack = 5 * time.Second
	// forcedGrace is how long calls still in flight when Grace is over
	// may go on before they are cancelled and answered not_attempted.
	forcedGrace = 100 * time.Millisecond
)

func (c *Config) defaults() {
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.Grace <= 0 {
		c.Grace = DefaultGrace
	}
	if c.MaxBody <= 0 {
		c.MaxBody = DefaultMaxBody
	}
	if c.MaxItems <= 0 {
		c.MaxItems = DefaultMaxItems
	}
	if c.MaxConns <= 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.BodyBudget <= 0 {
		c.BodyBudget = max(DefaultBodyBudget, MinBodyBudget(c.MaxBody))
	}
	if c.Pipeline.BatchWait <= 0 {
		c.Pipeline.BatchWait = DefaultBatchWait
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Version == "" {
		c.Version = "dev"
	}
}

// Server answers the routes. It is an http.Handler; Run serves it on a
// listener until its context ends, then drains.
type Server struct {
	cfg     Config
	guard   *resilience.Guard
	p       *engine.Pipeline
	m       *Metrics
	log     *slog.Logger
	rules   engine.Rules
	budget  *budget
	routes  map[string]*route
	openapi []byte

	draining atomic.Bool
	// submit guards Submit against Close: a handler still running when
	// the server is forced shut must not submit into a closed pipeline.
	submit    sync.RWMutex
	closed    bool
	closeOnce sync.Once

	// afterSubmit, when set (tests only), runs in the handler once its
	// text is in the pipeline: a panic there is a handler's panic while
	// its call holds a slot.
	afterSubmit func(*http.Request)
}

// New starts the pipeline in front of g, the guarded provider, and returns
// the server. m must be the Metrics whose counters g reports into
// (NewMetrics, then resilience.Build with the same counters).
func New(g *resilience.Guard, m *Metrics, cfg Config) *Server {
	cfg.defaults()
	pc := cfg.Pipeline
	pc.FailFast = true
	pc.StopOnFatal = false
	pc.RowDeadline = cfg.RequestTimeout
	pc.DeadlineFlag = "--request-timeout"
	pc.Grace = forcedGrace
	pc.MaxDuration = 0
	pc.IncludeText = false
	pc.Logger = cfg.Logger
	if m == nil {
		m = NewMetrics(nil)
	}
	s := &Server{cfg: cfg, guard: g, m: m, log: cfg.Logger, budget: newBudget(cfg.BodyBudget)}
	s.p = engine.NewPipeline(context.Background(), g, pc)
	// The engine's defaults (the text limit, the slots), as the pipeline
	// applies them: requests are validated by the rules it uses.
	s.rules = s.p.Config().Rules
	s.routes = s.routeTable()
	s.openapi = s.document()
	m.watch(s)
	return s
}

// Run serves on ln until ctx ends (SIGTERM, SIGINT), then drains: /readyz
// answers 503, the listener closes (new connections are refused), requests
// in flight get up to Grace to be answered; any still running then are
// cancelled and answered not_attempted. It returns nil after a drain, or
// the error that stopped serving.
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      readTimeout + s.cfg.RequestTimeout + writeSlack,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(newListener(ln, s.cfg.MaxConns, s.refused)) }()
	select {
	case err := <-served:
		s.Close()
		return fmt.Errorf("serving on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	s.draining.Store(true)
	s.log.Info("stopping: no new connections; letting requests in flight finish", "grace", s.cfg.Grace)
	drain, cancel := context.WithTimeout(context.Background(), s.cfg.Grace)
	err := srv.Shutdown(drain)
	cancel()
	if err != nil {
		// Grace is over: calls still out are cancelled, requests still
		// waiting are answered not_attempted, and then connections close.
		s.log.Warn("grace period over: cancelling the requests still in flight", "grace", s.cfg.Grace)
		s.p.Stop(engine.StopInterrupted)
		last, cancel := context.WithTimeout(context.Background(), time.Second)
		if srv.Shutdown(last) != nil {
			_ = srv.Close()
		}
		cancel()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.log.Warn("serving ended with an error", "err", err)
	}
	s.Close()
	s.log.Info("stopped")
	return nil
}

// Close stops the pipeline and waits for every text submitted to it. The
// handler answers not_attempted from then on.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.draining.Store(true)
		s.p.Stop(engine.StopInterrupted)
		s.submit.Lock()
		s.closed = true
		s.submit.Unlock()
		s.p.Close()
	})
}

// Ready reports whether the server takes traffic: not draining, and the
// breaker not open (unless a fallback answers meanwhile).
func (s *Server) Ready() (ready bool, reason string, retry time.Duration) {
	if s.draining.Load() {
		return false, "draining", 0
	}
	if !s.guard.HasFallback() {
		if open, rem := s.guard.BreakerOpen(); open {
			return false, string(outcome.CircuitOpen), rem
		}
	}
	if !s.guard.ShareHeld() {
		// A member of a fleet budget with no share to send on: its lease
		// and its safe share passed, or it started without its database
		// and no --budget-safe-share.
		return false, ReasonNoBudgetShare, time.Second
	}
	return true, "", 0
}

// classify sends one text through the pipeline and waits for its result.
func (s *Server) classify(x *exchange, row input.Row) results.Row {
	done := make(chan results.Row, 1)
	if !s.send(x, nil, row, func(r results.Row) { done <- r }) {
		return notSent()
	}
	if s.afterSubmit != nil {
		s.afterSubmit(x.r)
	}
	return <-done
}

// send submits one text, of group (nil: alone); done receives its result
// exactly once (from any goroutine). It reports false, and done is never
// called, when the server is closed.
func (s *Server) send(x *exchange, group *engine.Group, row input.Row, done func(results.Row)) bool {
	s.submit.RLock()
	defer s.submit.RUnlock()
	if s.closed {
		return false
	}
	s.p.Submit(&engine.Job{
		Row:      row,
		At:       x.start,
		Ctx:      x.r.Context(),
		Deadline: x.start.Add(s.cfg.RequestTimeout),
		Done:     done,
		Group:    group,
	})
	return true
}

func notSent() results.Row {
	return results.Row{Outcome: outcome.NotAttempted, StartedMs: -1, Error: "not sent: the server is stopping"}
}

// breakerOpen and cooldown are the guard's, for the metrics and
// Retry-After.

func (s *Server) breakerOpen() (bool, time.Duration) { return s.guard.BreakerOpen() }

func (s *Server) cooldown() time.Duration { return s.guard.Cooldown() }
