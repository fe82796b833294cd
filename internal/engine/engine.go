// Package engine is the path every row takes to its outcome. Pipeline
// admits rows under the calls-in-flight bound, batches and dedupes them,
// calls the guarded classifier and maps every failure to an outcome; it
// serves classify (Run, which streams a CSV through it and writes results in
// input order through a bounded reorder window), serve (one request at a
// time) and the queue worker. It knows nothing of flags, terminals, HTTP or
// files.
package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/hfsent/hfsent/internal/cache"
	"github.com/hfsent/hfsent/internal/input"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/quality"
	"github.com/hfsent/hfsent/internal/resilience"
	"github.com/hfsent/hfsent/internal/results"
	"github.com/hfsent/hfsent/internal/spend"
)

// Source yields input rows in order; io.EOF ends it.
type Source interface {
	Next() (input.Row, error)
}

// PriorSource is a Source some of whose rows already have a final result
// (--resume): such a row is written as it is, without a call. prior is nil
// for a row that must be processed.
type PriorSource interface {
	Source
	NextPrior() (row input.Row, prior *results.Row, err error)
}

// Sink receives finished rows, in input order, from a single goroutine.
type Sink interface {
	Write(rows []results.Row) error
}

// Config tunes a pipeline. Zero values take the defaults noted.
type Config struct {
	AdmissionWait time.Duration // 0: a row waits for a slot as long as needed
	RowDeadline   time.Duration // all attempts and waits of one row; default 10m
	DeadlineFlag  string        // the flag that sets RowDeadline, named when a row passes it; default --row-deadline
	MaxDuration   time.Duration // Run only: stop admitting after this long; 0: no limit
	Grace         time.Duration // in-flight calls may finish this long after admission stops; default 10s
	Rules         Rules         // what makes a row invalid_input
	IncludeText   bool
	// Window bounds how many rows Run may have read but not yet written, so
	// that memory stays flat when one early row is slow; when it is full,
	// reading and admission wait. It is also the admission queue's length.
	// Default max(1024, 16×c, 2×c×BatchSize), c the most calls in flight
	// the guard allows (-c).
	Window int
	// BatchSize is the most texts sent in one call; default 1. A batch is
	// one call: one slot per attempt.
	BatchSize int
	// BatchWait is how long a batch that is not full waits for more rows
	// before it is sent anyway; default 20ms.
	BatchWait time.Duration
	// Dedupe sends identical texts once and reuses the answer; DedupeSize
	// bounds the answers remembered (default dedupe.DefaultSize).
	Dedupe     bool
	DedupeSize int
	// KeepScores: a remembered answer keeps the label scores of the
	// answer it reuses (a stage with --top-k or --multi-label writes them).
	// Off, the dedupe window keeps none: they would be some 5 MiB of a
	// window nothing reads (issue 31's fill at the default flags).
	KeepScores bool
	// FailFast: a row does not wait for an open breaker or a long cooldown,
	// it ends at once with a Retry-After (a server's choice).
	FailFast bool
	// StopOnFatal stops admission when an answer says no other row can
	// succeed (token, credits, model, endpoint, no connection, down): a
	// batch's choice. It also holds a row the endpoint refused before any
	// call succeeded until the endpoint's verdict (Pipeline.awaitVerdict).
	StopOnFatal bool
	// ProviderText writes what the server said of a failure (its reason,
	// summarised, and its request id) into the row's error and the logs: a
	// batch's choice, for its operator. A server keeps them from its
	// callers and its log.
	ProviderText bool
	// ShedStandingQueue: for ShedAfter (or four calls' latency, if
	// longer) after a row got no slot within AdmissionWait, rows wait at
	// most ShedWait for one. A burst still gets the whole wait; a
	// sustained overload, which keeps turning rows away, does not make
	// every admitted row late by it (a server's choice: in arrival order,
	// under overload, every admitted row would have waited nearly
	// AdmissionWait).
	ShedStandingQueue bool
	// ExpectedRows, when known (a file counted before the run), sizes the
	// duplicate-id table once; 0: it grows as rows come.
	ExpectedRows int64
	// Advice, when set, words what to do about a stop the provider caused
	// (a token rejected, no credits, ...), for the command that runs the
	// pipeline: its flags, its way to finish the work. The engine says what
	// happened, and adds it (Summary.StopDetail, and the log).
	Advice func(StopReason) string
	// Cache, when set, answers a row whose request it holds without a
	// call (cached.go), and keeps every answer a stage gave under that
	// stage's request's key (Keys; a cascade's Stage.Keys). Keys nil: no
	// cache.
	Cache *cache.Cache
	Keys  *cache.Keyer
	// Answers, when set, is applied to every row the pipeline finishes,
	// after the cache and dedupe have kept the answer as the model gave
	// it: the label map, the calibration, the review flag. A row kept by
	// --resume was written with them already. (A cascade's: each
	// Stage.Answers.)
	Answers *quality.Answers
	// Stages, when set, is the cascade a row goes through (cascade.go):
	// stage 1 is the guard the pipeline is built with, and Keys and
	// Answers are each stage's own. Empty: one stage, the guard, with
	// Keys and Answers above.
	Stages []Stage
	// KeepText puts the input text in every result row (Row.Text), written
	// only with IncludeText: for a --review-out file.
	KeepText bool
	// Progress is called from Run's writer after each flush; it must be quick.
	Progress func(Progress)
	Logger   *slog.Logger
}

// defaults fills in the zero values; concurrency is the most calls in
// flight the guard allows.
func (c *Config) defaults(concurrency int) {
	if c.RowDeadline <= 0 {
		c.RowDeadline = 10 * time.Minute
	}
	if c.DeadlineFlag == "" {
		c.DeadlineFlag = "--row-deadline"
	}
	if c.Grace <= 0 {
		c.Grace = 10 * time.Second
	}
	if c.Rules.MaxChars <= 0 {
		c.Rules.MaxChars = 5000
	}
	if c.BatchSize < 1 {
		c.BatchSize = 1
	}
	if c.BatchWait <= 0 {
		c.BatchWait = 20 * time.Millisecond
	}
	if c.Window <= 0 {
		// Rows in retry wait here without holding a slot, so the window
		// must hold many round trips of the rows behind a slow one.
		c.Window = max(1024, 16*concurrency, 2*concurrency*c.BatchSize)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Progress is a snapshot of a run.
type Progress struct {
	Read    int64 // rows read so far
	Written int64 // rows finished and written
	OK      int64 // written success or fallback
	Failed  int64 // written with any other outcome
	Active  int64 // calls in flight now
	Elapsed time.Duration
}

// StopReason says why a run stopped admitting rows before the input ended.
type StopReason string

const (
	StopNone        StopReason = ""
	StopInterrupted StopReason = "interrupted"
	StopAuth        StopReason = "token rejected"
	StopQuota       StopReason = "payment required (HTTP 402)"
	StopNotFound    StopReason = "model not found (HTTP 404)"
	StopEndpoint    StopReason = "endpoint refuses every call"
	StopUnreachable StopReason = "provider unreachable"
	StopDown        StopReason = "provider down"
	StopMaxDuration StopReason = "max-duration reached"
	StopWriteError  StopReason = "results could not be written"
	// StopMaxSpend: the spend and the estimates of the calls in flight
	// would have passed --max-spend (the guard's ledger refused a call).
	StopMaxSpend StopReason = "max-spend reached"
)

// Summary is what a run did.
type Summary struct {
	// Rows is every row that got an outcome; Written of them are in the
	// results, Lost could not be written (after a write error). Counts add
	// up to Rows.
	Rows    int64
	Written int64
	Lost    int64
	Counts  map[outcome.Code]int64
	// Provider is what the guard counted of the calls: sent to the
	// provider, retries included (a batch is one call), the retries, the
	// calls sent to the fallback model (never counted as provider calls),
	// and what the policies saw.
	Provider resilience.Stats
	Kept     int64 // rows kept from an earlier run (--resume), not sent
	Reused   int64 // rows answered by an earlier identical text (--dedupe), not sent
	// CacheHits are rows answered from the response cache, not sent.
	CacheHits int64
	// Stages is what each stage of a cascade did (nil for one stage).
	// Provider is stage 1's, with every stage's tokens, and the later
	// stages' calls as its FallbackCalls.
	Stages []StageSummary
	// Cache is what the run did with the response cache (zero without
	// one); Spend what the ledger counted (zero without one).
	Cache     cache.RunStats
	Spend     spend.Totals
	MaxActive int64 // most calls dispatched at once
	Elapsed   time.Duration
	Stop      StopReason
	// StopDetail says why the provider stopped the run (token, credits,
	// model, endpoint, connection, down), and what to do as Config.Advice
	// words it; "" otherwise.
	StopDetail string
	// InputErr is set when the input could not be parsed past some line;
	// rows before it were processed.
	InputErr error
}

// ProviderStop reports whether the provider's answers stopped the run: the
// token, the account, the model, the endpoint, no connection at all, or a
// provider down since the start.
func (r StopReason) ProviderStop() bool {
	switch r {
	case StopAuth, StopQuota, StopNotFound, StopEndpoint, StopUnreachable, StopDown:
		return true
	}
	return false
}

// OK reports whether every row ended success or fallback.
func (s Summary) OK() bool {
	return s.Rows == s.Counts[outcome.Success]+s.Counts[outcome.Fallback] && s.InputErr == nil
}

// run is one classify run: a Source through a Pipeline into a Sink.
type run struct {
	cfg  Config
	p    *Pipeline
	done chan results.Row

	read, written, lost, ok, failed atomic.Int64
	kept                            atomic.Int64

	ids *IDs // the ids read, for duplicates

	writeFailed atomic.Bool
	counts      map[outcome.Code]int64 // set by the writer when it ends
}

// Run processes every row of src and writes one result per row to sink, in
// input order. Cancelling ctx is a graceful stop: no new row is admitted,
// no call not yet sent is sent, calls in flight get cfg.Grace to finish,
// rows read but not started are written as not_attempted, and reading
// stops. --max-duration and a provider that cannot serve any row (token,
// credits, model, connection) stop admission the same way, but reading goes
// on and every row is written. The error is non-nil only when results could
// not be written.
func Run(ctx context.Context, src Source, sink Sink, g *resilience.Guard, cfg Config) (Summary, error) {
	cfg.defaults(g.Slots().Max())
	cfg.StopOnFatal, cfg.ProviderText = true, true
	r := &run{cfg: cfg, done: make(chan results.Row, cfg.Window), ids: NewIDs(cfg.ExpectedRows)}
	r.p = NewPipeline(ctx, g, cfg)
	if cfg.MaxDuration > 0 {
		t := time.AfterFunc(cfg.MaxDuration, func() { r.p.Stop(StopMaxDuration) })
		defer t.Stop()
	}

	window := make(chan struct{}, cfg.Window)
	writerDone := make(chan error, 1)
	go func() { writerDone <- r.writeInOrder(sink, window) }()

	// Reading happens on its own goroutine so that an interrupt is seen
	// while a pipe's writer is idle (a read that blocks cannot be
	// cancelled): the run stops waiting for it.
	rows := make(chan readResult)
	stopReading := make(chan struct{})
	defer close(stopReading)
	go readAll(src, rows, stopReading)

	sum := Summary{Counts: map[outcome.Code]int64{}}
read:
	for {
		select {
		case window <- struct{}{}:
		case <-ctx.Done():
			break read
		}
		var rr readResult
		select {
		case rr = <-rows:
		case <-ctx.Done():
			<-window
			break read
		}
		if ctx.Err() != nil || r.writeFailed.Load() {
			<-window
			break
		}
		if errors.Is(rr.err, io.EOF) {
			<-window
			break
		}
		if rr.err != nil {
			<-window
			sum.InputErr = rr.err
			break
		}
		r.read.Add(1)
		row := rr.row
		problem := r.cfg.Rules.Check(row, r.ids.Seen) // also for a kept row: it remembers the id
		if rr.prior != nil {
			r.keep(row, *rr.prior)
			continue
		}
		j := &Job{Row: row, At: time.Now(), Done: r.finished}
		if problem != "" {
			r.p.Reject(j, problem)
			continue
		}
		r.p.Submit(j)
	}
	r.p.Close()
	close(r.done)
	writeErr := <-writerDone
	r.ids.Release()
	ps := r.p.Summary()

	sum.Provider, sum.Reused, sum.MaxActive, sum.Elapsed = ps.Provider, ps.Reused, ps.MaxActive, ps.Elapsed
	sum.CacheHits, sum.Cache, sum.Spend, sum.Stages = ps.CacheHits, ps.Cache, ps.Spend, ps.Stages
	sum.Stop, sum.StopDetail = ps.Stop, ps.StopDetail
	sum.Written = r.written.Load()
	sum.Lost = r.lost.Load()
	sum.Rows = sum.Written + sum.Lost
	sum.Kept = r.kept.Load()
	if ctx.Err() != nil {
		sum.Stop = StopInterrupted
	}
	for c, n := range r.counts {
		sum.Counts[c] = n
	}
	return sum, writeErr
}

type readResult struct {
	row   input.Row
	prior *results.Row
	err   error
}

// readAll reads src to its end (or its first error) into rows, one row
// ahead of the run at most.
func readAll(src Source, rows chan<- readResult, stop <-chan struct{}) {
	for {
		var rr readResult
		if ps, ok := src.(PriorSource); ok {
			rr.row, rr.prior, rr.err = ps.NextPrior()
		} else {
			rr.row, rr.err = src.Next()
		}
		select {
		case rows <- rr:
		case <-stop:
			return
		}
		if rr.err != nil {
			return
		}
	}
}

// Abandonable reads src one row ahead in a goroutine of its own, so that
// its Next returns ctx's error as soon as ctx ends, even while src is
// blocked on a pipe whose writer is idle (that goroutine is left behind,
// still blocked: the caller is about to stop). The run reads its input the
// same way. Only a plain Source: a PriorSource's rows finished before would
// lose their prior result here (the run reads those itself).
func Abandonable(ctx context.Context, src Source) Source {
	a := &abandonable{ctx: ctx, rows: make(chan readResult)}
	go readAll(src, a.rows, ctx.Done())
	return a
}

type abandonable struct {
	ctx  context.Context
	rows chan readResult
	end  error // the error that ended the input, returned again after it
}

func (a *abandonable) Next() (input.Row, error) {
	if a.end != nil {
		return input.Row{}, a.end
	}
	select {
	case rr := <-a.rows:
		a.end = rr.err
		return rr.row, rr.err
	case <-a.ctx.Done():
		a.end = a.ctx.Err()
		return input.Row{}, a.end
	}
}

// finished hands a row to the writer.
func (r *run) finished(res results.Row) { r.done <- res }

// keep hands a row kept from an earlier run to the writer as it is.
func (r *run) keep(row input.Row, prior results.Row) {
	prior.Seq = row.Seq
	prior.Gold = row.Gold
	if r.cfg.KeepText {
		prior.Text = row.Text
	}
	r.kept.Add(1)
	r.p.Remember(row.Text, prior)
	r.done <- prior
}
