package serve

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/resilience"
)

// Metrics is what /metrics shows, in a registry of its own (one per
// server: two servers in one process, as in tests, never share counts).
type Metrics struct {
	reg     *prometheus.Registry
	handler http.Handler

	requests   *prometheus.CounterVec   // route, code
	duration   *prometheus.HistogramVec // route
	inFlight   prometheus.Gauge
	outcomes   *prometheus.CounterVec // route, outcome
	rejections prometheus.Counter
	calls      *prometheus.HistogramVec // outcome
	// budgetRejections counts requests answered 503 because their body did
	// not fit in --body-budget (never read).
	budgetRejections prometheus.Counter
}

// NewMetrics makes the registry and hooks the provider call histogram into
// counters, which must then be passed to resilience.Build (Observe is read
// there, before any call).
func NewMetrics(counters *resilience.Counters) *Metrics {
	if counters == nil {
		counters = &resilience.Counters{}
	}
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hfsent_http_requests_total",
		Help: "HTTP requests answered, by route and status code.",
	}, []string{"route", "code"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "hfsent_http_request_duration_seconds",
		Help:    "Time from a request's arrival to its answer, by route.",
		Buckets: []float64{.005, .01, .02, .03, .05, .075, .1, .25, .5, 1, 2.5, 5, 10, 15, 30},
	}, []string{"route"})
	m.inFlight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "hfsent_http_requests_in_flight",
		Help: "HTTP requests being handled now.",
	})
	m.outcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hfsent_outcomes_total",
		Help: "Texts answered, by route and outcome code (one per /feedback-sentiment request, one per /v1/classify item).",
	}, []string{"route", "outcome"})
	m.rejections = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hfsent_admission_rejections_total",
		Help: "Texts answered local_capacity: no provider slot within --admission-wait, never sent.",
	})
	m.budgetRejections = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hfsent_body_budget_rejections_total",
		Help: "Requests answered 503 local_capacity before their body was read: it did not fit in --body-budget.",
	})
	m.reg.MustRegister(m.requests, m.duration, m.inFlight, m.outcomes, m.rejections, m.budgetRejections)
	m.watchProvider(counters)
	return m
}

// watchProvider registers what the provider's guard counts (the calls,
// their durations, 429s, tokens, the learnt rate) and the process's own
// (Go runtime, process): what serve and a worker show alike. It hooks the
// call histogram into counters (Observe), which must then be passed to
// resilience.Build.
func (m *Metrics) watchProvider(c *resilience.Counters) {
	m.calls = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "hfsent_provider_call_duration_seconds",
		Help:    "Duration of each call to the primary provider (every attempt), by its outcome.",
		Buckets: []float64{.005, .01, .015, .02, .025, .03, .05, .075, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"outcome"})
	c.Observe = func(d time.Duration, err error) {
		m.calls.WithLabelValues(string(provider.OutcomeOf(err))).Observe(d.Seconds())
	}
	counter := func(name, help string, v func() int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v()) })
	}
	m.reg.MustRegister(m.calls,
		counter("hfsent_provider_calls_total", "Calls sent to the primary provider, retries included (a batch is one call).", c.Calls.Load),
		counter("hfsent_provider_retries_total", "Calls beyond the first of a text or batch.", c.Retries.Load),
		counter("hfsent_provider_rate_limited_total", "HTTP 429 answers from the provider.", c.RateLimited.Load),
		counter("hfsent_provider_timeouts_total", "Attempts with no answer within --timeout.", c.Timeouts.Load),
		counter("hfsent_breaker_openings_total", "Times the circuit breaker opened (outages, not failed probes).", c.BreakerOpenings.Load),
		counter("hfsent_fallback_rows_total", "Texts answered by --fallback-model.", c.FallbackRows.Load),
		counter("hfsent_fallback_calls_total", "Calls sent to --fallback-model.", c.FallbackCalls.Load),
		counter("hfsent_provider_prompt_tokens_total", "Prompt tokens the provider reported (usage of chat calls, failed ones too).", c.PromptTokens.Load),
		counter("hfsent_provider_completion_tokens_total", "Completion tokens the provider reported (usage of chat calls, failed ones too).", c.CompletionTokens.Load),
		learntGauge(c),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
}

// learntGauge shows the token rate the guard learnt from the provider's
// 429s that its rate-limit headers did not explain (0: nothing learnt):
// the rate its calls are paced by, which a provider's dashboard does not
// show.
func learntGauge(c *resilience.Counters) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "hfsent_learnt_tokens_per_minute",
		Help: "Tokens a minute the provider was learnt to allow from its 429s that no rate-limit header explained, which calls are paced by now (0: nothing learnt)."},
		func() float64 { return float64(c.LearntTokensPerMinute()) })
}

// watch registers the gauges that read the server's state.
func (m *Metrics) watch(s *Server) {
	gauge := func(name, help string, v func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, v)
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	m.reg.MustRegister(
		gauge("hfsent_slots_in_use", "Provider calls in flight now (slots held).", func() float64 { return float64(s.p.Slots().InUse()) }),
		gauge("hfsent_slots_limit", "Calls allowed in flight now: --concurrency, or the adaptive limit below it with --adaptive.", func() float64 { return float64(s.p.Slots().Limit()) }),
		gauge("hfsent_slots_max", "--concurrency: the most calls in flight there can be.", func() float64 { return float64(s.p.Slots().Max()) }),
		gauge("hfsent_breaker_open", "1 while the circuit breaker refuses calls (open), else 0.", func() float64 { open, _ := s.breakerOpen(); return b2f(open) }),
		gauge("hfsent_breaker_remaining_seconds", "Time before the open breaker probes the provider again.", func() float64 { _, d := s.breakerOpen(); return d.Seconds() }),
		gauge("hfsent_cooldown_remaining_seconds", "Time every new call still waits after a 429 with Retry-After.", func() float64 { return s.cooldown().Seconds() }),
		gauge("hfsent_body_budget_bytes", "Bytes of --body-budget held now by request bodies being read, decoded and answered.", func() float64 { return float64(s.budget.inUse.Load()) }),
		gauge("hfsent_body_budget_limit_bytes", "--body-budget: the most bytes request bodies may hold at once.", func() float64 { return float64(s.budget.size) }),
		gauge("hfsent_ready", "1 when /readyz answers 200, else 0 (draining, or breaker open without a fallback).", func() float64 { ok, _, _ := s.Ready(); return b2f(ok) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "hfsent_reused_total",
			Help: "Texts answered with an identical text's answer (in flight or recent), without a call."},
			func() float64 { return float64(s.p.Stats().Reused) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "hfsent_cache_hits_total",
			Help: "Texts answered from the response cache (the same request answered before), without a call and without a slot."},
			func() float64 { return float64(s.p.Stats().CacheHits) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "hfsent_cost_usd_total",
			Help: "USD the provider calls cost: their reported usage at --price-in/--price-out or --prices (or the cost the server reported), failed calls' too; 0 without prices."},
			func() float64 { return s.p.Guard().Ledger().Totals().Spent }),
	)
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler { return m.handler }

func (m *Metrics) request(route string, code int, d time.Duration) {
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(route).Observe(d.Seconds())
}

func (m *Metrics) outcome(route string, c outcome.Code) {
	m.outcomes.WithLabelValues(route, string(c)).Inc()
	if c == outcome.LocalCapacity {
		m.rejections.Inc()
	}
}

// FleetShare is what a member of a fleet budget (--budget) holds now, for
// /metrics: its share of the cap, its demand, the budget's pause.
type FleetShare struct {
	Share, Demand, InFlight int
	RPS                     float64
	LeaseHeld               bool
	Paused, Open            time.Duration
	Renewals, Failures      int64
	// Safe is the safe share it falls back to when it cannot renew; OnSafe
	// that it sends on it now.
	Safe   int
	OnSafe bool
}

// WatchBudget registers the gauges of the process's budget share; now is
// asked at each scrape. Call it once, before serving.
func (m *Metrics) WatchBudget(now func() FleetShare) {
	gauge := func(name, help string, v func(FleetShare) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return v(now()) })
	}
	m.reg.MustRegister(
		gauge("hfsent_budget_share", "Calls in flight this member may hold of the fleet budget's cap (--budget), now.", func(f FleetShare) float64 { return float64(f.Share) }),
		gauge("hfsent_budget_demand", "This member's demand reported at its last renewal: the peak of calls in flight plus requests waiting.", func(f FleetShare) float64 { return float64(f.Demand) }),
		gauge("hfsent_budget_rps", "Calls per second this member may send of the budget's rate (0: the budget sets none).", func(f FleetShare) float64 { return f.RPS }),
		gauge("hfsent_budget_lease_held", "1 while this member's lease on its share holds, else 0 (it sends on its safe share, or nothing).", func(f FleetShare) float64 {
			if f.LeaseHeld {
				return 1
			}
			return 0
		}),
		gauge("hfsent_budget_safe_share", "Calls in flight this member may hold once its lease ends without a renewal (its database away), for --budget-safe-for.", func(f FleetShare) float64 { return float64(f.Safe) }),
		gauge("hfsent_budget_on_safe_share", "1 while this member sends on its safe share (its lease ended without a renewal), else 0.", func(f FleetShare) float64 {
			if f.OnSafe {
				return 1
			}
			return 0
		}),
		gauge("hfsent_budget_paused_seconds", "Time left of a pause every member of the budget keeps after a 429 one of them saw.", func(f FleetShare) float64 { return f.Paused.Seconds() }),
		gauge("hfsent_budget_breaker_open_seconds", "Time left of a breaker another member opened for the whole budget.", func(f FleetShare) float64 { return f.Open.Seconds() }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "hfsent_budget_renewals_total", Help: "Renewals of this member's share that went through."},
			func() float64 { return float64(now().Renewals) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "hfsent_budget_renewal_failures_total", Help: "Renewals that failed (database unreachable, budget dropped)."},
			func() float64 { return float64(now().Failures) }),
	)
}
