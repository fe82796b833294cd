package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/input"
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
}

// WorkerStats is what a worker did.
type WorkerStats struct {
	Claimed   int64 // claims made (a row claimed twice counts twice)
	Swapped   int64 // of them, reservations started in a finished row's place
	Finished  int64 // rows this worker finished (done)
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
	s   *Session
	cfg WorkerConfig
	log *slog.Logger

	// Backpressure this process saw, to report to the batch (unix nanos of
	// the local clock; reported as durations, so the clocks need not agree).
	pauseUntil, openUntil atomic.Int64
	wake                  chan struct{}
	// renewed is when the last heartbeat that renewed the leases was sent
	// (unix nanos, local clock).
	renewed atomic.Int64
	// gone: a heartbeat found the batch dropped.
	gone atomic.Bool

	mu    sync.Mutex
	stats WorkerStats
	held  map[int64]struct{} // seqs claimed or reserved and not yet written, for the heartbeat
}

// NewWorker prepares a worker on session s.
func NewWorker(s *Session, cfg WorkerConfig) *Worker {
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
	return &Worker{s: s, cfg: cfg, log: cfg.Logger, wake: make(chan struct{}, 1),
		stats: WorkerStats{Counts: map[outcome.Code]int64{}}, held: map[int64]struct{}{}}
}

// Tune sets the hooks through which the guarded classifier tells the
// worker of a 429 pause or an open breaker, to share with the batch.
func (w *Worker) Tune(c *resilience.Config) {
	c.OnPause = func(until time.Time) { raise(&w.pauseUntil, until); w.poke() }
	c.OnOpen = func(until time.Time) { raise(&w.openUntil, until); w.poke() }
}

func raise(a *atomic.Int64, t time.Time) {
	n := t.UnixNano()
	for {
		cur := a.Load()
		if cur >= n || a.CompareAndSwap(cur, n) {
			return
		}
	}
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

type finished struct {
	c   Claimed
	res results.Row
}

// maxCycles is how many round trips a worker keeps in flight at once: a
// row that finishes while one is on its way goes in the next at once,
// rather than wait for it to come back.
const maxCycles = 1

// cycleDone is a round trip that came back.
type cycleDone struct {
	in   CycleIn
	out  CycleOut
	err  error
	took time.Duration
}

// Run claims rows, feeds them through p (whose classifier is g, or nil when
// it is not a guarded one) and writes their results until ctx ends, the
// pipeline stops for good (a provider that cannot serve: p.StopReason), or,
// with ExitWhenDone, the batch is done. On the way out, calls in flight
// finish and are written, and rows claimed but not started are given back.
func (w *Worker) Run(ctx context.Context, p *engine.Pipeline, g *resilience.Guard) error {
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

	done := make(chan finished, 2*w.cfg.Capacity)
	cycles := make(chan cycleDone, maxCycles)
	var (
		held         int // rows claimed and not yet written
		pending      []Completion
		inflight     int // round trips on their way
		inflightDone int // results they carry
		inflightWant int // rows they may claim
		stopped      bool
		stopAt       time.Time
		failStreak   int
		nextTry      time.Time // after a failed round trip
		emptyWait    bool      // the last claim found nothing: wait to poll
		reconcile    bool      // a claim's answer was lost: give back what it took
		fatal        error

		// Reservations (batches that reserve, see Session.Reserves): rows
		// leased to this worker but still pending, started the moment a
		// call of its own ends, in that call's place.
		reserve     []Claimed
		promoting   []Claimed          // reservations a claim on its way runs first
		release     []int64            // reservations to give back
		inflightRes int                // rows the round trips on their way may reserve
		unconfirmed = map[int64]bool{} // started in a row's place; the swap not yet committed
		speed       pace
	)
	// swapOK says whether a reservation may start in the place of a row
	// that finished: not once the worker stops, nor while the guard holds
	// calls back (a 429 pause or an open breaker without a fallback, its
	// own or the batch's: a claim would get nothing then either), nor when
	// the leases were last renewed half a lease ago or more (the process
	// stalled, or the database is out of reach): the reservations may have
	// passed to another worker.
	w.renewed.Store(time.Now().UnixNano())
	swapOK := func() bool {
		if stopped || fatal != nil || p.StopReason() != engine.StopNone ||
			time.Since(time.Unix(0, w.renewed.Load())) >= w.s.lease/2 {
			return false
		}
		if g == nil {
			return true
		}
		open, _ := g.BreakerOpen()
		return g.Cooldown() == 0 && (!open || g.HasFallback())
	}
	submit := func(cl Claimed, now time.Time) {
		held++
		p.Submit(&engine.Job{Row: input.Row{Seq: cl.Seq, ID: cl.RequestID, Text: cl.Text}, At: now,
			Done: func(res results.Row) { done <- finished{cl, res} }})
	}
	// finish turns a finished row into its completion and, when it ran
	// under a committed claim, starts a reservation in its place.
	finish := func(f finished) {
		c := w.completion(f)
		if c.WaitMs >= 0 {
			ewma(&speed.rowMs, float64(c.TotalMs))
		}
		swappedIn := unconfirmed[f.c.Seq]
		delete(unconfirmed, f.c.Seq)
		if !swappedIn && c.Action != GiveBack && len(reserve) > 0 && swapOK() {
			y := reserve[0]
			reserve = reserve[1:]
			c.Promote = &y
			unconfirmed[y.Seq] = true
			w.mu.Lock()
			w.stats.Claimed++
			w.stats.Swapped++
			w.mu.Unlock()
			submit(y, time.Now())
		}
		pending = append(pending, c)
	}
	stop := func(reason engine.StopReason) {
		if !stopped {
			stopped, stopAt = true, time.Now()
			p.Stop(reason)
		}
	}
	// dropped ends the run at once: the batch was deleted (queue drop),
	// so nothing this worker holds or finishes can be written; its calls in
	// flight are cut rather than waited for.
	dropped := func() {
		if fatal != nil && errors.Is(fatal, ErrBatchGone) {
			return
		}
		w.log.Warn("the batch is gone: dropped (queue drop) while this worker ran; stopping", "batch", w.s.batch.Name, "rows_held", held)
		fatal = fmt.Errorf("%w: batch %q was dropped (queue drop) while this worker ran; its rows and results went with it", ErrBatchGone, w.s.batch.Name)
		stop(engine.StopInterrupted)
		p.Abort(engine.StopInterrupted)
		pending, release, reserve = nil, nil, nil
	}
	launch := func(in CycleIn) {
		inflight++
		inflightDone += len(in.Done)
		inflightWant += in.Want
		inflightRes += in.Reserve
		go func() {
			t0 := time.Now()
			out, err := w.s.Cycle(bg, in)
			w.mu.Lock()
			w.stats.Cycles++
			w.stats.CycleTime += time.Since(t0)
			w.mu.Unlock()
			cycles <- cycleDone{in, out, err, time.Since(t0)}
		}()
	}
	landed := func(c cycleDone) {
		inflight--
		inflightDone -= len(c.in.Done)
		inflightWant -= c.in.Want
		inflightRes -= c.in.Reserve
		// Reservations the claim was to run first and did not: still held
		// as reservations.
		back := promoting
		promoting = nil
		defer func() { reserve = append(back, reserve...) }()
		if errors.Is(c.err, ErrBatchGone) {
			dropped()
			return
		}
		if c.err != nil {
			// Kept, to be sent again: the results are committed with the
			// claim or not at all (a commit whose answer was lost is
			// recognised when they come again).
			pending = append(c.in.Done, pending...)
			release = append(c.in.Release, release...)
			w.requeueBackpressure(c.in.PauseFor, c.in.OpenFor)
			if c.in.Want > 0 || c.in.Reserve > 0 || c.in.Reconcile {
				// The claim may have been committed with its answer lost.
				reconcile = true
			}
			if !retryable(c.err) {
				fatal = fmt.Errorf("the database refused a claim or a result (%s); the results not written are redone after their lease", summarise(c.err))
				stop(engine.StopInterrupted)
				return
			}
			failStreak++
			d := backoff(failStreak)
			nextTry = time.Now().Add(d)
			what := "database unreachable"
			if !unreachable(c.err) {
				what = "the database turned a round trip down for now"
			}
			w.log.Warn(what+"; keeping the results and retrying", "in", d.Round(time.Millisecond), "results_waiting", len(pending), "err", summarise(c.err))
			return
		}
		if c.in.Reconcile {
			reconcile = false
		}
		ewma(&speed.tripMs, float64(c.took)/float64(time.Millisecond))
		if failStreak > 0 {
			w.log.Info("database reachable again")
			failStreak = 0
		}
		w.account(c.in.Done, c.out)
		held -= len(c.in.Done)
		for _, seq := range c.out.Promoted {
			delete(unconfirmed, seq)
		}
		now := time.Now()
		if g != nil {
			if c.out.Paused > 0 {
				g.PauseUntil(now.Add(c.out.Paused))
			}
			if c.out.Open > 0 {
				g.OpenUntil(now.Add(c.out.Open))
			}
		}
		w.mu.Lock()
		for _, seq := range c.in.Release {
			delete(w.held, seq)
		}
		running := 0
		for _, cl := range c.out.Claimed {
			w.held[cl.Seq] = struct{}{}
			if !cl.Reserved {
				running++
			}
		}
		w.stats.Claimed += int64(running)
		w.mu.Unlock()
		for _, cl := range c.out.Claimed {
			if cl.Reserved {
				reserve = append(reserve, cl)
				continue
			}
			for i, b := range back {
				if b.Seq == cl.Seq {
					back = append(back[:i], back[i+1:]...)
					break
				}
			}
			submit(cl, now)
		}
		switch {
		case len(c.out.Claimed) > 0 && (c.in.Want == 0 || running > 0):
			emptyWait = false
		case c.in.Want > 0 || c.in.Reserve > 0:
			if len(c.out.Claimed) == 0 && c.in.AskRemaining && !c.out.Remaining {
				w.log.Info("the batch has nothing pending or running: done")
				// Stopping for no reason: nothing is held, nothing is cut.
				stop(engine.StopNone)
				return
			}
			emptyWait = true
			// No row for now: a row held for the endpoint's verdict
			// waits for no other.
			p.SourceIdle()
		}
	}

	for {
		if w.gone.Load() {
			dropped()
		}
		if ctx.Err() != nil {
			stop(engine.StopInterrupted)
		}
		if !stopped && p.StopReason() != engine.StopNone {
			stopped, stopAt = true, time.Now()
		}
		if stopped && len(reserve) > 0 {
			for _, r := range reserve {
				release = append(release, r.Seq)
			}
			reserve = nil
		}
		if fatal != nil && inflight == 0 {
			return fatal
		}
		if stopped && failStreak > 0 && time.Since(stopAt) > w.cfg.WriteGrace && inflight == 0 {
			w.log.Error("the database is still unreachable; giving up on the results not written: their rows are redone after their lease", "results", len(pending))
			return fmt.Errorf("%d results could not be written: the database is unreachable", len(pending))
		}
		w.mu.Lock()
		w.stats.Active = int64(held)
		w.mu.Unlock()

		// Rows not yet committed as written, nor on their way to be.
		open := held - len(pending) - inflightDone
		want, more := 0, 0
		if !stopped && fatal == nil {
			want = max(0, w.cfg.Capacity-open-inflightWant)
			more = max(0, w.reserveTarget(speed)-len(reserve)-inflightRes)
		}
		pauseFor, openFor := w.peekBackpressure()
		if stopped && held == 0 && inflight == 0 && len(pending) == 0 && len(release) == 0 && pauseFor == 0 && openFor == 0 {
			return nil
		}
		claimOnly := want > 0 && !emptyWait && inflightWant == 0
		refill := more > 0 && !emptyWait && inflightRes == 0
		if inflight < maxCycles && !time.Now().Before(nextTry) && fatal == nil &&
			(len(pending) > 0 || len(release) > 0 || pauseFor > 0 || openFor > 0 || claimOnly || refill) {
			pauseFor, openFor = w.backpressure()
			askRemaining := w.cfg.ExitWhenDone && want > 0 && inflight == 0 && open == 0
			if len(pending) == 0 && !claimOnly {
				want = 0
			}
			if len(pending) == 0 && !refill {
				more = 0
			}
			in := CycleIn{Done: pending, Want: want, Reserve: more, Release: release, PauseFor: pauseFor, OpenFor: openFor,
				Fallback: w.cfg.Fallback, AskRemaining: askRemaining}
			if n := min(want, len(reserve)); n > 0 {
				promoting = append([]Claimed(nil), reserve[:n]...)
				reserve = reserve[n:]
				for _, r := range promoting {
					in.Promote = append(in.Promote, r.Seq)
				}
			}
			if reconcile && inflight == 0 {
				in.Reconcile, in.Held = true, w.heldSeqs()
			}
			launch(in)
			pending, release = nil, nil
			continue
		}

		// Wait for something to do.
		var timer <-chan time.Time
		var t *time.Timer
		switch {
		case time.Now().Before(nextTry):
			t = time.NewTimer(time.Until(nextTry))
			timer = t.C
		case emptyWait && inflight == 0 && !stopped:
			t = time.NewTimer(jitter(w.cfg.Poll))
			timer = t.C
		}
		var ctxDone, pStopped <-chan struct{}
		if !stopped {
			ctxDone, pStopped = ctx.Done(), p.Stopped()
		}
		select {
		case f := <-done:
			finish(f)
		case c := <-cycles:
			landed(c)
		case <-w.wake:
			emptyWait = false
		case <-timer:
			emptyWait = false
		case <-ctxDone:
		case <-pStopped:
		}
		if t != nil {
			t.Stop()
		}
		// Take whatever else is ready, so a round trip carries it all.
	drain:
		for {
			select {
			case f := <-done:
				finish(f)
			case c := <-cycles:
				landed(c)
			default:
				break drain
			}
		}
	}
}

// pace follows how long a row takes (claim to result) and a round trip
// takes, to size the reserve.
type pace struct{ rowMs, tripMs float64 }

func ewma(avg *float64, ms float64) {
	if *avg == 0 {
		*avg = ms
		return
	}
	*avg += (ms - *avg) / 8
}

// reserveTarget is how many rows the worker keeps reserved (0 where the
// batch does not reserve, or its calls take less than two round trips): as
// many as its calls end in four round trips (a refill asked for may wait
// for the round trip on its way), at least one, at most its capacity. With
// calls much slower than the database that is one row, so the tail of a
// batch is not left reserved by a worker whose slots are busy while
// another's are free.
func (w *Worker) reserveTarget(p pace) int {
	if !w.s.Reserves() {
		return 0
	}
	if p.rowMs <= 0 || p.tripMs <= 0 {
		return 1
	}
	if p.rowMs < 2*p.tripMs {
		// Calls about as fast as the database: the round trips are the
		// bottleneck, and a reservation only adds a write to each row.
		return 0
	}
	n := math.Ceil(4 * float64(w.cfg.Capacity) * p.tripMs / p.rowMs)
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
		raise(&w.pauseUntil, time.Now().Add(pause))
	}
	if open > 0 {
		raise(&w.openUntil, time.Now().Add(open))
	}
}

// completion decides what a finished row does to its queue row.
func (w *Worker) completion(f finished) Completion {
	r := f.res
	c := Completion{Seq: f.c.Seq, Attempt: f.c.Attempt, Outcome: string(r.Outcome), Label: r.Label, Score: r.Score,
		Model: r.Model, Attempts: r.Attempts, LatencyMs: r.LatencyMs, Error: r.Error,
		WaitMs: -1, TotalMs: r.FinishedMs - r.QueuedMs}
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
	case r.Outcome.Final() || f.c.Attempt >= w.s.batch.MaxAttempts:
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
	every := max(w.s.lease/3, 10*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		sent := time.Now()
		renewed, rescued, exhausted, err := w.s.Heartbeat(ctx, w.cfg.Host, w.cfg.PID, w.heldSeqs())
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
		_ = renewed
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
		err := w.listenOnce(ctx)
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

func (w *Worker) listenOnce(ctx context.Context) error {
	conn, err := w.s.db.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection is LISTENing: it is not handed back to the pool.
	c := conn.Hijack()
	defer c.Close(context.WithoutCancel(ctx))
	if _, err := c.Exec(ctx, "listen "+pgx.Identifier{channel(w.s.batch.ID)}.Sanitize()); err != nil {
		return err
	}
	w.poke()
	for {
		if _, err := c.WaitForNotification(ctx); err != nil {
			return err
		}
		w.poke()
	}
}

// unreachable reports whether a database error is the database out of
// reach (the connection, the server going away or not taking connections),
// rather than a statement turned down (a deadlock, a serialisation
// failure, resources).
func unreachable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	return true
}

// retryable reports whether a database error may pass: the connection or
// the server going away, a deadlock or serialisation failure, resources.
func retryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case len(pe.Code) >= 2 && (pe.Code[:2] == "08" || pe.Code[:2] == "53" || pe.Code[:2] == "57" || pe.Code[:2] == "58"):
			return true
		case pe.Code == "40001" || pe.Code == "40P01" || pe.Code == "55P03":
			return true
		}
		return false
	}
	// Anything else (a network error, a closed connection, a timeout, an
	// EOF) is the connection, not the statement.
	return true
}

// backoff is how long to wait before trying the database again: 100ms,
// 200ms ... capped at 5s, with jitter (half to all of it), the rule the
// provider's retries follow.
func backoff(n int) time.Duration { return resilience.Backoff(n, 100*time.Millisecond, 5*time.Second) }

// rowBackoff is how long a failed row waits before its next claim: 1s, 2s,
// 4s ... capped at 60s, with jitter (half to all of it).
func rowBackoff(attempt int) time.Duration {
	return resilience.Backoff(attempt, time.Second, time.Minute)
}

func jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(rand.Int64N(int64(d)+1))
}
