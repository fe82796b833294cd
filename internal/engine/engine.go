// Package engine is the batch pipeline: it reads rows, admits them under a
// concurrency bound, calls the (guarded) classifier, and writes results in
// input order through a bounded reorder window. It knows nothing of flags,
// terminals or files: commands give it a Source, a Sink and a Classifier.
package engine

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"golang.org/x/sync/semaphore"

	"github.com/hfsent/hfsent/internal/dedupe"
	"github.com/hfsent/hfsent/internal/input"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/results"
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

// Config tunes a run. Zero values take the defaults noted.
type Config struct {
	Concurrency   int           // calls in flight at most; default 8
	AdmissionWait time.Duration // 0: a row waits for a slot as long as needed
	RowDeadline   time.Duration // all attempts of one row; default 10m
	MaxDuration   time.Duration // 0: no limit
	Grace         time.Duration // in-flight calls may finish this long after ctx ends; default 10s
	MaxChars      int           // default 5000
	IncludeText   bool
	// Window bounds how many rows may be read but not yet written, so that
	// memory stays flat when one early row is slow; when it is full, reading
	// and admission wait. Default max(256, 16×Concurrency, 2×Concurrency×BatchSize).
	Window int
	// BatchSize is the most texts sent in one call; default 1. A batch holds
	// one concurrency slot.
	BatchSize int
	// BatchWait is how long a batch that is not full waits for more rows
	// before it is sent anyway; default 20ms.
	BatchWait time.Duration
	// Dedupe sends identical texts once and reuses the answer; DedupeSize
	// bounds the answers remembered (default dedupe.DefaultSize).
	Dedupe     bool
	DedupeSize int
	// Progress is called from the writer after each flush; it must be quick.
	Progress func(Progress)
	Logger   *slog.Logger
}

func (c *Config) defaults() {
	if c.Concurrency < 1 {
		c.Concurrency = 8
	}
	if c.RowDeadline <= 0 {
		c.RowDeadline = 10 * time.Minute
	}
	if c.Grace <= 0 {
		c.Grace = 10 * time.Second
	}
	if c.MaxChars <= 0 {
		c.MaxChars = 5000
	}
	if c.BatchSize < 1 {
		c.BatchSize = 1
	}
	if c.BatchWait <= 0 {
		c.BatchWait = 20 * time.Millisecond
	}
	if c.Window <= 0 {
		c.Window = max(256, 16*c.Concurrency, 2*c.Concurrency*c.BatchSize)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Progress is a snapshot of a run.
type Progress struct {
	Read    int64 // rows read so far
	Written int64 // rows finished and written
	OK      int64 // success or fallback
	Failed  int64 // any other outcome
	Active  int64 // rows holding a slot now
	Elapsed time.Duration
}

// StopReason says why a run stopped admitting rows before the input ended.
type StopReason string

const (
	StopNone        StopReason = ""
	StopInterrupted StopReason = "interrupted"
	StopAuth        StopReason = "token rejected"
	StopMaxDuration StopReason = "max-duration reached"
)

// Summary is what a run did.
type Summary struct {
	Rows      int64
	Counts    map[outcome.Code]int64
	Calls     int64 // provider calls sent, retries included (a batch is one call)
	Kept      int64 // rows kept from an earlier run (--resume), not sent
	Reused    int64 // rows answered by an earlier identical text (--dedupe), not sent
	Retries   int64 // calls beyond the first of each row
	MaxActive int64
	Elapsed   time.Duration
	Stop      StopReason
	// InputErr is set when the input could not be parsed past some line;
	// rows before it were processed.
	InputErr error
}

// OK reports whether every row ended success or fallback.
func (s Summary) OK() bool {
	return s.Rows == s.Counts[outcome.Success]+s.Counts[outcome.Fallback] && s.InputErr == nil
}

type run struct {
	cfg   Config
	cls   provider.Classifier
	start time.Time

	slots     *semaphore.Weighted
	admitCtx  context.Context // ends when admission must stop, for any reason
	stopAdmit context.CancelCauseFunc
	callCtx   context.Context // ends only after the grace period
	stopCalls context.CancelFunc

	done chan results.Row

	read, written, ok, failed atomic.Int64
	active, maxActive         atomic.Int64
	calls, retries            atomic.Int64
	kept, reused              atomic.Int64

	cache *dedupe.Cache[answer] // nil without Config.Dedupe

	seed    maphash.Seed
	ids     idSet
	authLog sync.Once

	writeFailed atomic.Bool
	counts      map[outcome.Code]int64 // set by the writer when it ends
}

type errStop struct{ reason StopReason }

func (e errStop) Error() string { return string(e.reason) }

// Run processes every row of src and writes one result per row to sink, in
// input order. Cancelling ctx is a graceful stop: no new row is admitted,
// calls in flight get cfg.Grace to finish, rows read but not started are
// written as not_attempted, and reading stops. The error is non-nil only
// when results could not be written.
func Run(ctx context.Context, src Source, sink Sink, cls provider.Classifier, cfg Config) (Summary, error) {
	cfg.defaults()
	r := &run{
		cfg:   cfg,
		cls:   cls,
		start: time.Now(),
		slots: semaphore.NewWeighted(int64(cfg.Concurrency)),
		done:  make(chan results.Row, cfg.Window),
		seed:  maphash.MakeSeed(),
	}
	if cfg.Dedupe {
		r.cache = dedupe.New[answer](cfg.DedupeSize)
	}
	r.admitCtx, r.stopAdmit = context.WithCancelCause(ctx)
	defer r.stopAdmit(nil)
	r.callCtx, r.stopCalls = context.WithCancel(context.WithoutCancel(ctx))
	defer r.stopCalls()
	// After an interrupt, calls in flight get the grace period, then end.
	stopGrace := context.AfterFunc(ctx, func() {
		t := time.NewTimer(cfg.Grace)
		defer t.Stop()
		select {
		case <-t.C:
			r.stopCalls()
		case <-r.callCtx.Done():
		}
	})
	defer stopGrace()
	if cfg.MaxDuration > 0 {
		t := time.AfterFunc(cfg.MaxDuration, func() { r.stopAdmit(errStop{StopMaxDuration}) })
		defer t.Stop()
	}

	window := make(chan struct{}, cfg.Window)
	writerDone := make(chan error, 1)
	go func() { writerDone <- r.writeInOrder(sink, window) }()

	admitq := make(chan queued, cfg.Window)
	var workers sync.WaitGroup
	admitterDone := make(chan struct{})
	go func() {
		defer close(admitterDone)
		r.admit(admitq, &workers)
	}()

	sum := Summary{Counts: map[outcome.Code]int64{}}
read:
	for {
		select {
		case window <- struct{}{}:
		case <-ctx.Done():
			break read
		}
		if ctx.Err() != nil || r.writeFailed.Load() {
			<-window
			break
		}
		row, prior, err := next(src)
		if errors.Is(err, io.EOF) {
			<-window
			break
		}
		if err != nil {
			<-window
			sum.InputErr = err
			break
		}
		r.read.Add(1)
		q := queued{row: row, at: time.Now()}
		problem := r.validate(row) // also for a kept row: it remembers the id
		if prior != nil {
			r.keep(q, *prior)
			continue
		}
		if problem != "" {
			r.finish(q, results.Row{Outcome: outcome.InvalidInput, Error: problem, StartedMs: -1})
			continue
		}
		admitq <- q
	}
	close(admitq)
	<-admitterDone
	workers.Wait()
	close(r.done)
	writeErr := <-writerDone

	sum.Rows = r.written.Load()
	sum.Calls = r.calls.Load()
	sum.Retries = r.retries.Load()
	sum.Kept = r.kept.Load()
	sum.Reused = r.reused.Load()
	sum.MaxActive = r.maxActive.Load()
	sum.Elapsed = time.Since(r.start)
	if ctx.Err() != nil {
		sum.Stop = StopInterrupted
	} else if es, ok := context.Cause(r.admitCtx).(errStop); ok {
		sum.Stop = es.reason
	}
	for c, n := range r.counts {
		sum.Counts[c] = n
	}
	return sum, writeErr
}

type queued struct {
	row input.Row
	at  time.Time
}

func (r *run) validate(row input.Row) string {
	if row.Problem != "" {
		return row.Problem
	}
	id := strings.TrimSpace(row.ID) // surrounding spaces make the same id
	if id == "" {
		return "missing request id"
	}
	// Ids are remembered as 64-bit hashes (see idSet): 10 to 15 bytes a
	// row rather than the whole id; a false duplicate needs a collision of
	// odds 2^-64.
	if r.ids.add(maphash.String(r.seed, id)) {
		return "duplicate request id"
	}
	if strings.TrimSpace(row.Text) == "" {
		return "blank text"
	}
	if n := utf8.RuneCountInString(row.Text); n > r.cfg.MaxChars {
		return fmt.Sprintf("text has %d characters, over --max-chars %d", n, r.cfg.MaxChars)
	}
	return ""
}

// admit takes rows in order and gives each a slot, or records why not.
// With batching, the rows that follow a row granted a slot ride in the same
// call, up to BatchSize; with dedupe, a row whose text is known or in flight
// takes no slot at all.
func (r *run) admit(admitq <-chan queued, workers *sync.WaitGroup) {
	for q := range admitq {
		it, ok := r.claim(q, workers)
		if !ok {
			continue
		}
		if !r.acquireSlot(q) {
			r.release(it, results.Row{})
			continue
		}
		batch := r.gather(admitq, []item{it}, workers)
		r.dispatch(batch, workers)
	}
}

// acquireSlot waits for a concurrency slot for q, up to --admission-wait from
// when q was read. Without one, q is finished here (local_capacity, or
// not_attempted when admission stopped) and the answer is false.
func (r *run) acquireSlot(q queued) bool {
	actx, cancel := r.admitCtx, context.CancelFunc(func() {})
	if r.cfg.AdmissionWait > 0 {
		actx, cancel = context.WithDeadline(r.admitCtx, q.at.Add(r.cfg.AdmissionWait))
	}
	err := r.slots.Acquire(actx, 1)
	cancel()
	if err == nil {
		return true
	}
	if r.admitCtx.Err() != nil {
		r.finishNotAttempted(q)
	} else {
		r.finish(q, results.Row{Outcome: outcome.LocalCapacity, StartedMs: -1,
			Error: fmt.Sprintf("no free slot within --admission-wait %s", r.cfg.AdmissionWait)})
	}
	return false
}

// dispatch runs one call, holding the slot already acquired for it.
func (r *run) dispatch(batch []item, workers *sync.WaitGroup) {
	n := r.active.Add(1)
	for m := r.maxActive.Load(); n > m && !r.maxActive.CompareAndSwap(m, n); m = r.maxActive.Load() {
	}
	workers.Add(1)
	go func() {
		defer workers.Done()
		res := r.call(batch)
		r.active.Add(-1)
		r.slots.Release(1)
		for i, it := range batch {
			r.finish(it.q, res[i])
			r.release(it, res[i])
		}
	}()
}

func (r *run) finishNotAttempted(q queued) {
	reason := StopInterrupted
	if es, ok := context.Cause(r.admitCtx).(errStop); ok {
		reason = es.reason
	}
	r.finish(q, results.Row{Outcome: outcome.NotAttempted, StartedMs: -1, Error: "not sent: " + string(reason)})
}

func (r *run) classifyError(err error, rowCtx context.Context) (outcome.Code, string) {
	if pe, ok := provider.AsError(err); ok {
		if pe.Status != 0 {
			return pe.Outcome, fmt.Sprintf("HTTP %d: %s", pe.Status, pe.Msg)
		}
		return pe.Outcome, pe.Msg
	}
	switch {
	case r.callCtx.Err() != nil:
		return outcome.NotAttempted, "interrupted before an answer came"
	case errors.Is(rowCtx.Err(), context.DeadlineExceeded):
		return outcome.UpstreamTimeout, fmt.Sprintf("no answer within --row-deadline %s", r.cfg.RowDeadline)
	}
	return outcome.UpstreamFailed, "call failed"
}

func (r *run) ms(t time.Time) int64 { return t.Sub(r.start).Milliseconds() }

func (r *run) sinceStart() time.Duration { return time.Since(r.start) }

// keep hands a row kept from an earlier run to the writer as it is.
func (r *run) keep(q queued, prior results.Row) {
	prior.Seq = q.row.Seq
	r.kept.Add(1)
	if r.cache != nil && prior.Outcome == outcome.Success && prior.Label != "" {
		r.cache.Add(r.cache.Key(q.row.Text), answer{prior.Label, prior.Score, prior.Model})
	}
	r.done <- prior
}

// finish completes a row and hands it to the writer.
func (r *run) finish(q queued, res results.Row) {
	res.Seq = q.row.Seq
	res.RequestID = q.row.ID // exactly as read: results join back to the input
	res.QueuedMs = r.ms(q.at)
	res.FinishedMs = r.ms(time.Now())
	if r.cfg.IncludeText {
		res.Text = q.row.Text
	}
	r.done <- res
}
