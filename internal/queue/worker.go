package queue

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/resilience"
	"github.com/hfsent/hfsent/internal/results"
)

// WorkerConfig tunes a worker.
type WorkerConfig struct {
	// Capacity is the most rows the worker holds at once (claimed, not yet
	// written): its -c times --batch-size.
	Capacity int
	// ExitWhenDone ends the run once the batch has nothing pending or
	// running; otherwise the worker waits for new rows.
	ExitWhenDone bool
	// Fallback: the worker has a fallback model, so it claims rows while a
	// shared breaker is open.
	Fallback bool
	// Poll is how long to wait after an empty claim before the next one,
	// unless a notification comes first; default 250ms.
	Poll time.Duration
	// WriteGrace bounds how long results are retried against a database
	// that is down after the worker was told to stop; default 30s.
	WriteGrace time.Duration
	Host       string
	PID        int
	Logger     *slog.Logger
	// Extra says which of the results' extra columns the worker writes:
	// raw_score (--calibration), review (--review-below), stage
	// (--cascade), cached_prompt_tokens (chat) and scores (--top-k,
	// --multi-label).
	Extra results.Extra
}

// WorkerStats is what a worker did.
type WorkerStats struct {
	Claimed   int64 // claims made (a row claimed twice counts twice)
	Swapped   int64 // of them, reservations started in a finished row's place
	Finished  int64 // rows this worker finished (done)
	Review    int64 // of them, marked for review (--review-below)
	OK        int64 // of them success or fallback
	Retried   int64 // rows put back for a later attempt after a failure
	GivenBack int64 // rows put back unstarted (interrupt, stop)
	Discarded int64 // results the fence refused (the lease had passed on)
	Cycles    int64 // round trips to the database (results and claims)
	CycleTime time.Duration
	Counts    map[outcome.Code]int64
	Active    int64 // rows held now
}

// Worker runs one process's share of a batch.
type Worker struct {
	db    store  // its session in the batch
	batch *Batch // the batch, as the worker started
	cfg   WorkerConfig
	log   *slog.Logger

	// Backpressure this process saw, to report to the batch (unix nanos of
	// the local clock; reported as durations, so the clocks need not agree).
	// Raised by the guard's hooks (see Tune) from any goroutine, taken by
	// the loop.
	pauseUntil, openUntil atomic.Int64
	// wake tells the loop to look again: a notification (listen), a rescue
	// or the batch gone (heartbeat), backpressure (Tune's hooks).
	wake chan struct{}
	// renewed is when the last heartbeat that renewed the leases was sent
	// (unix nanos, local clock). Written by the heartbeat, read by the loop.
	renewed atomic.Int64
	// gone: a heartbeat found the batch dropped. Set by the heartbeat, read
	// by the loop.
	gone atomic.Bool

	// mu guards stats (the loop and its round trips write them, Stats reads
	// them) and held (the loop writes it, the heartbeat reads it and
	// extends the leases).
	mu    sync.Mutex
	stats WorkerStats
	// held are the rows claimed or reserved and not yet written, with their
	// leases on this process's monotonic clock (counted from base).
	held map[int64]*rowLease
	base time.Time
}

// NewWorker prepares a worker on session s.
func NewWorker(s *Session, cfg WorkerConfig) *Worker { return newWorker(s, s.batch, cfg) }

// newWorker prepares a worker of batch b on db (a Session, or the loop
// tests' fake).
func newWorker(db store, b *Batch, cfg WorkerConfig) *Worker {
	if cfg.Capacity < 1 {
		cfg.Capacity = 1
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 250 * time.Millisecond
	}
	if cfg.WriteGrace <= 0 {
		cfg.WriteGrace = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Worker{db: db, batch: b, cfg: cfg, log: cfg.Logger, wake: make(chan struct{}, 1),
		stats: WorkerStats{Counts: map[outcome.Code]int64{}}, held: map[int64]*rowLease{}, base: time.Now()}
}

// Tune sets the hooks through which the guarded classifier tells the
// worker of a 429 pause or an open breaker, to share with the batch.
func (w *Worker) Tune(c *resilience.Config) {
	c.OnPause = func(until time.Time) { resilience.RaiseUntil(&w.pauseUntil, until); w.poke() }
	c.OnOpen = func(until time.Time) { resilience.RaiseUntil(&w.openUntil, until); w.poke() }
}

func (w *Worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Stats returns the counts so far.
func (w *Worker) Stats() WorkerStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.stats
	s.Counts = make(map[outcome.Code]int64, len(w.stats.Counts))
	for k, v := range w.stats.Counts {
		s.Counts[k] = v
	}
	return s
}

// Run claims rows, feeds them through p and writes their results until ctx
// ends, the pipeline stops for good (a provider that cannot serve:
// p.StopReason), or, with ExitWhenDone, the batch is done. The loop asks
// p's guard whether calls are held back (a pause, an open breaker) and
// shares the batch's with it. On the way out, calls in flight finish and
// are written, and rows claimed but not started are given back.
func (w *Worker) Run(ctx context.Context, p *engine.Pipeline) error {
	return w.run(ctx, p, p.Guard())
}

// run is Run on the loop's interfaces (the loop's tests give it fakes): the
// heartbeat and the LISTEN connection run beside the loop until it ends.
func (w *Worker) run(ctx context.Context, p pipeline, g guard) error {
	// Everything below keeps going after ctx ends, to write what it has.
	bg := context.WithoutCancel(ctx)
	hbCtx, stopHB := context.WithCancel(bg)
	defer stopHB()
	var hb sync.WaitGroup
	hb.Add(2)
	go func() { defer hb.Done(); w.heartbeat(hbCtx) }()
	go func() { defer hb.Done(); w.listen(hbCtx) }()
	defer hb.Wait()
	defer stopHB()
	return newLoop(w, bg, p, g).run(ctx)
}

// pace follows how long a row takes (claim to result) and a round trip
// takes, to size the reserve; rows and trips count the samples taken.
type pace struct {
	rowMs, tripMs float64
	rows, trips   int
}

// ewma moves avg toward ms, the n-th sample (counted here): by a half for
// the first settle samples, then by an eighth. A worker's first round trips
// open their connections and prepare their statements, and its first calls
// open theirs: several times as long as the later ones. Weighted an eighth
// from the start, a first round trip of 150 ms against rows of 45 ms kept
// the pace saying the calls were as fast as the database, so the reserve
// off, for dozens of round trips: a queue of 20 ms calls ran its first
// second and a half at half its speed (issue 31, item 3).
func ewma(avg *float64, n *int, ms float64) {
	*n++
	switch {
	case *n == 1:
		*avg = ms
	case *n <= settle:
		*avg += (ms - *avg) / 2
	default:
		*avg += (ms - *avg) / 8
	}
}

// settle is how many samples of a pace move it by a half.
const settle = 8

// reserveTarget is how many rows the worker keeps reserved (0 where the
// batch does not reserve, or its calls take less than a round trip): as
// many as its calls end in eight round trips, at least one, at most its
// capacity. A refill asked for may wait for the round trip on its way, and
// round trips vary far more than their mean (a claim waits for the batch
// row behind other workers' claims): with four, in
// bench/queue_vs_classify.sh, 11-12% of a worker's finished rows found its
// reserve empty and waited for a round trip to be replaced, with eight 1-3%
// (issue 31, item 3). With
// calls much slower than the database that is one row, so the tail of a
// batch is not left reserved by a worker whose slots are busy while
// another's are free.
func (w *Worker) reserveTarget(p pace) int {
	if !w.db.Reserves() {
		return 0
	}
	if p.rowMs <= 0 || p.tripMs <= 0 {
		return 1
	}
	if p.rowMs < p.tripMs {
		// Calls faster than the database: the round trips are the
		// bottleneck, and a reservation only adds a write to each row.
		// Not below two round trips, as it was: 20 ms calls whose round
		// trips slowed to 12 ms for a moment (a claim waiting for the batch
		// row behind the other worker's) had their reserve switched off,
		// and every row that finished then waited for a round trip to be
		// replaced (issue 31, item 3).
		return 0
	}
	n := math.Ceil(8 * float64(w.cfg.Capacity) * p.tripMs / p.rowMs)
	return int(min(max(n, 1), float64(w.cfg.Capacity)))
}

// peekBackpressure reports whether this process has backpressure to
// report, without taking it.
func (w *Worker) peekBackpressure() (pause, open time.Duration) {
	now := time.Now().UnixNano()
	if u := w.pauseUntil.Load(); u > now {
		pause = time.Duration(u - now)
	}
	if u := w.openUntil.Load(); u > now {
		open = time.Duration(u - now)
	}
	return pause, open
}

// backpressure takes what this process saw since the last cycle.
func (w *Worker) backpressure() (pause, open time.Duration) {
	now := time.Now().UnixNano()
	if u := w.pauseUntil.Swap(0); u > now {
		pause = time.Duration(u - now)
	}
	if u := w.openUntil.Swap(0); u > now {
		open = time.Duration(u - now)
	}
	return pause, open
}

func (w *Worker) requeueBackpressure(pause, open time.Duration) {
	if pause > 0 {
		resilience.RaiseUntil(&w.pauseUntil, time.Now().Add(pause))
	}
	if open > 0 {
		resilience.RaiseUntil(&w.openUntil, time.Now().Add(open))
	}
}

// columns fills the completion's later columns: the cached part of the
// prompt tokens (a chat model's usage) and the answer's scores (--top-k,
// --multi-label), as classify writes them.
func (w *Worker) columns(r results.Row, c *Completion) {
	if w.cfg.Extra.CachedTokens && r.Tokens {
		v := int32(min(r.CachedPromptTokens, math.MaxInt32))
		c.CachedPromptTokens = &v
	}
	if js := results.JSONScores(r.Scores, w.cfg.Extra.TopK); w.cfg.Extra.Scores && len(js) > 0 {
		// A JSON array of objects of a string and a number or null:
		// it always encodes.
		b, _ := json.Marshal(js)
		s := string(b)
		c.Scores = &s
	}
}

// completion decides what a finished row does to its queue row.
func (w *Worker) completion(f finished) Completion {
	r := f.res
	c := Completion{Seq: f.c.Seq, Attempt: f.c.Attempt, Outcome: string(r.Outcome), Label: r.Label, Score: r.Score,
		Model: r.Model, Attempts: r.Attempts, LatencyMs: r.LatencyMs, Error: r.Error,
		WaitMs: -1, TotalMs: r.FinishedMs - r.QueuedMs}
	if r.Tokens {
		pt, ct := int32(r.PromptTokens), int32(r.CompletionTokens)
		c.PromptTokens, c.CompletionTokens = &pt, &ct
	}
	if r.Costed {
		usd := r.CostUSD
		c.CostUSD = &usd
	}
	c.Cached = r.Cached
	if w.cfg.Extra.RawScore {
		raw := r.RawScore
		if r.Label == "" {
			raw = math.NaN()
		}
		c.RawScore = &raw
	}
	if w.cfg.Extra.Review {
		review := r.Review
		c.Review = &review
	}
	if w.cfg.Extra.Stage && r.Stage > 0 {
		stage := int16(min(r.Stage, 1<<15-1))
		c.Stage = &stage
	}
	w.columns(r, &c)
	if r.StartedMs >= 0 {
		c.WaitMs = max(0, r.StartedMs-r.QueuedMs)
		c.TotalMs = max(c.TotalMs, c.WaitMs)
	} else {
		c.LatencyMs = 0
	}
	switch {
	case r.Outcome == outcome.NotAttempted:
		// Claimed but not sent (an interrupt, a stop), or cut off in
		// flight: not this row's failure. It goes back as it was.
		c.Action = GiveBack
	case r.Outcome.Final() || f.c.Attempt >= w.batch.MaxAttempts:
		c.Action = Finish
	default:
		c.Action = Retry
		c.Delay = max(r.RetryAfter, rowBackoff(f.c.Attempt))
	}
	return c
}

func (w *Worker) account(sent []Completion, out CycleOut) {
	discarded := map[int64]bool{}
	for _, d := range out.Discarded {
		if d.Action == GiveBack {
			// Given back already, in a round trip whose answer was lost.
			continue
		}
		discarded[d.Seq] = true
		w.log.Warn("result discarded: the row's lease passed to another worker (this one stalled or lost the database past its lease)",
			"seq", d.Seq, "attempt", d.Attempt, "outcome", d.Outcome)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stats.Discarded += int64(len(discarded))
	for _, c := range sent {
		delete(w.held, c.Seq)
		if discarded[c.Seq] {
			continue
		}
		switch c.Action {
		case Finish:
			w.stats.Finished++
			if c.Review != nil && *c.Review {
				w.stats.Review++
			}
			w.stats.Counts[outcome.Code(c.Outcome)]++
			if outcome.Code(c.Outcome).OK() {
				w.stats.OK++
			}
		case Retry:
			w.stats.Retried++
		case GiveBack:
			w.stats.GivenBack++
		}
	}
}

// hold records what a round trip sent at at changed in the rows this
// worker holds: the reservations it gave back go, the rows it claimed or
// reserved come, each with a lease of its own from at. It returns how many
// of those it claimed running.
func (w *Worker) hold(released []int64, claimed []Claimed, at time.Time) (running int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, seq := range released {
		delete(w.held, seq)
	}
	for _, cl := range claimed {
		// A new claim (or reservation) is a new lease: one lost before
		// (lapsed) does not carry over.
		l := &rowLease{base: w.base}
		l.extend(at, w.db.Lease())
		w.held[cl.Seq] = l
		if !cl.Reserved {
			running++
		}
	}
	w.stats.Claimed += int64(running)
	return running
}

// leaseOf is the lease of a row this worker holds (nil: it holds none).
func (w *Worker) leaseOf(seq int64) *rowLease {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.held[seq]
}

// renew extends the leases of the rows the database renewed, in a
// heartbeat sent at sent. A row held but not renewed (its lease had
// already expired there: another worker may have its place) keeps the end
// it had, and lapses at it.
func (w *Worker) renew(seqs []int64, sent time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, seq := range seqs {
		if l := w.held[seq]; l != nil {
			l.extend(sent, w.db.Lease())
		}
	}
}

// heldSeqs lists the rows this worker holds.
func (w *Worker) heldSeqs() []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]int64, 0, len(w.held))
	for seq := range w.held {
		out = append(out, seq)
	}
	return out
}

// heartbeat renews the leases every lease/3 and rescues expired ones.
func (w *Worker) heartbeat(ctx context.Context) {
	every := max(w.db.Lease()/3, 10*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		sent := time.Now()
		renewed, rescued, exhausted, err := w.db.Heartbeat(ctx, w.cfg.Host, w.cfg.PID, w.heldSeqs())
		if renewed != nil {
			w.renew(renewed, sent)
		}
		if err == nil {
			w.renewed.Store(sent.UnixNano())
		}
		if errors.Is(err, ErrBatchGone) {
			w.gone.Store(true)
			w.poke()
			return
		}
		switch {
		case err != nil && ctx.Err() == nil:
			w.log.Warn("heartbeat failed; retrying", "err", summarise(err))
		case rescued+exhausted > 0:
			w.log.Info("rescued rows whose lease expired (their worker stopped)", "back_to_pending", rescued, "attempts_used_up", exhausted)
			w.poke()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// listen wakes the worker on a notification for the batch (new rows, rows
// given back or rescued, a shared pause), reconnecting as needed.
func (w *Worker) listen(ctx context.Context) {
	fails := 0
	for ctx.Err() == nil {
		err := w.db.listen(ctx, w.poke)
		if ctx.Err() != nil {
			return
		}
		fails++
		w.log.Debug("LISTEN connection lost; polling meanwhile", "err", summarise(err))
		t := time.NewTimer(backoff(fails))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
