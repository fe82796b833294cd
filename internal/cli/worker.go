package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hfsent/hfsent/internal/budget"
	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/queue"
	"github.com/hfsent/hfsent/internal/resilience"
	"github.com/hfsent/hfsent/internal/serve"
	"github.com/hfsent/hfsent/internal/stage"
)

type workerOptions struct {
	db           dbOptions
	prov         providerOptions
	eng          engineOptions
	cost         costOptions
	lease        time.Duration
	exitWhenDone bool
	poll         time.Duration
	metricsAddr  string
	prog         progressOptions
	qual         qualityOptions
	configFile   string
	flags        *pflag.FlagSet
}

func newWorkerCmd(ios *IOStreams, g *globalOptions) *cobra.Command {
	o := &workerOptions{}
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Claim a batch's rows from PostgreSQL and classify them: one of many processes sharing it",
		Long: `worker claims rows of a batch pushed with hfsent queue push, sends them
through the same guarded pipeline classify uses (retries, cooldown, breaker,
fallback, a --cascade's stages, --batch-size, dedupe) and writes their
results back. Run as many as
you like, on as many machines: rows running never exceed the batch's
--global-cap, nor its --client-cap for any client, whatever each worker's -c
(which bounds only that worker).

A claimed row is leased for --lease (the batch's, 30s by default) and the
lease is renewed every third of it; a worker killed with -9 loses nothing:
its rows go back to pending when their leases expire and other workers redo
them. A result is written only if the row is still this worker's (a worker
stalled past its lease cannot overwrite a row another one finished). A 429
with Retry-After pauses every worker of the batch; a breaker that opens in
one stops the others (or sends them to their --fallback-model) until its
cooldown ends.

In a batch of one client with no client cap and no rate, a worker also keeps
a few rows reserved (pending, leased to it, counted against no cap) and
starts one the moment a call of its own ends, in that call's place: the
round trip that writes the finished row makes the reserved one running in
the same transaction, so the caps hold and no place waits for the database.

With --metrics-addr HOST:PORT it serves Prometheus metrics at /metrics
while it runs: its provider calls, 429s, tokens and learnt token rate, under
serve's names, and its claims and rows.

SIGINT or SIGTERM: no new claims, calls in flight finish and are written,
rows claimed or reserved but not started are given back, exit 130.

Exit codes: 0 the worker stopped with nothing left to do (--exit-when-done)
and every row it finished is success or fallback; 1 some row it finished
ended otherwise, the provider cannot serve (token, credits, model, no
connection), or the batch was dropped while it ran (queue drop); 2 a usage or set-up error (flags, the database, the batch, its
model), before any call; 130 interrupted.`,
		Example: `  hfsent worker --db postgres://hfsent@db/hfsent --batch nightly -c 8 --exit-when-done
  HFSENT_DB=postgres://hfsent@db/hfsent hfsent worker --batch nightly --endpoint https://my-endpoint/ --fallback-model local`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withConfig(cmd, ios, g, o.configFile, func(log *slog.Logger) error { return runWorker(cmd.Context(), o, ios, log) })
		},
	}
	fs := cmd.Flags()
	o.flags = fs
	addConfigFlag(fs, &o.configFile)
	addDBFlags(fs, &o.db, true)
	addProviderFlags(fs, &o.prov, batchProvider)
	addEngineFlags(fs, &o.eng, batchEngine)
	addCacheFlags(fs, &o.cost)
	addPriceFlags(fs, &o.prov.Config)
	addSpendFlag(fs, &o.cost)
	fs.DurationVar(&o.lease, "lease", 0, "lease of a claimed row, renewed every third of it (default: the batch's, set by queue push --lease; else "+rangeHelp(minLease, maxLease)+")")
	fs.BoolVar(&o.exitWhenDone, "exit-when-done", false, "exit once the batch has nothing pending or running (default: wait for new rows)")
	fs.DurationVar(&o.poll, "poll", 250*time.Millisecond, "wait after a claim that found nothing, unless a notification comes first ("+rangeHelp(10*time.Millisecond, maxPollInterval)+")")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://HOST:PORT/metrics while the worker runs: its provider calls, 429s, tokens, learnt token rate, slots, claims and rows (default: off)")
	addProgressFlags(fs, &o.prog, "line")
	addQualityFlags(fs, &o.qual, serviceQuality, &o.prov.Config)
	return cmd
}

func (o *workerOptions) validate() error {
	if err := o.prov.setup(); err != nil {
		return err
	}
	for _, err := range []error{
		inRange("--lease", o.lease, minLease, maxLease, "the batch's"),
		inRange("--poll", o.poll, 10*time.Millisecond, maxPollInterval, ""),
		o.eng.validate(&o.prov),
		o.prog.validate(),
		o.cost.validate(&o.prov),
		o.qual.validate(false),
	} {
		if err != nil {
			return err
		}
	}
	if o.prov.first().AdmissionWait > 0 {
		return usageErrorf("--admission-wait is for bursts (classify, serve); a worker claims only what it can send, so leave it 0")
	}
	return nil
}

func runWorker(ctx context.Context, o *workerOptions, ios *IOStreams, log *slog.Logger) error {
	if err := o.validate(); err != nil {
		return err
	}
	wm, err := o.listenMetrics()
	if err != nil {
		return err
	}
	defer wm.close()
	db, err := o.db.open(ctx, ios, true, true)
	if err != nil {
		return err
	}
	defer db.Close()
	b, err := db.Batch(ctx, o.db.batch)
	if err != nil {
		return queueError(err)
	}
	first, err := o.matchBatch(b)
	if err != nil {
		return err
	}

	// Checked once the batch gave the worker its model.
	if err := o.prov.prepare(log); err != nil {
		return err
	}
	host, _ := os.Hostname()
	owner := fmt.Sprintf("%s:%d:%s", host, os.Getpid(), randomID())
	s := db.NewSession(b, owner, o.lease)
	w := queue.NewWorker(s, queue.WorkerConfig{
		Capacity:     first.Concurrency * o.eng.batchSize,
		ExitWhenDone: o.exitWhenDone,
		Fallback:     o.prov.cascading(),
		Poll:         o.poll,
		Host:         host,
		PID:          os.Getpid(),
		Logger:       log,
		Extra:        o.qual.extra(&o.prov),
	})
	if err := o.cost.ledger(&o.prov); err != nil {
		return err
	}
	leave, err := o.prov.openStages(ctx, ios, log, &budgets{db: db, kind: budget.KindWorker}, wm.counters(), w.Tune)
	if err != nil {
		return err
	}
	// Run after the loop: calls in flight have ended and been written.
	defer leave(true)
	guard := o.prov.guard()
	wm.serve(guard, o.prov.member(), w, log)
	rc, _, err := o.cost.openCache(ctx, ios, log, &o.prov, db, "")
	if err != nil {
		return err
	}

	ctx, stopSignals := interruptContext(ctx, ios, log, nil)
	defer stopSignals()
	log.Info("worker started", "batch", b.Name, "owner", owner, "lease", s.Lease(), "global_cap", b.GlobalCap, "client_cap", b.ClientCap, "c", first.Concurrency, "stages", len(o.prov.stages))

	cfg := o.eng.config(&o.prov, "worker")
	cfg.Rules = engine.Rules{MaxChars: b.MaxChars}
	cfg.StopOnFatal, cfg.ProviderText = true, true
	cfg.Logger = log
	cfg.Cache, cfg.Stages = rc, o.prov.opened.Engine(rc, o.qual.answers(&o.prov))
	p := engine.NewPipeline(context.Background(), guard, cfg)
	stopBar := showWorker(newCountBar(ios, o.prog.show(ios), -1, "worker"), w)
	runErr := w.Run(ctx, p)
	p.Close()
	closeCache(log, rc)
	stopBar()

	return o.finish(ctx, ios, log, w, p, runErr)
}

// finish prints the worker's summary line, once its loop has ended, and
// says its exit.
func (o *workerOptions) finish(ctx context.Context, ios *IOStreams, log *slog.Logger, w *queue.Worker, p *engine.Pipeline, runErr error) error {
	st := w.Stats()
	sum := p.Summary()
	sum.Rows, sum.Written, sum.Counts = st.Finished, st.Finished, st.Counts
	if ctx.Err() != nil {
		sum.Stop = engine.StopInterrupted
	}
	fmt.Fprintln(ios.ErrOut, workerSummaryLine(sum, st, o.qual.review())+stageKeys(sum, o.prov.file != nil, nil))
	return workerExit(runErr, sum, st, log)
}

// workerMetrics is --metrics-addr: the listener, bound before anything
// else (a busy port is a usage error before the database or any call), the
// counters the first stage's guard reports to, and, once served, how to
// stop. A nil *workerMetrics is --metrics-addr not given: every method is
// a no-op.
type workerMetrics struct {
	ln   net.Listener
	c    *resilience.Counters
	m    *serve.Metrics
	stop func()
}

func (o *workerOptions) listenMetrics() (*workerMetrics, error) {
	if o.metricsAddr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", o.metricsAddr)
	if err != nil {
		return nil, usageErrorf("cannot listen on --metrics-addr %s: %v", o.metricsAddr, unwrapListenError(err))
	}
	c := &resilience.Counters{}
	return &workerMetrics{ln: ln, c: c, m: serve.NewWorkerMetrics(c)}, nil
}

// counters is what the first stage's guard reports to (nil: its own).
func (wm *workerMetrics) counters() *resilience.Counters {
	if wm == nil {
		return nil
	}
	return wm.c
}

// serve starts serving /metrics: g's counters and slots, the budget
// member's share (nil: none) and w's counts.
func (wm *workerMetrics) serve(g *resilience.Guard, member *budget.Member, w *queue.Worker, log *slog.Logger) {
	if wm == nil {
		return
	}
	wm.m.WatchWorker(g, func() serve.WorkerCounts {
		st := w.Stats()
		return serve.WorkerCounts{Claimed: st.Claimed, Finished: st.Finished, OK: st.OK, Requeued: st.Retried,
			GivenBack: st.GivenBack, Discarded: st.Discarded, Active: st.Active}
	})
	if member != nil {
		wm.m.WatchBudget(fleetShare(member))
	}
	log.Info("serving metrics", "addr", wm.ln.Addr().String(), "path", serve.PathMetrics)
	wm.stop = serve.ServeMetrics(wm.ln, wm.m, log)
}

// close stops serving, or closes the listener never served.
func (wm *workerMetrics) close() {
	switch {
	case wm == nil:
	case wm.stop != nil:
		wm.stop()
	default:
		_ = wm.ln.Close()
	}
}

// matchBatch checks the worker's first stage against the batch it joins,
// and gives that stage the batch's model when none was asked for: the batch
// names its model, its kind of provider and its labels, and a worker with
// others would write other answers into the same results.
func (o *workerOptions) matchBatch(b *queue.Batch) (*stage.Config, error) {
	first := o.prov.first()
	// The batch names its model: a worker with another one would write
	// answers of a different model into the same results (a cascade's
	// first stage: the batch's model).
	model := first.Model
	if k, _ := first.Kind(); k.Model != "" {
		model = k.Model
	} else if first.Given == nil || !first.Given("model") {
		model, first.Model = b.Model, b.Model
	}
	if model != b.Model {
		return nil, usageErrorf("batch %q is for model %s, this worker's is %s: start it with --model %s (or --provider local for a batch pushed with --model %s)",
			b.Name, queue.Printable(b.Model), queue.Printable(model), queue.Printable(b.Model), provider.LocalModel)
	}
	// And its kind of model and labels: a chat model's answers, or other
	// labels', would be other answers in the same results.
	if kind := batchKind(first.Provider); kind != b.Provider {
		return nil, usageErrorf("batch %q is for --provider %s, this worker's is %s: start it with --provider %s",
			b.Name, shownProvider(b.Provider), first.Provider, shownProvider(b.Provider))
	}
	if !slices.Equal(first.LabelList(), b.Labels) {
		want := "no --labels"
		if len(b.Labels) > 0 {
			want = "--labels " + queue.Printable(strings.Join(b.Labels, ","))
		}
		return nil, usageErrorf("batch %q is for %s, this worker has %s: start it with %s",
			b.Name, want, labelsShown(first.LabelList()), want)
	}

	return first, nil
}

// showWorker draws the worker's progress on bar (nil: none) from its
// stats, until the returned stop is called.
func showWorker(bar *countBar, w *queue.Worker) (stop func()) {
	if bar == nil {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				st := w.Stats()
				bar.set(st.Finished)
				bar.describe(fmt.Sprintf("ok=%d failed=%d active=%d", st.OK, st.Finished-st.OK, st.Active))
			}
		}
	}()
	return func() {
		close(quit)
		<-done
		bar.finish()
	}
}

// workerExit is the worker's exit: the run's error, an interrupt, a stop,
// or rows that failed.
func workerExit(runErr error, sum engine.Summary, st queue.WorkerStats, log *slog.Logger) error {
	switch {
	case runErr != nil:
		return &exitError{code: ExitRowsFailed, err: runErr}
	case sum.Stop == engine.StopInterrupted:
		log.Warn("interrupted: results of calls in flight are written, rows not started are back in the queue")
		return silentExit(ExitInterrupted)
	case sum.Stop == engine.StopMaxSpend:
		return &exitError{code: ExitRowsFailed, err: errors.New(spendAdvice(sum, "the rows not sent are back in the queue: start the worker again with a higher --max-spend"))}
	case sum.Stop != engine.StopNone:
		return &exitError{code: ExitRowsFailed, err: fmt.Errorf("stopped: %s; the rows not sent are back in the queue", sum.Stop)}
	case st.Finished > st.OK:
		return silentExit(ExitRowsFailed)
	}
	return nil
}

func randomID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func labelsShown(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return "--labels " + queue.Printable(strings.Join(l, ","))
}

// workerSummaryLine is classify's summary line and the worker's own
// counts: its claims and what became of them, and its round trips; with
// --review-below (review), the rows it marked for review.
func workerSummaryLine(sum engine.Summary, st queue.WorkerStats, review bool) string {
	cycleMs := 0.0
	if st.Cycles > 0 {
		cycleMs = float64(st.CycleTime.Microseconds()) / 1000 / float64(st.Cycles)
	}
	line := fmt.Sprintf("%s claimed=%d swapped=%d requeued=%d given_back=%d discarded=%d db_round_trips=%d round_trip_ms=%.1f", summaryLine(sum),
		st.Claimed, st.Swapped, st.Retried, st.GivenBack, st.Discarded, st.Cycles, cycleMs)
	if review {
		line += fmt.Sprintf(" review=%d", st.Review)
	}
	return line
}
