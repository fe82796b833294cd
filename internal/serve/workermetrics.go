package serve

import (
	"errors"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hfsent/hfsent/internal/resilience"
)

// WorkerCounts is what a queue worker has done, for its /metrics: its
// claims and what became of the rows, and the rows it holds now.
type WorkerCounts struct {
	Claimed, Finished, OK, Requeued, GivenBack, Discarded, Active int64
}

// NewWorkerMetrics is a queue worker's /metrics (hfsent worker
// --metrics-addr): what its provider's guard counts, under serve's names,
// without the HTTP series (a worker answers no requests). It hooks the call
// histogram into counters, which must then be passed to resilience.Build.
func NewWorkerMetrics(counters *resilience.Counters) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	m.watchProvider(counters)
	return m
}

// WatchWorker registers the worker's gauges and counters: g's slots,
// breaker and pause, and now's counts, asked at each scrape. Call it once,
// before serving.
func (m *Metrics) WatchWorker(g *resilience.Guard, now func() WorkerCounts) {
	gauge := func(name, help string, v func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, v)
	}
	counter := func(name, help string, v func(WorkerCounts) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v(now())) })
	}
	m.reg.MustRegister(
		gauge("hfsent_slots_in_use", "Provider calls in flight now (slots held).", func() float64 { return float64(g.Slots().InUse()) }),
		gauge("hfsent_slots_limit", "Calls allowed in flight now: --concurrency, or the adaptive limit below it with --adaptive.", func() float64 { return float64(g.Slots().Limit()) }),
		gauge("hfsent_slots_max", "--concurrency: the most calls in flight there can be.", func() float64 { return float64(g.Slots().Max()) }),
		gauge("hfsent_breaker_open", "1 while the circuit breaker refuses calls (open), else 0.", func() float64 {
			if open, _ := g.BreakerOpen(); open {
				return 1
			}
			return 0
		}),
		gauge("hfsent_cooldown_remaining_seconds", "Time every new call still waits after a 429 with Retry-After.", func() float64 { return g.Cooldown().Seconds() }),
		gauge("hfsent_worker_rows_active", "Rows this worker holds now (claimed or reserved, not finished).", func() float64 { return float64(now().Active) }),
		counter("hfsent_worker_claims_total", "Rows this worker claimed (a row claimed twice counts twice).", func(c WorkerCounts) int64 { return c.Claimed }),
		counter("hfsent_worker_rows_finished_total", "Rows this worker finished and wrote.", func(c WorkerCounts) int64 { return c.Finished }),
		counter("hfsent_worker_rows_ok_total", "Rows this worker finished with success or fallback.", func(c WorkerCounts) int64 { return c.OK }),
		counter("hfsent_worker_rows_requeued_total", "Rows put back for a later attempt after a failure.", func(c WorkerCounts) int64 { return c.Requeued }),
		counter("hfsent_worker_rows_given_back_total", "Rows put back unstarted (interrupt, stop, a lapsed lease).", func(c WorkerCounts) int64 { return c.GivenBack }),
		counter("hfsent_worker_results_discarded_total", "Results not written: the row's lease had passed to another worker.", func(c WorkerCounts) int64 { return c.Discarded }),
	)
}

// ServeMetrics serves m at /metrics on ln until stop is called, which
// closes the listener and the connections and waits for the server to end.
// It is a worker's: a scrape is short, and nothing is to drain.
func ServeMetrics(ln net.Listener, m *Metrics, log *slog.Logger) (stop func()) {
	mux := http.NewServeMux()
	mux.Handle("GET "+PathMetrics, m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: readTimeout,
		WriteTimeout: readTimeout, IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeaderBytes,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("--metrics-addr stopped serving", "addr", ln.Addr().String(), "err", err)
		}
	}()
	return func() {
		_ = srv.Close()
		<-done
	}
}
