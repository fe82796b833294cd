package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/input"
	"github.com/hfsent/hfsent/internal/results"
)

// store is what a worker needs of the database: its Session in the batch,
// or a fake in the loop's tests.
type store interface {
	// Cycle is one round trip: results written, rows claimed and reserved.
	Cycle(ctx context.Context, in CycleIn) (CycleOut, error)
	// Heartbeat renews the leases of the rows held (renewed: those whose
	// renewal committed; nil: none did) and rescues expired ones.
	Heartbeat(ctx context.Context, host string, pid int, held []int64) (renewed []int64, rescued, exhausted int64, err error)
	// listen calls notified on each notification for the batch (and once
	// it listens) until its connection fails or ctx ends.
	listen(ctx context.Context, notified func()) error
	// Lease is how long a claim holds its rows without a heartbeat.
	Lease() time.Duration
	// Reserves reports whether the batch lets a worker reserve rows.
	Reserves() bool
}

// pipeline is what the loop uses of engine.Pipeline.
type pipeline interface {
	Submit(*engine.Job)
	Stop(engine.StopReason)
	Abort(engine.StopReason)
	StopReason() engine.StopReason
	Stopped() <-chan struct{}
	SourceIdle()
	// Prefetch looks up in the response cache, in the background, rows to
	// be submitted soon (reservations), so that admission need not.
	Prefetch(texts []string)
}

// guard is what the loop uses of resilience.Guard: whether it holds calls
// back now, and the batch's shared pause and breaker to apply to them.
type guard interface {
	BreakerOpen() (open bool, remaining time.Duration)
	Cooldown() time.Duration
	HasFallback() bool
	PauseUntil(time.Time)
	OpenUntil(time.Time)
}

// maxCycles is how many round trips a worker keeps in flight at once: a
// row that finishes while one is on its way goes in the next at once,
// rather than wait for it to come back.
const maxCycles = 1

// finished is a row the pipeline finished, with the claim it ran under.
type finished struct {
	c   Claimed
	res results.Row
	job uint64 // the job's number (loop.jobSeq)
}

// cycleDone is a round trip that came back.
type cycleDone struct {
	in   CycleIn
	out  CycleOut
	err  error
	at   time.Time // when it was sent: the leases it took count from here
	took time.Duration
}

// loop is a worker's run: it claims rows, hands them to the pipeline and
// writes their results, one round trip at a time, until it stops.
//
// Its state belongs to the goroutine of run: only run and the methods it
// calls read or write the fields below done and cycles. Other goroutines
// reach it through those channels (the pipeline's, with finished rows; a
// round trip's, when it comes back) and through the Worker (wake, gone,
// renewed, the backpressure its guard's hooks raise).
type loop struct {
	w  *Worker
	p  pipeline
	g  guard           // nil: the classifier is not a guarded one
	bg context.Context // the run's context without its end: round trips write what they carry after it

	done   chan finished  // rows the pipeline finished (sent from its goroutines)
	cycles chan cycleDone // round trips that came back (sent from launch's goroutines)

	held    int          // rows claimed (or started in a row's place) and not yet written
	pending []Completion // results for the next round trip
	release []int64      // reservations to give back in the next round trip

	// The round trips on their way: how many, the results they carry, the
	// rows they may claim and reserve.
	inflight, inflightDone, inflightWant, inflightRes int

	stopped bool      // no more claims: interrupted, the pipeline stopped, or the batch is done
	stopAt  time.Time // when it stopped
	fatal   error     // the run ends with this once no round trip is on its way

	failStreak int       // round trips failed in a row
	nextTry    time.Time // after a failed round trip: when to try again
	emptyWait  bool      // the last claim found nothing: wait to poll
	reconcile  bool      // a claim's answer was lost: give back what it took

	// Reservations (batches that reserve, see Session.Reserves): rows
	// leased to this worker but still pending, started the moment a call
	// of its own ends, in that call's place.
	reserve     []Claimed
	promoting   []Claimed      // reservations the claim on its way runs first
	unconfirmed map[int64]bool // started in a row's place; the swap not yet committed
	speed       pace

	// The rows in the pipeline: each one's newest job (numbered from
	// jobSeq), and how many jobs it has there. A row has two when it came
	// back in a claim while its old job still ran (the worker stopped past
	// its lease, the row was rescued, and this worker took it again; or a
	// reservation given back after its swap was refused, then claimed):
	// the old job is superseded, and its result is never reported, so a
	// row has one result to report by construction (issue 31, item 5).
	jobSeq uint64
	newest map[int64]uint64
	jobs   map[int64]int
}

func newLoop(w *Worker, bg context.Context, p pipeline, g guard) *loop {
	w.renewed.Store(time.Now().UnixNano())
	return &loop{w: w, p: p, g: g, bg: bg,
		done:        make(chan finished, 2*w.cfg.Capacity),
		cycles:      make(chan cycleDone, maxCycles),
		unconfirmed: map[int64]bool{}, newest: map[int64]uint64{}, jobs: map[int64]int{}}
}

// run turns until the run is over: it takes in what changed outside, sends
// a round trip when one is due, and otherwise waits for something to
// happen.
func (l *loop) run(ctx context.Context) error {
	for {
		l.observe(ctx)
		if over, err := l.over(); over {
			return err
		}
		l.w.mu.Lock()
		l.w.stats.Active = int64(l.held)
		l.w.mu.Unlock()
		if in, ok := l.nextTrip(); ok {
			l.launch(in)
			continue
		}
		l.wait(ctx)
	}
}

// observe takes in what changed outside the loop: the batch dropped (a
// heartbeat saw it), ctx ended, the pipeline stopped. Once stopped, the
// reservations are given back.
func (l *loop) observe(ctx context.Context) {
	if l.w.gone.Load() {
		l.dropped()
	}
	if ctx.Err() != nil {
		l.stop(engine.StopInterrupted)
	}
	if !l.stopped && l.p.StopReason() != engine.StopNone {
		l.stopped, l.stopAt = true, time.Now()
	}
	if l.stopped && len(l.reserve) > 0 {
		for _, r := range l.reserve {
			l.release = append(l.release, r.Seq)
		}
		l.reserve = nil
	}
	l.releaseLapsed()
}

// releaseLapsed gives back the reservations whose lease lapsed by this
// worker's clock (it was stopped or cut off past it): it may not start
// them, and kept, one stayed leased to it in the database, where no claim
// of its own takes it again, and, were it the last worker, no other's
// either, so its batch never finished (issue 31, item 4). Given back, any
// worker claims it at once.
func (l *loop) releaseLapsed() {
	kept := l.reserve[:0]
	for _, r := range l.reserve {
		if lease := l.w.leaseOf(r.Seq); lease != nil && !lease.Held() {
			l.release = append(l.release, r.Seq)
			continue
		}
		kept = append(kept, r)
	}
	l.reserve = kept
}

// over says whether the run ends now, and with what: a fatal error once no
// round trip is on its way; results that could not be written in the
// grace after a stop; or, stopped, nothing left to write, give back or
// report.
func (l *loop) over() (bool, error) {
	if l.fatal != nil && l.inflight == 0 {
		return true, l.fatal
	}
	if l.stopped && l.failStreak > 0 && time.Since(l.stopAt) > l.w.cfg.WriteGrace && l.inflight == 0 {
		l.w.log.Error("the database is still unreachable; giving up on the results not written: their rows are redone after their lease", "results", len(l.pending))
		return true, fmt.Errorf("%d results could not be written: the database is unreachable", len(l.pending))
	}
	pauseFor, openFor := l.w.peekBackpressure()
	if l.stopped && l.held == 0 && l.inflight == 0 && len(l.pending) == 0 && len(l.release) == 0 && pauseFor == 0 && openFor == 0 {
		return true, nil
	}
	return false, nil
}

// nextTrip is the next round trip, when one is due: none on its way, not
// waiting after a failure, and something to send (results, reservations
// to give back, backpressure to report) or a claim or refill worth making.
// What it carries is taken from the loop.
func (l *loop) nextTrip() (CycleIn, bool) {
	// Rows not yet committed as written, nor on their way to be.
	open := l.held - len(l.pending) - l.inflightDone
	want, more := 0, 0
	if !l.stopped && l.fatal == nil {
		want = max(0, l.w.cfg.Capacity-open-l.inflightWant)
		more = max(0, l.w.reserveTarget(l.speed)-len(l.reserve)-l.inflightRes)
	}
	pauseFor, openFor := l.w.peekBackpressure()
	claimOnly := want > 0 && !l.emptyWait && l.inflightWant == 0
	refill := more > 0 && !l.emptyWait && l.inflightRes == 0
	if l.inflight >= maxCycles || time.Now().Before(l.nextTry) || l.fatal != nil ||
		!(len(l.pending) > 0 || len(l.release) > 0 || pauseFor > 0 || openFor > 0 || claimOnly || refill) {
		return CycleIn{}, false
	}
	pauseFor, openFor = l.w.backpressure()
	askRemaining := l.w.cfg.ExitWhenDone && want > 0 && l.inflight == 0 && open == 0
	// Results go at once; a claim or a refill rides with them, or goes
	// alone when none of its kind is on its way.
	if len(l.pending) == 0 && !claimOnly {
		want = 0
	}
	if len(l.pending) == 0 && !refill {
		more = 0
	}
	in := CycleIn{Done: l.pending, Want: want, Reserve: more, Release: l.release, PauseFor: pauseFor, OpenFor: openFor,
		Fallback: l.w.cfg.Fallback, AskRemaining: askRemaining}
	if n := min(want, len(l.reserve)); n > 0 {
		l.promoting = append([]Claimed(nil), l.reserve[:n]...)
		l.reserve = l.reserve[n:]
		for _, r := range l.promoting {
			in.Promote = append(in.Promote, r.Seq)
		}
	}
	if l.reconcile && l.inflight == 0 {
		in.Reconcile, in.Held = true, l.w.heldSeqs()
	}
	l.pending, l.release = nil, nil
	return in, true
}

// launch sends a round trip; it comes back on l.cycles.
func (l *loop) launch(in CycleIn) {
	l.inflight++
	l.inflightDone += len(in.Done)
	l.inflightWant += in.Want
	l.inflightRes += in.Reserve
	go func() {
		t0 := time.Now()
		out, err := l.w.db.Cycle(l.bg, in)
		l.w.mu.Lock()
		l.w.stats.Cycles++
		l.w.stats.CycleTime += time.Since(t0)
		l.w.mu.Unlock()
		l.cycles <- cycleDone{in, out, err, t0, time.Since(t0)}
	}()
}

// wait waits for something to do: a row finished, a round trip back, a
// wake-up, the poll after an empty claim or the retry after a failed one,
// ctx or the pipeline stopping. Then it takes whatever else is ready, so a
// round trip carries it all.
func (l *loop) wait(ctx context.Context) {
	var timer <-chan time.Time
	var t *time.Timer
	switch {
	case time.Now().Before(l.nextTry):
		t = time.NewTimer(time.Until(l.nextTry))
		timer = t.C
	case l.emptyWait && l.inflight == 0 && !l.stopped:
		t = time.NewTimer(jitter(l.w.cfg.Poll))
		timer = t.C
	}
	var ctxDone, pStopped <-chan struct{}
	if !l.stopped {
		ctxDone, pStopped = ctx.Done(), l.p.Stopped()
	}
	select {
	case f := <-l.done:
		l.finish(f)
	case c := <-l.cycles:
		l.landed(c)
	case <-l.w.wake:
		l.emptyWait = false
	case <-timer:
		l.emptyWait = false
	case <-ctxDone:
	case <-pStopped:
	}
	if t != nil {
		t.Stop()
	}
	for {
		select {
		case f := <-l.done:
			l.finish(f)
		case c := <-l.cycles:
			l.landed(c)
		default:
			return
		}
	}
}

// submit hands a claimed row to the pipeline, sent only while lease holds
// (nil: a loop test's row that has none).
func (l *loop) submit(cl Claimed, now time.Time, lease *rowLease) {
	l.jobSeq++
	n := l.jobSeq
	l.supersede(cl.Seq, n)
	l.held++
	j := &engine.Job{Row: input.Row{Seq: cl.Seq, ID: cl.RequestID, Text: cl.Text}, At: now,
		Done: func(res results.Row) { l.done <- finished{cl, res, n} }}
	if lease != nil {
		j.Lease = lease
	}
	l.p.Submit(j)
}

// supersede records job n as row seq's newest in the pipeline. A result
// of an earlier job of the row waiting for the next round trip goes: the
// database gave the row to this newer claim, so that result is of a claim
// that ended, and with the newer one's it would be two results for one row.
func (l *loop) supersede(seq int64, n uint64) {
	l.newest[seq] = n
	l.jobs[seq]++
	kept := l.pending[:0]
	for _, c := range l.pending {
		if c.Seq == seq {
			l.dropSuperseded(c.Seq, c.Attempt)
			continue
		}
		kept = append(kept, c)
	}
	l.pending = kept
}

// dropSuperseded forgets a result of a job a newer claim of its row
// superseded: not written, it is counted as discarded.
func (l *loop) dropSuperseded(seq int64, attempt int) {
	l.held--
	l.w.log.Info("result of an earlier claim of a row dropped: this worker claimed the row again", "seq", seq, "attempt", attempt)
	l.w.mu.Lock()
	l.w.stats.Discarded++
	l.w.mu.Unlock()
}

// ended records that f's job left the pipeline, and reports whether a
// newer job of its row superseded it.
func (l *loop) ended(f finished) (superseded bool) {
	superseded = l.newest[f.c.Seq] != f.job
	if l.jobs[f.c.Seq]--; l.jobs[f.c.Seq] <= 0 {
		delete(l.jobs, f.c.Seq)
		delete(l.newest, f.c.Seq)
	}
	return superseded
}

// finish turns a finished row into its completion and, when it ran under
// a committed claim, starts a reservation in its place.
func (l *loop) finish(f finished) {
	if l.ended(f) {
		l.dropSuperseded(f.c.Seq, f.c.Attempt)
		return
	}
	c := l.w.completion(f)
	if c.WaitMs >= 0 {
		ewma(&l.speed.rowMs, &l.speed.rows, float64(c.TotalMs))
	}
	swappedIn := l.unconfirmed[f.c.Seq]
	delete(l.unconfirmed, f.c.Seq)
	if swappedIn {
		// Its swap was refused while it ran (confirmSwaps): give it back
		// with its result. Only a row swapped in is looked up: the lookup
		// takes the worker's lock, and every finished row passes here.
		if y := l.w.leaseOf(f.c.Seq); y != nil && y.lapsed.Load() {
			l.release = append(l.release, f.c.Seq)
		}
	}
	if !swappedIn && c.Action != GiveBack && len(l.reserve) > 0 && l.swapOK() {
		// The reservation takes the finished row's place under the cap:
		// both leases must hold now, and it is sent only while both do,
		// until the swap commits (tripDone).
		place, y := l.w.leaseOf(f.c.Seq), l.w.leaseOf(l.reserve[0].Seq)
		if place != nil && y != nil && place.Held() && y.Held() {
			y.slot.Store(place)
			r := l.reserve[0]
			l.reserve = l.reserve[1:]
			c.Promote = &r
			l.unconfirmed[r.Seq] = true
			l.w.mu.Lock()
			l.w.stats.Claimed++
			l.w.stats.Swapped++
			l.w.mu.Unlock()
			l.submit(r, time.Now(), y)
		}
	}
	l.pending = append(l.pending, c)
}

// swapOK says whether a reservation may start in the place of a row that
// finished: not once the worker stops, nor while the guard holds calls
// back (a 429 pause or an open breaker without a fallback, its own or the
// batch's: a claim would get nothing then either), nor when the leases
// were last renewed half a lease ago or more (the process stalled, or the
// database is out of reach): the reservations may have passed to another
// worker.
func (l *loop) swapOK() bool {
	if l.stopped || l.fatal != nil || l.p.StopReason() != engine.StopNone ||
		time.Since(time.Unix(0, l.w.renewed.Load())) >= l.w.db.Lease()/2 {
		return false
	}
	if l.g == nil {
		return true
	}
	open, _ := l.g.BreakerOpen()
	return l.g.Cooldown() == 0 && (!open || l.g.HasFallback())
}

// stop stops claiming and stops the pipeline for reason (StopNone: the
// batch is done, nothing is cut).
func (l *loop) stop(reason engine.StopReason) {
	if !l.stopped {
		l.stopped, l.stopAt = true, time.Now()
		l.p.Stop(reason)
	}
}

// dropped ends the run at once: the batch was deleted (queue drop), so
// nothing this worker holds or finishes can be written; its calls in
// flight are cut rather than waited for.
func (l *loop) dropped() {
	if l.fatal != nil && errors.Is(l.fatal, ErrBatchGone) {
		return
	}
	l.w.log.Warn("the batch is gone: dropped (queue drop) while this worker ran; stopping", "batch", l.w.batch.Name, "rows_held", l.held)
	l.fatal = fmt.Errorf("%w: batch %q was dropped (queue drop) while this worker ran; its rows and results went with it", ErrBatchGone, l.w.batch.Name)
	l.stop(engine.StopInterrupted)
	l.p.Abort(engine.StopInterrupted)
	l.pending, l.release, l.reserve = nil, nil, nil
}

// landed takes in a round trip that came back.
func (l *loop) landed(c cycleDone) {
	l.inflight--
	l.inflightDone -= len(c.in.Done)
	l.inflightWant -= c.in.Want
	l.inflightRes -= c.in.Reserve
	// Reservations the claim was to run first and did not: still held as
	// reservations.
	back := l.promoting
	l.promoting = nil
	switch {
	case errors.Is(c.err, ErrBatchGone):
		l.dropped()
	case c.err != nil:
		l.tripFailed(c)
	default:
		back = l.tripDone(c, back)
	}
	l.reserve = append(back, l.reserve...)
}

// tripFailed keeps what a failed round trip carried, to send again: the
// results are committed with the claim or not at all (a commit whose answer
// was lost is recognised when they come again). A database that refused a
// statement ends the run; one out of reach, or that turned the round trip
// down for now, is tried again after a backoff.
func (l *loop) tripFailed(c cycleDone) {
	l.pending = append(c.in.Done, l.pending...)
	l.release = append(c.in.Release, l.release...)
	l.w.requeueBackpressure(c.in.PauseFor, c.in.OpenFor)
	if c.in.Want > 0 || c.in.Reserve > 0 || c.in.Reconcile {
		// The claim may have been committed with its answer lost.
		l.reconcile = true
	}
	if !retryable(c.err) {
		l.fatal = fmt.Errorf("the database refused a claim or a result (%s); the results not written are redone after their lease", summarise(c.err))
		l.stop(engine.StopInterrupted)
		return
	}
	l.failStreak++
	d := backoff(l.failStreak)
	l.nextTry = time.Now().Add(d)
	what := "database unreachable"
	if !unreachable(c.err) {
		what = "the database turned a round trip down for now"
	}
	l.w.log.Warn(what+"; keeping the results and retrying", "in", d.Round(time.Millisecond), "results_waiting", len(l.pending), "err", summarise(c.err))
}

// tripDone takes in a round trip that went through: its results counted,
// the batch's shared backpressure applied, the rows it claimed started
// and those it reserved kept. It returns the reservations to keep of
// back, those the claim was to run first (less those it did).
func (l *loop) tripDone(c cycleDone, back []Claimed) []Claimed {
	if c.in.Reconcile {
		l.reconcile = false
	}
	ewma(&l.speed.tripMs, &l.speed.trips, float64(c.took)/float64(time.Millisecond))
	if l.failStreak > 0 {
		l.w.log.Info("database reachable again")
		l.failStreak = 0
	}
	l.w.account(c.in.Done, c.out)
	l.held -= len(c.in.Done)
	l.confirmSwaps(c)
	now := time.Now()
	if l.g != nil {
		if c.out.Paused > 0 {
			l.g.PauseUntil(now.Add(c.out.Paused))
		}
		if c.out.Open > 0 {
			l.g.OpenUntil(now.Add(c.out.Open))
		}
	}
	running := l.w.hold(c.in.Release, c.out.Claimed, c.at)
	var texts []string // the reservations': looked up while they wait
	for _, cl := range c.out.Claimed {
		if cl.Reserved {
			l.reserve = append(l.reserve, cl)
			texts = append(texts, cl.Text)
			continue
		}
		for i, b := range back {
			if b.Seq == cl.Seq {
				back = append(back[:i], back[i+1:]...)
				break
			}
		}
		l.submit(cl, now, l.w.leaseOf(cl.Seq))
	}
	l.p.Prefetch(texts)
	l.claimed(c.in, c.out, running)
	return back
}

// confirmSwaps takes in the swaps a round trip that went through carried:
// a reservation made running runs in a place of its own under the cap,
// leased from when the round trip was sent; one that was not (the
// finished row's lease had passed on) has no place, and is not sent.
func (l *loop) confirmSwaps(c cycleDone) {
	promoted := make(map[int64]bool, len(c.out.Promoted))
	for _, seq := range c.out.Promoted {
		promoted[seq] = true
		delete(l.unconfirmed, seq)
	}
	for _, d := range c.in.Done {
		if d.Promote == nil {
			continue
		}
		y := l.w.leaseOf(d.Promote.Seq)
		switch {
		case y == nil:
		case promoted[d.Promote.Seq]:
			y.extend(c.at, l.w.db.Lease())
			y.slot.Store(nil)
		default:
			// Refused: the row is still reserved to this worker in the
			// database (if the reservation had not passed on), where it
			// would wait for its lease, then for another worker, and its
			// result, not running there, is never written. It is given
			// back once its job left the pipeline (finish, when still in
			// it): given back while its call may be on its way, another
			// worker could claim it and pay a second call at once.
			y.lapsed.Store(true)
			if l.jobs[d.Promote.Seq] == 0 {
				l.release = append(l.release, d.Promote.Seq)
			}
		}
	}
}

// claimed decides what follows a claim: one that asked for rows and got
// none waits for the poll or a notification before the next, and tells the
// pipeline no row is coming for now; with ExitWhenDone, one that found the
// batch done ends the run.
func (l *loop) claimed(in CycleIn, out CycleOut, running int) {
	switch {
	case len(out.Claimed) > 0 && (in.Want == 0 || running > 0):
		l.emptyWait = false
	case in.Want > 0 || in.Reserve > 0:
		if len(out.Claimed) == 0 && in.AskRemaining && !out.Remaining {
			l.w.log.Info("the batch has nothing pending or running: done")
			// Stopping for no reason: nothing is held, nothing is cut.
			l.stop(engine.StopNone)
			return
		}
		l.emptyWait = true
		// No row for now: a row held for the endpoint's verdict waits for
		// no other.
		l.p.SourceIdle()
	}
}
