package queue

// The worker loop's rules against fakes of the database, the pipeline and
// the guard: no PostgreSQL, no provider. Each round trip waits for the test
// to answer it, so the test decides what every claim brings and when every
// row finishes, and reads what the loop sends.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/resilience"
	"github.com/hfsent/hfsent/internal/results"
)

// patience bounds every wait of these tests for the loop: far more than
// any of its steps takes, on a machine as busy as it gets.
const patience = 10 * time.Second

// trip is a round trip the loop sent, waiting for its answer.
type trip struct {
	in    CycleIn
	reply chan tripReply
	once  sync.Once
}

type tripReply struct {
	out CycleOut
	err error
}

// answer answers the round trip (once: later answers are ignored).
func (t *trip) answer(out CycleOut, err error) { t.once.Do(func() { t.reply <- tripReply{out, err} }) }

// fakeStore is the database: Cycle hands each round trip to the test.
type fakeStore struct {
	lease    time.Duration
	reserves bool
	trips    chan *trip
	// heartbeat answers each heartbeat (nil: renewed, nothing rescued).
	heartbeat func(held []int64) error
}

func (f *fakeStore) Cycle(ctx context.Context, in CycleIn) (CycleOut, error) {
	t := &trip{in: in, reply: make(chan tripReply, 1)}
	f.trips <- t
	r := <-t.reply
	return r.out, r.err
}

func (f *fakeStore) Heartbeat(ctx context.Context, host string, pid int, held []int64) ([]int64, int64, int64, error) {
	if f.heartbeat != nil {
		return nil, 0, 0, f.heartbeat(held)
	}
	return held, 0, 0, nil
}

func (f *fakeStore) listen(ctx context.Context, notified func()) error {
	<-ctx.Done()
	return ctx.Err()
}

func (f *fakeStore) Lease() time.Duration { return f.lease }
func (f *fakeStore) Reserves() bool       { return f.reserves }

// fakePipeline is the pipeline: the rows submitted come out on jobs, for
// the test to finish.
type fakePipeline struct {
	jobs    chan *engine.Job
	stopped chan struct{}

	mu         sync.Mutex
	submitted  []*engine.Job
	stops      int
	reason     engine.StopReason
	aborted    bool
	idle       int      // times told no row is coming for now
	prefetched []string // texts the loop asked to look up ahead
}

func newFakePipeline() *fakePipeline {
	return &fakePipeline{jobs: make(chan *engine.Job, 64), stopped: make(chan struct{})}
}

// Submit hands j to the test; its Done takes only the first result, as the
// pipeline finishes a row exactly once.
func (p *fakePipeline) Submit(j *engine.Job) {
	var once sync.Once
	done := j.Done
	j.Done = func(r results.Row) { once.Do(func() { done(r) }) }
	p.mu.Lock()
	p.submitted = append(p.submitted, j)
	p.mu.Unlock()
	p.jobs <- j
}

// finishAll finishes every row not finished yet as not_attempted, as the
// pipeline does when it stops.
func (p *fakePipeline) finishAll() {
	p.mu.Lock()
	jobs := append([]*engine.Job(nil), p.submitted...)
	p.mu.Unlock()
	for _, j := range jobs {
		finishRow(j, outcome.NotAttempted)
	}
}

// Stop stops admission for the first reason given, as engine.Pipeline's does.
func (p *fakePipeline) Stop(r engine.StopReason) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stops == 0 {
		p.reason = r
		close(p.stopped)
	}
	p.stops++
}

func (p *fakePipeline) Abort(r engine.StopReason) {
	p.Stop(r)
	p.mu.Lock()
	p.aborted = true
	p.mu.Unlock()
}

func (p *fakePipeline) StopReason() engine.StopReason {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reason
}

func (p *fakePipeline) Stopped() <-chan struct{} { return p.stopped }

func (p *fakePipeline) SourceIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.idle++
}

// Prefetch records the texts the loop asked to look up ahead.
func (p *fakePipeline) Prefetch(texts []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.prefetched = append(p.prefetched, texts...)
}

// idled is how many times the pipeline was told no row is coming for now.
func (p *fakePipeline) idled() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.idle
}

// state is whether the pipeline was stopped, and how.
func (p *fakePipeline) state() (stopped bool, reason engine.StopReason, aborted bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stops > 0, p.reason, p.aborted
}

// fakeGuard is the guard: the test sets what it holds back, and reads the
// batch's backpressure the loop applied to it.
type fakeGuard struct {
	mu                     sync.Mutex
	open, fallback         bool
	cooldown               time.Duration
	pausedUntil, openUntil time.Time
}

func (g *fakeGuard) BreakerOpen() (bool, time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open, 0
}

func (g *fakeGuard) Cooldown() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cooldown
}

func (g *fakeGuard) HasFallback() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fallback
}

func (g *fakeGuard) PauseUntil(t time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pausedUntil = t
}

func (g *fakeGuard) OpenUntil(t time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.openUntil = t
}

// loopRun is a worker loop running against the fakes.
type loopRun struct {
	t      *testing.T
	w      *Worker
	db     *fakeStore
	p      *fakePipeline
	cancel context.CancelFunc
	result chan error
	ended  bool
	taken  []*trip // round trips handed to the test
}

// startLoop runs a worker of capacity cfg.Capacity (a lease of 30s, 3
// attempts a row) on db, with guard g (nil: none). When the test ends the
// run is interrupted and its round trips answered until it returns.
func startLoop(t *testing.T, cfg WorkerConfig, db *fakeStore, g *fakeGuard) *loopRun {
	t.Helper()
	if db.lease == 0 {
		db.lease = 30 * time.Second
	}
	db.trips = make(chan *trip, 1)
	if cfg.Poll == 0 {
		cfg.Poll = time.Minute // only a wake-up ends the wait after an empty claim
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &loopRun{t: t, w: newWorker(db, &Batch{ID: 1, Spec: Spec{Name: "b", MaxAttempts: 3}}, cfg), db: db,
		p: newFakePipeline(), cancel: cancel, result: make(chan error, 1)}
	var gd guard
	if g != nil {
		gd = g
	}
	go func() { r.result <- r.w.run(ctx, r.p, gd) }()
	t.Cleanup(func() {
		cancel()
		if r.ended {
			return
		}
		for _, tr := range r.taken {
			tr.answer(CycleOut{}, nil)
		}
		go r.p.finishAll()
		deadline := time.After(patience)
		for {
			select {
			case tr := <-db.trips:
				tr.answer(CycleOut{}, nil)
			case <-r.p.jobs:
				go r.p.finishAll()
			case <-r.result:
				return
			case <-deadline:
				t.Error("the loop did not end after its run was interrupted")
				return
			}
		}
	})
	return r
}

// trip waits for the loop's next round trip.
func (r *loopRun) trip() *trip {
	r.t.Helper()
	select {
	case tr := <-r.db.trips:
		r.taken = append(r.taken, tr)
		return tr
	case err := <-r.result:
		r.ended = true
		r.t.Fatalf("the loop ended (%v) while a round trip was expected", err)
	case <-time.After(patience):
		r.t.Fatal("no round trip came")
	}
	return nil
}

// noTrip checks that the loop sends nothing for a while.
func (r *loopRun) noTrip(why string) {
	r.t.Helper()
	select {
	case tr := <-r.db.trips:
		r.taken = append(r.taken, tr)
		r.t.Fatalf("%s: the loop sent a round trip %+v", why, tr.in)
	case <-time.After(100 * time.Millisecond):
	}
}

// job waits for the next row the loop hands the pipeline.
func (r *loopRun) job() *engine.Job {
	r.t.Helper()
	select {
	case j := <-r.p.jobs:
		return j
	case <-time.After(patience):
		r.t.Fatal("no row was submitted")
	}
	return nil
}

// noJob checks that the loop submits no row for a while.
func (r *loopRun) noJob(why string) {
	r.t.Helper()
	select {
	case j := <-r.p.jobs:
		r.t.Fatalf("%s: the loop submitted row %d", why, j.Row.Seq)
	case <-time.After(100 * time.Millisecond):
	}
}

// end waits for the run to return.
func (r *loopRun) end() error {
	r.t.Helper()
	select {
	case err := <-r.result:
		r.ended = true
		return err
	case tr := <-r.db.trips:
		r.taken = append(r.taken, tr)
		r.t.Fatalf("a round trip %+v came where the run should have ended", tr.in)
	case <-time.After(patience):
		r.t.Fatal("the run did not end")
	}
	return nil
}

// claims are claimed rows: seqs running, then reserved ones.
func claims(running []int64, reserved ...int64) []Claimed {
	var out []Claimed
	for _, s := range running {
		out = append(out, Claimed{Seq: s, Attempt: 1, RequestID: "r", Text: "t"})
	}
	for _, s := range reserved {
		out = append(out, Claimed{Seq: s, Attempt: 1, RequestID: "r", Text: "t", Reserved: true})
	}
	return out
}

// finishRow finishes a row as the pipeline does, with outcome oc
// (not_attempted: never sent).
func finishRow(j *engine.Job, oc outcome.Code) {
	r := results.Row{RequestID: j.Row.ID, Outcome: oc, Attempts: 1, LatencyMs: 20, FinishedMs: 20}
	if oc == outcome.NotAttempted {
		r.StartedMs, r.Attempts, r.LatencyMs = -1, 0, 0
	}
	j.Done(r)
}

func seqs(cs []Completion) []int64 {
	var out []int64
	for _, c := range cs {
		out = append(out, c.Seq)
	}
	return out
}

func sameSeqs(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	in := map[int64]int{}
	for _, s := range a {
		in[s]++
	}
	for _, s := range b {
		in[s]--
	}
	for _, n := range in {
		if n != 0 {
			return false
		}
	}
	return true
}

// A worker claims at most its capacity, less the rows it holds and the
// claims on their way; it asks again at once when a claim brought fewer
// rows than asked, and its results ride with its next claim.
func TestLoopClaimsWithinItsCapacity(t *testing.T) {
	r := startLoop(t, WorkerConfig{Capacity: 3}, &fakeStore{}, nil)
	tr := r.trip()
	if tr.in.Want != 3 || len(tr.in.Done) != 0 || tr.in.Reserve != 0 {
		t.Fatalf("first round trip %+v; want a claim of 3 rows and nothing else", tr.in)
	}
	tr.answer(CycleOut{Claimed: claims([]int64{1, 2})}, nil)
	j1, j2 := r.job(), r.job()
	if j1.Row.Seq != 1 || j2.Row.Seq != 2 {
		t.Fatalf("submitted rows %d and %d, want 1 and 2", j1.Row.Seq, j2.Row.Seq)
	}
	tr = r.trip()
	if tr.in.Want != 1 {
		t.Fatalf("after 2 of 3 rows came, the next claim asks for %d; want the 1 left", tr.in.Want)
	}
	tr.answer(CycleOut{}, nil)
	r.noTrip("after an empty claim, with nothing to write")
	finishRow(j1, outcome.Success)
	tr = r.trip()
	if !sameSeqs(seqs(tr.in.Done), []int64{1}) || tr.in.Done[0].Action != Finish || tr.in.Want != 2 {
		t.Fatalf("round trip after row 1 finished: %+v; want its result and a claim of 2", tr.in)
	}
	tr.answer(CycleOut{Written: 1, Claimed: claims([]int64{3, 4})}, nil)
	r.job()
	r.job()
	r.noTrip("holding its capacity")
	if st := r.w.Stats(); st.Claimed != 4 || st.Finished != 1 || st.OK != 1 {
		t.Fatalf("stats %+v; want 4 claimed, 1 finished ok", st)
	}
}

// After a claim that found nothing the worker tells the pipeline no row is
// coming for now (a row held for the endpoint's verdict waits no longer),
// and waits for the poll or a notification before it claims again.
func TestLoopWaitsAfterAnEmptyClaim(t *testing.T) {
	r := startLoop(t, WorkerConfig{Capacity: 2}, &fakeStore{}, nil)
	r.trip().answer(CycleOut{Claimed: claims([]int64{1})}, nil)
	r.job()
	if n := r.p.idled(); n != 0 {
		t.Fatalf("a claim that brought a row told the pipeline %d times no row was coming", n)
	}
	r.trip().answer(CycleOut{}, nil)
	r.noTrip("after an empty claim")
	if n := r.p.idled(); n != 1 {
		t.Fatalf("after an empty claim the pipeline was told %d times no row is coming; want once", n)
	}
	r.w.poke() // a notification: new rows
	if tr := r.trip(); tr.in.Want != 1 {
		t.Fatalf("after a notification the worker sent %+v; want a claim of the 1 row left", tr.in)
	}
}

// The rows a round trip reserves are looked up in the response cache
// while they wait (Prefetch), so that, started one at a time in finished
// rows' places, they do not wait for a lookup each; the rows it claims
// running are submitted at once, and looked up as they are admitted.
func TestLoopPrefetchesItsReservations(t *testing.T) {
	r := startLoop(t, WorkerConfig{Capacity: 1}, &fakeStore{reserves: true}, nil)
	tr := r.trip()
	tr.answer(CycleOut{Claimed: []Claimed{{Seq: 1, Attempt: 1, RequestID: "r1", Text: "running"},
		{Seq: 2, Attempt: 1, RequestID: "r2", Text: "reserved", Reserved: true}}}, nil)
	r.job()
	var got []string
	// Asked once the running rows are submitted.
	for deadline := time.Now().Add(5 * time.Second); len(got) == 0 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		r.p.mu.Lock()
		got = append([]string(nil), r.p.prefetched...)
		r.p.mu.Unlock()
	}
	if len(got) != 1 || got[0] != "reserved" {
		t.Fatalf("prefetched %q; want the reservation's text alone", got)
	}
}

// In a batch that reserves, a row that finishes starts one of the worker's
// reservations in its place at once; the round trip that writes the row
// makes the reservation running (Promote). A row started that way swaps in
// no other unless its swap was confirmed.
func TestLoopSwapsAReservationIntoAFinishedRowsPlace(t *testing.T) {
	r := startLoop(t, WorkerConfig{Capacity: 2}, &fakeStore{reserves: true}, nil)
	tr := r.trip()
	if tr.in.Want != 2 || tr.in.Reserve != 1 {
		t.Fatalf("first round trip %+v; want a claim of 2 and a reservation of 1", tr.in)
	}
	tr.answer(CycleOut{Claimed: claims([]int64{1, 2}, 3, 4)}, nil)
	j1, _ := r.job(), r.job()
	r.noTrip("holding its capacity and its reservations")
	finishRow(j1, outcome.Success)
	j3 := r.job()
	if j3.Row.Seq != 3 {
		t.Fatalf("row %d started in row 1's place; want reservation 3", j3.Row.Seq)
	}
	tr = r.trip()
	if len(tr.in.Done) != 1 || tr.in.Done[0].Seq != 1 || tr.in.Done[0].Promote == nil || tr.in.Done[0].Promote.Seq != 3 {
		t.Fatalf("round trip after the swap: %+v; want row 1's result promoting reservation 3", tr.in)
	}
	if tr.in.Want != 0 {
		t.Fatalf("the swap's round trip claims %d rows; the reservation took row 1's place", tr.in.Want)
	}
	if st := r.w.Stats(); st.Swapped != 1 || st.Claimed != 3 {
		t.Fatalf("stats %+v; want 1 swapped, 3 claimed", st)
	}
	// The swap was refused (row 1 was no longer this worker's): row 3 runs
	// in a place never confirmed, and when it finishes it starts no other
	// reservation in its own.
	tr.answer(CycleOut{Written: 1}, nil)
	r.noTrip("row 3's swap refused while its call may be on its way: not given back yet")
	finishRow(j3, outcome.Success)
	r.noJob("a row whose swap was not confirmed finished")
	tr = r.trip()
	if len(tr.in.Done) != 1 || tr.in.Done[0].Seq != 3 || tr.in.Done[0].Promote != nil {
		t.Fatalf("round trip %+v; want row 3's result, promoting nothing", tr.in)
	}
	// Still reserved to this worker in the database, row 3 is given back,
	// with its result: not before, while its call might be on its way.
	if len(tr.in.Release) != 1 || tr.in.Release[0] != 3 {
		t.Fatalf("round trip %+v; want reservation 3 given back with its result", tr.in)
	}
}

// A reservation starts in a finished row's place only while calls may go:
// not while the guard holds them back (a 429 pause, an open breaker without
// a fallback), nor when the leases were last renewed half a lease ago or
// more (the reservations may have passed to another worker), nor once the
// pipeline stopped.
func TestLoopSwapsOnlyWhileCallsMayGo(t *testing.T) {
	for _, c := range []struct {
		about string
		g     *fakeGuard
		stale bool // the heartbeat last renewed the leases a lease ago
		stop  bool // the pipeline stopped (a provider that cannot serve)
		swap  bool
	}{
		{about: "no guard", swap: true},
		{about: "a guard letting calls go", g: &fakeGuard{}, swap: true},
		{about: "a 429 pause", g: &fakeGuard{cooldown: time.Second}},
		{about: "an open breaker", g: &fakeGuard{open: true}},
		{about: "an open breaker, with a fallback", g: &fakeGuard{open: true, fallback: true}, swap: true},
		{about: "leases not renewed for a lease", stale: true},
		{about: "the pipeline stopped", stop: true},
	} {
		t.Run(c.about, func(t *testing.T) {
			db := &fakeStore{reserves: true}
			if c.stale {
				db.heartbeat = func([]int64) error { return errors.New("connection refused") }
			}
			r := startLoop(t, WorkerConfig{Capacity: 1}, db, c.g)
			r.trip().answer(CycleOut{Claimed: claims([]int64{1}, 2)}, nil)
			j := r.job()
			if c.stale {
				r.w.renewed.Store(time.Now().Add(-db.lease).UnixNano())
			}
			if c.stop {
				r.p.Stop(engine.StopAuth)
			}
			finishRow(j, outcome.Success)
			if !c.swap {
				r.noJob("calls held back")
				tr := r.trip()
				for _, d := range tr.in.Done {
					if d.Promote != nil {
						t.Fatalf("row %d's result promotes reservation %d", d.Seq, d.Promote.Seq)
					}
				}
				return
			}
			if j := r.job(); j.Row.Seq != 2 {
				t.Fatalf("row %d started; want reservation 2", j.Row.Seq)
			}
			if tr := r.trip(); len(tr.in.Done) != 1 || tr.in.Done[0].Promote == nil {
				t.Fatalf("round trip %+v; want row 1's result promoting reservation 2", tr.in)
			}
		})
	}
}

// A claim runs the worker's own reservations first (Promote, within the
// rows it asks for); those it did not run stay reservations, and a row's
// place goes to the first of them.
func TestLoopClaimsItsReservationsFirst(t *testing.T) {
	r := startLoop(t, WorkerConfig{Capacity: 2}, &fakeStore{reserves: true}, nil)
	r.trip().answer(CycleOut{Claimed: claims([]int64{1}, 2, 3)}, nil)
	j1 := r.job()
	tr := r.trip()
	if tr.in.Want != 1 || !sameSeqs(tr.in.Promote, []int64{2}) {
		t.Fatalf("second claim %+v; want 1 row, reservation 2 first", tr.in)
	}
	// The claim ran none of them (another worker took reservation 2 after
	// its lease, say, and no row was free).
	tr.answer(CycleOut{}, nil)
	r.noJob("a claim that brought nothing")
	finishRow(j1, outcome.Success)
	if j := r.job(); j.Row.Seq != 2 {
		t.Fatalf("row %d started in row 1's place; want reservation 2, kept", j.Row.Seq)
	}
	tr = r.trip()
	if len(tr.in.Done) != 1 || tr.in.Done[0].Promote == nil || tr.in.Done[0].Promote.Seq != 2 {
		t.Fatalf("round trip %+v; want row 1's result promoting reservation 2", tr.in)
	}
	// Row 1 is on its way to be written: that round trip also claims the
	// place it leaves, reservation 3 first.
	if tr.in.Want != 1 || !sameSeqs(tr.in.Promote, []int64{3}) {
		t.Fatalf("round trip %+v; want a claim of 1 row, reservation 3 first", tr.in)
	}
	tr.answer(CycleOut{Written: 1, Promoted: []int64{2}, Claimed: claims([]int64{3})}, nil)
	if j := r.job(); j.Row.Seq != 3 {
		t.Fatalf("row %d started; want reservation 3, claimed", j.Row.Seq)
	}
}

// On an interrupt the worker stops its pipeline, claims nothing more,
// writes the rows that ran, gives back those it did not start (a give-back
// for a claimed row, a release for a reservation), and ends when nothing
// is left.
func TestLoopGivesBackOnInterrupt(t *testing.T) {
	r := startLoop(t, WorkerConfig{Capacity: 2}, &fakeStore{reserves: true}, nil)
	r.trip().answer(CycleOut{Claimed: claims([]int64{1, 2}, 3)}, nil)
	j1, j2 := r.job(), r.job()
	r.cancel()
	tr := r.trip()
	if !sameSeqs(tr.in.Release, []int64{3}) || tr.in.Want != 0 || tr.in.Reserve != 0 {
		t.Fatalf("round trip after the interrupt: %+v; want reservation 3 released, no claim", tr.in)
	}
	if stopped, reason, _ := r.p.state(); !stopped || reason != engine.StopInterrupted {
		t.Fatalf("pipeline stopped %v (%q); want stopped as interrupted", stopped, reason)
	}
	tr.answer(CycleOut{}, nil)
	finishRow(j1, outcome.Success)      // in flight: it finishes
	finishRow(j2, outcome.NotAttempted) // never sent
	var done []Completion
	for len(done) < 2 {
		tr := r.trip()
		if tr.in.Want != 0 || tr.in.Reserve != 0 || len(tr.in.Promote) != 0 {
			t.Fatalf("round trip after the interrupt claims: %+v", tr.in)
		}
		done = append(done, tr.in.Done...)
		tr.answer(CycleOut{Written: len(tr.in.Done)}, nil)
	}
	actions := map[int64]Action{}
	for _, d := range done {
		actions[d.Seq] = d.Action
	}
	if actions[1] != Finish || actions[2] != GiveBack {
		t.Fatalf("actions %v; want row 1 finished, row 2 given back", actions)
	}
	if err := r.end(); err != nil {
		t.Fatal(err)
	}
	if st := r.w.Stats(); st.GivenBack != 1 || st.Finished != 1 {
		t.Fatalf("stats %+v; want 1 given back, 1 finished", st)
	}
}

// The pipeline stopping on its own (a provider that cannot serve) stops the
// claims: the reservations are given back, nothing more is claimed.
func TestLoopStopsClaimingWhenThePipelineStops(t *testing.T) {
	r := startLoop(t, WorkerConfig{Capacity: 2}, &fakeStore{reserves: true}, nil)
	r.trip().answer(CycleOut{Claimed: claims([]int64{1}, 2)}, nil)
	j1 := r.job()
	tr := r.trip() // the place left, reservation 2 first
	r.p.Stop(engine.StopAuth)
	tr.answer(CycleOut{}, nil)
	tr = r.trip()
	if tr.in.Want != 0 || tr.in.Reserve != 0 || !sameSeqs(tr.in.Release, []int64{2}) {
		t.Fatalf("round trip after the pipeline stopped: %+v; want reservation 2 released, no claim", tr.in)
	}
	tr.answer(CycleOut{}, nil)
	finishRow(j1, outcome.NotAttempted)
	tr = r.trip()
	if len(tr.in.Done) != 1 || tr.in.Done[0].Action != GiveBack {
		t.Fatalf("round trip %+v; want row 1 given back", tr.in)
	}
	tr.answer(CycleOut{Written: 1}, nil)
	if err := r.end(); err != nil {
		t.Fatal(err)
	}
}

// A round trip that fails is sent again, results and all, after a backoff;
// as it carried a claim, whose commit may have happened with its answer
// lost, the next one reconciles: it lists the rows the worker holds, so
// that the others leased to it are given back.
func TestLoopReconcilesAfterALostRoundTrip(t *testing.T) {
	r := startLoop(t, WorkerConfig{Capacity: 2}, &fakeStore{}, nil)
	r.trip().answer(CycleOut{Claimed: claims([]int64{1})}, nil)
	j1 := r.job()
	tr := r.trip()
	tr.answer(CycleOut{}, nil) // the claim of the row left: nothing
	finishRow(j1, outcome.Success)
	tr = r.trip()
	if len(tr.in.Done) != 1 || tr.in.Want == 0 || tr.in.Reconcile {
		t.Fatalf("round trip %+v; want row 1's result with a claim, no reconcile", tr.in)
	}
	tr.answer(CycleOut{}, errors.New("read tcp: connection reset by peer"))
	tr = r.trip()
	if len(tr.in.Done) != 1 || tr.in.Done[0].Seq != 1 || !tr.in.Reconcile || !sameSeqs(tr.in.Held, []int64{1}) {
		t.Fatalf("round trip after a failed one: %+v; want row 1's result again, reconciling with row 1 held", tr.in)
	}
	tr.answer(CycleOut{Written: 1, Claimed: claims([]int64{2})}, nil)
	j2 := r.job()
	finishRow(j2, outcome.Success)
	for tr = r.trip(); len(tr.in.Done) == 0; tr = r.trip() {
		if tr.in.Reconcile {
			t.Fatalf("round trip %+v reconciles again after one went through", tr.in)
		}
		tr.answer(CycleOut{}, nil)
	}
	if tr.in.Reconcile {
		t.Fatalf("round trip %+v reconciles again after one went through", tr.in)
	}
	if st := r.w.Stats(); st.Finished != 1 {
		t.Fatalf("stats %+v; want row 1 finished once", st)
	}
}

// A statement the database refused (not the connection, not a deadlock)
// ends the run with that error; the pipeline is stopped.
func TestLoopEndsOnARefusedStatement(t *testing.T) {
	r := startLoop(t, WorkerConfig{Capacity: 1}, &fakeStore{}, nil)
	r.trip().answer(CycleOut{}, &pgconn.PgError{Code: "42P01", Message: `relation "hfsent.item" does not exist`})
	err := r.end()
	if err == nil || !strings.Contains(err.Error(), "the database refused") || !strings.Contains(err.Error(), "42P01") {
		t.Fatalf("run ended with %v; want the database's refusal", err)
	}
	if stopped, reason, _ := r.p.state(); !stopped || reason != engine.StopInterrupted {
		t.Fatalf("pipeline stopped %v (%q)", stopped, reason)
	}
}

// With ExitWhenDone, a claim made while the worker holds nothing asks
// whether the batch has rows left; when it has none, the run ends, the
// pipeline stopped for no reason (nothing is cut).
func TestLoopExitsWhenTheBatchIsDone(t *testing.T) {
	r := startLoop(t, WorkerConfig{Capacity: 2, ExitWhenDone: true}, &fakeStore{}, nil)
	tr := r.trip()
	if !tr.in.AskRemaining {
		t.Fatalf("first claim %+v does not ask whether rows remain", tr.in)
	}
	tr.answer(CycleOut{Claimed: claims([]int64{1}), Remaining: true}, nil)
	j1 := r.job()
	tr = r.trip()
	if tr.in.AskRemaining {
		t.Fatalf("a claim made while holding a row asks whether rows remain: %+v", tr.in)
	}
	tr.answer(CycleOut{}, nil)
	finishRow(j1, outcome.Success)
	tr = r.trip()
	tr.answer(CycleOut{Written: 1, Remaining: true}, nil) // another worker's row still runs
	r.noTrip("after an empty claim, rows remaining")
	r.w.poke()
	tr = r.trip()
	if !tr.in.AskRemaining {
		t.Fatalf("claim %+v does not ask whether rows remain", tr.in)
	}
	tr.answer(CycleOut{Remaining: false}, nil)
	if err := r.end(); err != nil {
		t.Fatal(err)
	}
	if stopped, reason, aborted := r.p.state(); !stopped || reason != engine.StopNone || aborted {
		t.Fatalf("pipeline stopped %v (%q, aborted %v); want stopped for no reason", stopped, reason, aborted)
	}
}

// A 429 pause or an open breaker seen here goes to the batch with the next
// round trip (again after a failed one); the batch's, seen by the claim,
// goes to this worker's guard.
func TestLoopSharesBackpressure(t *testing.T) {
	g := &fakeGuard{}
	r := startLoop(t, WorkerConfig{Capacity: 1}, &fakeStore{}, g)
	var hooks resilience.Config
	r.w.Tune(&hooks)
	// Both are set while the first round trip is on its way (one at most
	// at a time, maxCycles): set after it, the next could leave between
	// the two and report the pause alone.
	first := r.trip()
	hooks.OnPause(time.Now().Add(2 * time.Second))
	hooks.OnOpen(time.Now().Add(5 * time.Second))
	first.answer(CycleOut{}, nil)
	tr := r.trip()
	if tr.in.PauseFor <= time.Second || tr.in.PauseFor > 2*time.Second || tr.in.OpenFor <= 4*time.Second || tr.in.OpenFor > 5*time.Second {
		t.Fatalf("round trip reports pause %s and open %s; want about 2s and 5s", tr.in.PauseFor, tr.in.OpenFor)
	}
	tr.answer(CycleOut{}, errors.New("connection refused"))
	tr = r.trip()
	if tr.in.PauseFor <= 0 || tr.in.OpenFor <= 0 {
		t.Fatalf("round trip after a failed one reports pause %s and open %s; want them again", tr.in.PauseFor, tr.in.OpenFor)
	}
	sent := time.Now()
	tr.answer(CycleOut{Paused: 3 * time.Second, Open: 7 * time.Second}, nil)
	deadline := time.Now().Add(patience)
	for {
		g.mu.Lock()
		p, o := g.pausedUntil, g.openUntil
		g.mu.Unlock()
		if !p.IsZero() && !o.IsZero() {
			if p.Sub(sent) < 3*time.Second || o.Sub(sent) < 7*time.Second {
				t.Fatalf("guard paused until +%s, open until +%s; want +3s and +7s", p.Sub(sent), o.Sub(sent))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the batch's pause and breaker were not applied to the guard")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A batch dropped while the worker runs (a round trip or a heartbeat finds
// it gone) ends the run at once with ErrBatchGone: the calls in flight are
// cut (Abort), and nothing more is written.
func TestLoopStopsWhenTheBatchIsGone(t *testing.T) {
	t.Run("round trip", func(t *testing.T) {
		r := startLoop(t, WorkerConfig{Capacity: 2}, &fakeStore{}, nil)
		r.trip().answer(CycleOut{Claimed: claims([]int64{1})}, nil)
		j1 := r.job()
		r.trip().answer(CycleOut{}, ErrBatchGone)
		if err := r.end(); !errors.Is(err, ErrBatchGone) {
			t.Fatalf("run ended with %v; want the batch gone", err)
		}
		if _, _, aborted := r.p.state(); !aborted {
			t.Fatal("the calls in flight were not cut")
		}
		finishRow(j1, outcome.NotAttempted)
	})
	t.Run("heartbeat", func(t *testing.T) {
		gone := make(chan struct{})
		db := &fakeStore{heartbeat: func([]int64) error {
			<-gone
			return ErrBatchGone
		}}
		r := startLoop(t, WorkerConfig{Capacity: 2}, db, nil)
		r.trip().answer(CycleOut{Claimed: claims([]int64{1})}, nil)
		j1 := r.job()
		r.trip().answer(CycleOut{}, nil)
		close(gone)
		if err := r.end(); !errors.Is(err, ErrBatchGone) {
			t.Fatalf("run ended with %v; want the batch gone", err)
		}
		if _, _, aborted := r.p.state(); !aborted {
			t.Fatal("the calls in flight were not cut")
		}
		finishRow(j1, outcome.NotAttempted)
	})
}

// Stopped with a database out of reach, the worker keeps trying to write
// its results for WriteGrace, then ends saying how many it could not.
func TestLoopGivesUpOnAnUnreachableDatabaseAfterTheGrace(t *testing.T) {
	r := startLoop(t, WorkerConfig{Capacity: 1, WriteGrace: 300 * time.Millisecond}, &fakeStore{}, nil)
	r.trip().answer(CycleOut{Claimed: claims([]int64{1})}, nil)
	j1 := r.job()
	finishRow(j1, outcome.Success)
	r.trip().answer(CycleOut{}, errors.New("connection refused"))
	r.cancel()
	deadline := time.After(patience)
	for {
		select {
		case tr := <-r.db.trips:
			if len(tr.in.Done) != 1 {
				t.Fatalf("round trip %+v; want row 1's result, kept", tr.in)
			}
			tr.answer(CycleOut{}, errors.New("connection refused"))
		case err := <-r.result:
			r.ended = true
			if err == nil || !strings.Contains(err.Error(), "1 results could not be written") {
				t.Fatalf("run ended with %v; want the result not written", err)
			}
			return
		case <-deadline:
			t.Fatal("the worker did not give up")
		}
	}
}

// A row is sent only while its lease holds by the worker's own clock
// (engine.Job.Lease): the rows of a claim whose answer came back past the
// lease (the process was stopped with the round trip on its way) are
// submitted lapsed.
func TestLoopLeasesCountFromTheClaimSent(t *testing.T) {
	db := &fakeStore{lease: 200 * time.Millisecond}
	r := startLoop(t, WorkerConfig{Capacity: 1}, db, nil)
	tr := r.trip()
	time.Sleep(db.lease)
	tr.answer(CycleOut{Claimed: claims([]int64{1})}, nil)
	if j := r.job(); j.Lease == nil || j.Lease.Held() {
		t.Fatalf("row 1 submitted with lease %v, held; its claim was sent a lease ago", j.Lease)
	}
}

// A reservation starts in a finished row's place only while both leases
// hold by the worker's clock: not when the heartbeat went through but the
// database renewed neither (they had expired there: the place may be
// another worker's), although the heartbeat itself is recent.
func TestLoopSwapsOnlyUnderLiveLeases(t *testing.T) {
	db := &fakeStore{reserves: true, lease: 300 * time.Millisecond,
		heartbeat: func([]int64) error { return nil }} // answered, nothing renewed
	r := startLoop(t, WorkerConfig{Capacity: 1}, db, nil)
	r.trip().answer(CycleOut{Claimed: claims([]int64{1}, 2)}, nil)
	j := r.job()
	time.Sleep(db.lease)
	finishRow(j, outcome.Success)
	r.noJob("both leases lapsed")
	for _, d := range r.trip().in.Done {
		if d.Promote != nil {
			t.Fatalf("row %d's result promotes reservation %d", d.Seq, d.Promote.Seq)
		}
	}
}

// A reservation started in a finished row's place runs on that row's place
// until the swap commits: then on a lease of its own; a swap refused (the
// finished row's lease had passed on) leaves it with no place, lapsed.
func TestLoopSwappedRowTakesItsLeaseFromTheSwap(t *testing.T) {
	for _, committed := range []bool{true, false} {
		t.Run(fmt.Sprintf("committed=%v", committed), func(t *testing.T) {
			r := startLoop(t, WorkerConfig{Capacity: 1}, &fakeStore{reserves: true}, nil)
			r.trip().answer(CycleOut{Claimed: claims([]int64{1}, 2)}, nil)
			finishRow(r.job(), outcome.Success)
			j := r.job()
			l, ok := j.Lease.(*rowLease)
			if !ok || !l.Held() || l.slot.Load() == nil {
				t.Fatalf("reservation 2 started with lease %+v; want held, on row 1's place", j.Lease)
			}
			out := CycleOut{Written: 1}
			if committed {
				out.Promoted = []int64{2}
			}
			r.trip().answer(out, nil)
			settled := func() bool {
				if committed {
					return l.slot.Load() == nil && l.Held()
				}
				return !l.Held()
			}
			deadline := time.Now().Add(patience)
			for !settled() {
				if time.Now().After(deadline) {
					t.Fatalf("swap committed=%v: lease held %v, on another's place %v", committed, l.Held(), l.slot.Load() != nil)
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
}

// A row this worker still runs can come back to it in a claim: stopped
// past its lease, the worker's own heartbeat rescued the row and its next
// claim took it again, at the next attempt, while the old call had not
// ended (issue 31, item 5). The old attempt's result is superseded: it is
// never reported, so a round trip carries one result a row (two made
// PostgreSQL refuse the whole write, SQLSTATE 21000), the newest attempt's.
func TestLoopReportsARowClaimedAgainOnce(t *testing.T) {
	// The same attempt too: a reservation given back after its swap was
	// refused, its job not ended, and claimed again.
	for _, c := range []struct {
		order   string
		attempt int
	}{{"old first", 2}, {"new first", 2}, {"old before the claim", 2}, {"old first", 1}, {"new first", 1}} {
		order := c.order
		t.Run(fmt.Sprintf("%s, attempt %d", order, c.attempt), func(t *testing.T) {
			r := startLoop(t, WorkerConfig{Capacity: 3}, &fakeStore{}, nil)
			r.trip().answer(CycleOut{Claimed: claims([]int64{1, 5})}, nil)
			j1, j5 := r.job(), r.job()
			tr := r.trip() // the place left
			if order == "old before the claim" {
				finishRow(j1, outcome.NotAttempted) // lapsed: never sent
			}
			again := Claimed{Seq: 1, Attempt: c.attempt, RequestID: "r", Text: "t"}
			tr.answer(CycleOut{Claimed: []Claimed{again}}, nil)
			j1b := r.job()
			finishRow(j5, outcome.Success)
			tr = r.trip() // row 5's result: on its way while both of row 1's end
			switch order {
			case "old first":
				finishRow(j1, outcome.NotAttempted)
				finishRow(j1b, outcome.Success)
			case "new first", "old before the claim":
				finishRow(j1b, outcome.Success)
				finishRow(j1, outcome.NotAttempted)
			}
			// Every round trip until the loop, its claims answered empty,
			// waits for the poll with nothing left to write.
			var done []Completion
			for tr != nil {
				done = append(done, tr.in.Done...)
				tr.answer(CycleOut{Written: len(tr.in.Done)}, nil)
				select {
				case tr = <-r.db.trips:
					r.taken = append(r.taken, tr)
				case <-time.After(300 * time.Millisecond):
					tr = nil
				}
			}
			var ones []Completion
			for _, d := range done {
				if d.Seq == 1 {
					ones = append(ones, d)
				}
			}
			if len(ones) != 1 || ones[0].Attempt != c.attempt || ones[0].Action != Finish {
				t.Fatalf("row 1 reported %+v; want once, the newer claim's answer", ones)
			}
		})
	}
}

// A reservation the worker may no longer start, its lease lapsed by its
// own clock (stopped or cut off past it), or its swap refused, is given
// back in the next round trip, so that any worker, this one too, claims it
// at once: kept leased to it in the database, no claim of this worker's
// took it again, and a batch whose other workers had ended never finished
// (issue 31, item 4).
func TestLoopGivesBackReservationsItCannotStart(t *testing.T) {
	t.Run("lapsed", func(t *testing.T) {
		db := &fakeStore{reserves: true, lease: 300 * time.Millisecond,
			heartbeat: func([]int64) error { return nil }} // answered, nothing renewed
		r := startLoop(t, WorkerConfig{Capacity: 1}, db, nil)
		r.trip().answer(CycleOut{Claimed: claims([]int64{1}, 2)}, nil)
		j := r.job()
		time.Sleep(db.lease)
		finishRow(j, outcome.Success)
		if tr := r.trip(); !slices.Contains(tr.in.Release, 2) {
			t.Fatalf("round trip %+v after reservation 2's lease lapsed; want it given back", tr.in)
		}
	})
	t.Run("swap refused", func(t *testing.T) {
		r := startLoop(t, WorkerConfig{Capacity: 1}, &fakeStore{reserves: true}, nil)
		r.trip().answer(CycleOut{Claimed: claims([]int64{1}, 2)}, nil)
		finishRow(r.job(), outcome.Success)
		j2 := r.job()                              // reservation 2, started in row 1's place
		r.trip().answer(CycleOut{Written: 1}, nil) // the swap refused
		finishRow(j2, outcome.NotAttempted)
		for tr := r.trip(); ; tr = r.trip() {
			if slices.Contains(tr.in.Release, 2) {
				break
			}
			if len(tr.in.Done) > 0 && tr.in.Done[0].Seq == 2 {
				t.Fatalf("reservation 2, its swap refused, given back only as a result (%+v), which the fence refuses", tr.in)
			}
			tr.answer(CycleOut{}, nil)
		}
	})
}
