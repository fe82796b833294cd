package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hfsent/hfsent/internal/cache"
	"github.com/hfsent/hfsent/internal/dedupe"
	"github.com/hfsent/hfsent/internal/input"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/resilience"
	"github.com/hfsent/hfsent/internal/results"
)

// Pipeline is the one path a row takes to its outcome, whoever brings it: a
// CSV row (classify), an HTTP request (serve) or a claimed queue row
// (worker). It admits a row when a slot is free within the admission wait
// (or records local_capacity, never sending it), lets identical texts share
// one call (dedupe), packs rows into batches, makes the guarded call, and
// maps every failure through the outcome table.
type Pipeline struct {
	cfg   Config
	guard *resilience.Guard // the one way to the provider: stage 1's
	// stages is the cascade: stage 1 (guard) and each later stage a row
	// may go on to (cascade.go); one stage without a cascade.
	stages []*stageRun
	slots  *resilience.Slots     // the guard's: admission takes a row's first slot from it
	cache  *dedupe.Cache[answer] // nil without Config.Dedupe
	names  names
	start  time.Time

	admitq chan *Job
	// ahead are jobs taken from admitq and looked up in the response
	// cache, not yet admitted (the admitter's own); aheadN counts them for
	// other goroutines.
	ahead  []*Job
	aheadN atomic.Int64
	// admitCtx ends when admission must stop, for any reason; its Done is
	// also the signal that no call not yet sent may be sent.
	admitCtx  context.Context
	stopAdmit context.CancelCauseFunc
	// callCtx ends only after the grace period that follows the stop.
	callCtx   context.Context
	stopCalls context.CancelFunc

	jobs        sync.WaitGroup // jobs not yet finished
	idle        chan func()    // workers waiting for work take it here
	admitter    chan struct{}  // closed when the admission loop has ended
	closeOnce   sync.Once
	fatalOnce   sync.Once
	fatalMsg    atomic.Pointer[string] // what the fatal answer said, and what to do
	graceCancel func() bool

	// turnedAway (unix nanos, 0: never) is when a row last got no slot
	// within its admission wait, for Config.ShedStandingQueue.
	turnedAway atomic.Int64

	// Rows held for the endpoint's verdict (awaitVerdict). quiet is closed
	// once no more evidence can come: the source ended or is idle, no row
	// is being admitted, and every call in progress is a held row.
	holdMu     sync.Mutex
	held       atomic.Int32
	admitting  atomic.Int32
	sourceIdle bool
	quiet      chan struct{}
	quietOnce  sync.Once

	active, maxActive atomic.Int64
	reused            atomic.Int64
	cacheHits         atomic.Int64
}

// Job is one row submitted to the pipeline.
type Job struct {
	Row input.Row
	// At is when the row was read or received: the admission wait counts
	// from here. Zero means now.
	At time.Time
	// Ctx is the caller's context (an HTTP request's): when it ends, the
	// row's call is cancelled and its slot freed. nil: the pipeline's own.
	Ctx context.Context
	// Deadline bounds the row: admission, every attempt and every wait.
	// Zero: Config.RowDeadline from when its call starts.
	Deadline time.Time
	// Done receives the row's result, exactly once, from any goroutine.
	Done func(results.Row)
	// Group, when set, admits this job with the others of its group as
	// one (the items of one serve request): see Group.
	Group *Group
	// Lease, when set, is what the row holds outside the process to be
	// sent (a queue's claim, and its place under the queue's caps): its
	// call is sent only while Held reports true, asked just before the
	// call goes, after every wait. A row whose lease lapsed ends
	// not_attempted, never sent by this process.
	Lease Lease

	cache cachedJob // the pipeline's: what the response cache holds for it
}

// Lease is a job's hold on its row outside the process (Job.Lease).
type Lease interface {
	// Held reports whether the row may be sent now, by the process's own
	// monotonic clock. It is called from the row's goroutine, just before
	// each call.
	Held() bool
}

// Group is jobs admitted as one. The first of them to come up for a slot
// waits for one within the admission wait, as any job does; if it gets
// one, the group is admitted, and each of the others then takes a slot as
// soon as one is free, waiting up to its own Deadline rather than the
// admission wait (in the group's order, while other jobs keep being
// admitted). If it gets none, the group is refused: every job of it ends at
// once with the same outcome (local_capacity, or why no slot was given),
// and none is sent. So a request of 256 texts at -c 8 is answered whole,
// or refused whole, never cut at the admission wait.
type Group struct {
	mu       sync.Mutex
	decided  bool
	refusal  *results.Row // set when refused
	queue    []item       // admitted jobs waiting for a slot, in order
	draining bool         // a goroutine is giving queue its slots
}

// NewGroup is a group with no job yet.
func NewGroup() *Group { return &Group{} }

// Refused is the outcome the group was refused with, if it was.
func (g *Group) Refused() (results.Row, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.refusal == nil {
		return results.Row{}, false
	}
	return *g.refusal, true
}

// answer is what the dedupe cache remembers of a success. Label and model
// are numbers in the pipeline's table of names: a cache of 65,536 answers
// then holds no pointer for the garbage collector to follow, and no copy of
// a name.
type answer struct {
	label, model uint16
	stage        uint16 // the cascade's stage that answered, from 1
	score        float64
	// scores are the answer's first maxReusedScores label scores (--top-k,
	// --multi-label), shared with the row that got them (never changed).
	scores []results.LabelScore
}

// maxReusedScores bounds the scores a remembered answer keeps, so that
// the dedupe window's memory stays bounded whatever the label set: 65,536
// answers of 10 are some 16 MB.
const maxReusedScores = 10

// names numbers the few label and model names a run meets.
type names struct {
	mu   sync.Mutex
	ids  map[string]uint16
	list []string
}

// id numbers s; ok is false once the table is full (a model answering free
// text as labels): such answers are not remembered.
func (n *names) id(s string) (uint16, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if id, ok := n.ids[s]; ok {
		return id, true
	}
	if len(n.list) >= 1<<16-1 {
		return 0, false
	}
	if n.ids == nil {
		n.ids = map[string]uint16{}
	}
	id := uint16(len(n.list))
	n.ids[s] = id
	n.list = append(n.list, s)
	return id, true
}

func (n *names) name(id uint16) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.list[id]
}

// remember turns a success into what the cache keeps; ok is false when it
// cannot be kept.
func (p *Pipeline) remember(res results.Row) (answer, bool) {
	if res.Outcome != outcome.Success || res.Label == "" {
		return answer{}, false
	}
	l, ok1 := p.names.id(res.Label)
	m, ok2 := p.names.id(res.Model)
	var scores []results.LabelScore
	if p.cfg.KeepScores {
		scores = res.Scores
	}
	if len(scores) > maxReusedScores {
		scores = scores[:maxReusedScores:maxReusedScores]
	}
	return answer{label: l, model: m, stage: uint16(max(0, min(res.Stage, 1<<16-1))), score: res.Score, scores: scores}, ok1 && ok2
}

// NewPipeline starts a pipeline in front of g, the guarded provider: its
// slots bound the calls in flight. Cancelling ctx stops admission (as Stop
// does); calls in flight then get the grace period.
func NewPipeline(ctx context.Context, g *resilience.Guard, cfg Config) *Pipeline {
	cfg.defaults(g.Slots().Max())
	p := &Pipeline{cfg: cfg, guard: g, stages: stagesOf(g, cfg), slots: g.Slots(), start: time.Now(), admitter: make(chan struct{}), idle: make(chan func()), quiet: make(chan struct{})}
	if cfg.Dedupe {
		p.cache = dedupe.New[answer](cfg.DedupeSize)
	}
	p.admitq = make(chan *Job, cfg.Window)
	p.admitCtx, p.stopAdmit = context.WithCancelCause(ctx)
	p.callCtx, p.stopCalls = context.WithCancel(context.WithoutCancel(ctx))
	// Once admission stops, calls in flight get the grace period, then end.
	p.graceCancel = context.AfterFunc(p.admitCtx, func() {
		t := time.NewTimer(cfg.Grace)
		defer t.Stop()
		select {
		case <-t.C:
			p.stopCalls()
		case <-p.callCtx.Done():
		}
	})
	go func() {
		defer close(p.admitter)
		p.admit()
	}()
	if cfg.StopOnFatal {
		for _, s := range p.stages {
			// Admission stops the moment an endpoint is found to refuse
			// every call, before the rows that learn it come back, and
			// when a provider is found down (never one a later stage
			// takes over from: resilience.Config.Escalates): the rows
			// waiting for it stop waiting.
			s.Guard.Verdict().OnRefused(p.fatal)
			s.Guard.OnDown(func(cause string) {
				p.fatal(&provider.Error{Outcome: outcome.UpstreamFailed, Down: true, Msg: cause})
			})
			// And when an answer stops the run, before its slot is free.
			s.Guard.OnStop(p.fatal)
		}
	}
	if l := p.ledger(); l != nil {
		// --max-spend: the ledger refused a call; nothing more is sent.
		l.OnLimit(func() { p.Stop(StopMaxSpend) })
	}
	return p
}

// Config is the pipeline's configuration, its defaults filled in.
func (p *Pipeline) Config() Config { return p.cfg }

// Slots is what bounds the pipeline's calls in flight: the guard's.
func (p *Pipeline) Slots() *resilience.Slots { return p.slots }

// Guard is the guarded provider the pipeline sends its calls through.
func (p *Pipeline) Guard() *resilience.Guard { return p.guard }

// Stop stops admission for reason: rows waiting are finished not_attempted,
// no call not yet sent is sent, and calls in flight get the grace period.
func (p *Pipeline) Stop(reason StopReason) { p.stopAdmit(errStop{reason}) }

// Abort is Stop with no grace: the calls in flight end now, their rows
// not_attempted or cut (a worker whose batch was dropped: no result of
// theirs can be written).
func (p *Pipeline) Abort(reason StopReason) {
	p.Stop(reason)
	p.stopCalls()
}

// Stopped is closed once admission has stopped.
func (p *Pipeline) Stopped() <-chan struct{} { return p.admitCtx.Done() }

// StopReason is why admission stopped (StopNone while it goes on).
func (p *Pipeline) StopReason() StopReason {
	if p.admitCtx.Err() == nil {
		return StopNone
	}
	if es, ok := context.Cause(p.admitCtx).(errStop); ok {
		return es.reason
	}
	return StopInterrupted
}

// Submit hands a job to admission; it blocks while the admission queue is
// full. It must not be called after Close.
func (p *Pipeline) Submit(j *Job) {
	if j.At.IsZero() {
		j.At = time.Now()
	}
	p.keyJob(j)
	p.jobs.Add(1)
	p.admitq <- j
}

// Reject finishes j as invalid_input without sending it: problem is what
// Rules.Check said.
func (p *Pipeline) Reject(j *Job, problem string) {
	if j.At.IsZero() {
		j.At = time.Now()
	}
	p.jobs.Add(1)
	p.finish(j, results.Row{Outcome: outcome.InvalidInput, Error: problem, StartedMs: -1})
}

// Close ends submission and waits until every job submitted is finished.
func (p *Pipeline) Close() {
	p.closeOnce.Do(func() { close(p.admitq) })
	<-p.admitter
	p.SourceIdle()
	p.jobs.Wait()
	p.graceCancel()
	p.stopCalls()
	p.stopAdmit(errStop{StopNone}) // no-op when it stopped earlier, for a reason
}

// Remember adds an answer found elsewhere (a row kept by --resume) to the
// dedupe cache.
func (p *Pipeline) Remember(text string, res results.Row) {
	if p.cache == nil || p.anyAnswers() {
		// A kept row was written mapped and calibrated: it is not the
		// answer as the model gave it, which dedupe must hand on.
		return
	}
	if a, ok := p.remember(res); ok {
		p.cache.Add(p.cache.Key(text), a)
	}
}

// SourceIdle tells the pipeline that no row is coming for now (a queue
// claim found none; Close says it for the end of the input): a row held for
// the endpoint's verdict then waits no longer for rows that would decide
// it, once every call in progress is held too.
func (p *Pipeline) SourceIdle() {
	p.holdMu.Lock()
	p.sourceIdle = true
	p.checkQuiet()
	p.holdMu.Unlock()
}

// checkQuiet closes quiet when no more evidence can come. holdMu is held.
func (p *Pipeline) checkQuiet() {
	if p.sourceIdle && len(p.admitq) == 0 && p.aheadN.Load() == 0 && p.admitting.Load() == 0 && p.active.Load() <= int64(p.held.Load()) {
		p.quietOnce.Do(func() { close(p.quiet) })
	}
}

// awaitVerdict decides who is at fault for a row's 4xx (one that is not
// 401/402/403/404/429) that came before the endpoint's verdict: a batch run
// holds the row, without a slot, until a call succeeds (the text was at
// fault: upstream_request_rejected, final), the endpoint is found to
// refuse every call (upstream_endpoint, which stops the run and is redone
// by --resume), the run stops, its deadline passes, or no more evidence can
// come (quiet). A server does not hold its callers: it records the answer
// as the verdict stands.
func (p *Pipeline) awaitVerdict(ctx context.Context, g *resilience.Guard, err error) error {
	v := g.Verdict()
	if !p.cfg.StopOnFatal || !v.Pending(err) {
		return v.Judge(err)
	}
	p.holdMu.Lock()
	p.held.Add(1)
	p.checkQuiet()
	p.holdMu.Unlock()
	select {
	case <-v.Done():
	case <-p.quiet:
	case <-p.admitCtx.Done():
	case <-ctx.Done():
	}
	p.held.Add(-1)
	return v.Judge(err)
}

// awaitSample holds admission (a batch's) while the sample that decides
// whether the endpoint refuses every call is on its way: one round trip,
// and no row is sent into an endpoint about to be found refusing.
func (p *Pipeline) awaitSample() {
	if !p.cfg.StopOnFatal {
		return
	}
	v := p.guard.Verdict()
	if !v.Probing() {
		return
	}
	select {
	case <-v.Done():
	case <-p.admitCtx.Done():
		return
	}
}

// callEnded notes that a call in progress ended: the rows held for the
// verdict may be all that is left.
func (p *Pipeline) callEnded() {
	p.active.Add(-1)
	if p.held.Load() > 0 {
		p.holdMu.Lock()
		p.checkQuiet()
		p.holdMu.Unlock()
	}
}

// StopDetail says what the answer that stopped admission said, and what to
// do about it as Config.Advice words it ("" when no answer did).
func (p *Pipeline) StopDetail() string {
	if m := p.fatalMsg.Load(); m != nil {
		return *m
	}
	return ""
}

// Stats is what the pipeline did so far, beside the calls (the guard's
// counters: Guard().Stats).
type Stats struct {
	Reused    int64 // rows answered by an identical text's answer
	CacheHits int64 // rows answered from the response cache
	Active    int64 // calls in flight now
	MaxActive int64
}

// Stats returns the counts so far.
func (p *Pipeline) Stats() Stats {
	return Stats{Reused: p.reused.Load(), CacheHits: p.cacheHits.Load(), Active: int64(p.slots.InUse()), MaxActive: p.maxActive.Load()}
}

// Summary is what the pipeline did, for a run's summary: the calls as the
// guard counted them, the rows reused, and why admission stopped. The
// caller adds the rows (Run counts the ones it wrote; a worker, the ones it
// finished).
func (p *Pipeline) Summary() Summary {
	elapsed := time.Since(p.start)
	var cs cache.RunStats
	if p.cfg.Cache != nil {
		cs = p.cfg.Cache.Stats()
	}
	provider := p.guard.Stats(elapsed)
	stages := p.stageSummaries(elapsed)
	if len(stages) > 1 {
		addLaterStages(&provider, stages[1:])
	}
	return Summary{
		Provider:   provider,
		Stages:     stages,
		Reused:     p.reused.Load(),
		CacheHits:  p.cacheHits.Load(),
		Cache:      cs,
		Spend:      p.ledger().Totals(),
		MaxActive:  p.maxActive.Load(),
		Elapsed:    elapsed,
		Stop:       p.StopReason(),
		StopDetail: p.StopDetail(),
	}
}

// admit takes jobs in arrival order and gives each a slot, or records why
// not. With batching, the jobs that follow one granted a slot ride in the
// same call, up to BatchSize; with dedupe, a job whose text is known or in
// flight takes no slot at all.
func (p *Pipeline) admit() {
	for {
		j, ok := p.next()
		if !ok {
			return
		}
		p.admitting.Add(1)
		p.awaitSample()
		p.admitOne(j)
		p.admitting.Add(-1)
	}
}

// admitOne gives j a slot, or records why not; a job of a group already
// decided is its group's (admitGrouped).
func (p *Pipeline) admitOne(j *Job) {
	it, ok := p.claim(j)
	if !ok {
		return
	}
	if j.Group != nil && p.admitGrouped(it) {
		return
	}
	permit, refusal := p.slot(j, p.admissionWait())
	if j.Group != nil {
		j.Group.decide(refusal)
	}
	if permit == nil {
		p.finish(j, refusal)
		p.release(it, results.Row{})
		return
	}
	p.dispatch(p.gather([]item{it}), permit)
}

// decide records the fate of the group's first job: refused with refusal
// (when it got no slot), or admitted.
func (g *Group) decide(refusal results.Row) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.decided {
		return
	}
	g.decided = true
	if refusal.Outcome != "" {
		g.refusal = &refusal
	}
}

// admitGrouped handles a job of a group already decided, and reports
// whether it did (false: the job is its group's first, and is admitted as
// any job is). A refused group's job ends at once; an admitted group's job
// takes a free slot now, or waits for one behind its group's others,
// without holding up admission.
func (p *Pipeline) admitGrouped(it item) bool {
	g := it.job.Group
	g.mu.Lock()
	if !g.decided {
		g.mu.Unlock()
		return false
	}
	if g.refusal != nil {
		refusal := *g.refusal
		g.mu.Unlock()
		p.finish(it.job, refusal)
		p.release(it, results.Row{})
		return true
	}
	if !g.draining {
		if permit := p.freeSlot(); permit != nil {
			g.mu.Unlock()
			p.dispatch(p.gather([]item{it}), permit)
			return true
		}
		g.draining = true
		go p.drain(g)
	}
	g.queue = append(g.queue, it)
	g.mu.Unlock()
	return true
}

// drain gives the admitted group's waiting jobs their slots, in order,
// each waiting up to its deadline.
func (p *Pipeline) drain(g *Group) {
	for {
		g.mu.Lock()
		if len(g.queue) == 0 {
			g.draining = false
			g.queue = nil
			g.mu.Unlock()
			return
		}
		it := g.queue[0]
		g.queue[0] = item{}
		g.queue = g.queue[1:]
		g.mu.Unlock()
		permit, refusal := p.slot(it.job, 0)
		if permit == nil {
			p.finish(it.job, refusal)
			p.release(it, results.Row{})
			continue
		}
		p.dispatch([]item{it}, permit)
	}
}

// freeSlot is a slot if one is free now, else nil.
func (p *Pipeline) freeSlot() *resilience.Permit {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a done context: Acquire grants a free slot, and waits for none
	permit, _ := p.slots.Acquire(ctx, p.admitCtx.Done())
	return permit
}

// acquire waits for a slot for j, up to the admission wait from when j was
// read. Without one, j is finished here (local_capacity, or not_attempted
// when admission stopped or its caller left) and the answer is nil.
func (p *Pipeline) acquire(j *Job) *resilience.Permit {
	permit, refusal := p.slot(j, p.admissionWait())
	if permit == nil {
		p.finish(j, refusal)
	}
	return permit
}

// slot waits for a slot for j, up to wait from when j was read (0: up to
// j's deadline, if it has one). Without one, the answer is nil and the
// result j is to end with: local_capacity, or not_attempted when admission
// stopped or its caller left.
func (p *Pipeline) slot(j *Job, wait time.Duration) (*resilience.Permit, results.Row) {
	ctx := p.admitCtx
	if j.Ctx != nil {
		ctx = j.Ctx
	}
	var cancel context.CancelFunc = func() {}
	if wait > 0 {
		ctx, cancel = context.WithDeadline(ctx, j.At.Add(wait))
	} else if !j.Deadline.IsZero() {
		ctx, cancel = context.WithDeadline(ctx, j.Deadline)
	}
	permit, err := p.slots.Acquire(ctx, p.admitCtx.Done())
	cancel()
	if err == nil {
		return permit, results.Row{}
	}
	// How long the provider asked every call to wait (a 429's
	// Retry-After).
	pause := p.slots.Paused()
	switch {
	case p.admitCtx.Err() != nil:
		return nil, p.notAttempted()
	case j.Ctx != nil && j.Ctx.Err() != nil:
		return nil, results.Row{Outcome: outcome.NotAttempted, StartedMs: -1, Error: "not sent: the caller went away"}
	case pause > 0:
		// No slot because the provider asked everyone to pause (a 429).
		return nil, results.Row{Outcome: outcome.UpstreamRateLimited, StartedMs: -1, RetryAfter: pause,
			Error: "not sent: the provider asked for a pause (HTTP 429 Retry-After)"}
	}
	// About one call's time frees a slot: when to try again.
	retry := max(time.Second, p.latency())
	msg := p.capacityMessage(wait)
	if n, held := p.slots.Share(); n >= 0 && !held {
		// A member of a fleet budget whose lease lapsed: nothing is sent
		// until it renews. Why, as the member said.
		msg = p.slots.LapseMessage()
	}
	p.turnedAway.Store(time.Now().UnixNano())
	return nil, results.Row{Outcome: outcome.LocalCapacity, StartedMs: -1, RetryAfter: retry, Error: msg}
}

// capacityMessage says why a row got no slot within wait, the admission
// wait it was given (0: its deadline).
func (p *Pipeline) capacityMessage(wait time.Duration) string {
	if wait <= 0 && p.cfg.AdmissionWait > 0 {
		return "no free slot before the deadline (" + p.cfg.DeadlineFlag + ")"
	}
	if wait > 0 && wait < p.cfg.AdmissionWait {
		return fmt.Sprintf("no free slot within %s: the slots are overloaded (rows turned away in the last %s)", wait, p.shedAfter())
	}
	if p.cfg.AdmissionWait > 0 {
		return fmt.Sprintf("no free slot within --admission-wait %s", p.cfg.AdmissionWait)
	}
	return "no free slot before the row's deadline"
}

// Config.ShedStandingQueue's figures: for ShedAfter (or four calls'
// latency, if longer) after a row was turned away for want of a slot, the
// queue is standing (the demand is above what the slots serve) and rows
// wait at most ShedWait in it. A sustained overload keeps turning rows
// away, so shedding lasts while it does.
const (
	ShedAfter = 100 * time.Millisecond
	ShedWait  = 5 * time.Millisecond
)

func (p *Pipeline) shedAfter() time.Duration { return max(ShedAfter, 4*p.latency()) }

// admissionWait is how long a row may wait for a slot now (0: no bound).
func (p *Pipeline) admissionWait() time.Duration {
	wait := p.cfg.AdmissionWait
	if wait > ShedWait && p.cfg.ShedStandingQueue {
		if at := p.turnedAway.Load(); at != 0 && time.Since(time.Unix(0, at)) < p.shedAfter() {
			wait = ShedWait
		}
	}
	return wait
}

func (p *Pipeline) latency() time.Duration { return p.guard.Counters().Latency() }

// dispatch runs one call, holding the slot already acquired for it, which
// the call's first attempt uses and then gives back.
func (p *Pipeline) dispatch(batch []item, permit *resilience.Permit) {
	n := p.active.Add(1)
	for m := p.maxActive.Load(); n > m && !p.maxActive.CompareAndSwap(m, n); m = p.maxActive.Load() {
	}
	p.run(func() { p.work(batch, permit) })
}

// work makes one batch's call (stage 1's, then a cascade's later stages'
// for the rows that go on) and finishes its jobs.
func (p *Pipeline) work(batch []item, permit *resilience.Permit) {
	var res []results.Row
	defer func() {
		// A panic in a classifier must not take the rows waiting to be
		// written with it: the batch ends upstream_failed, the run goes on.
		if v := recover(); v != nil {
			res = make([]results.Row, len(batch))
			for i := range res {
				res[i] = p.panicked(v)
			}
		}
		permit.Cancel()
		p.callEnded()
		for i, it := range batch {
			p.release(it, res[i])
			p.finish(it.job, res[i])
		}
	}()
	p.stages[0].reached.Add(int64(len(batch)))
	res = p.call(0, batch, permit)
	p.onward(batch, res)
}

// panicked logs a classifier's panic (v) and is the row it ends.
func (p *Pipeline) panicked(v any) results.Row {
	p.cfg.Logger.Error("internal error while classifying a row; it is recorded upstream_failed",
		"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	return results.Row{Outcome: outcome.UpstreamFailed, StartedMs: -1, Error: "internal error (see the log)"}
}

// run runs f on an idle worker goroutine, or a new one. A worker that has
// made a call has grown its stack to what net/http needs; reusing it
// spares every row that growth (a tenth of the CPU a row costs).
func (p *Pipeline) run(f func()) {
	select {
	case p.idle <- f:
	default:
		go p.worker(f)
	}
}

// workerIdle is how long a worker waits for more work before it exits.
const workerIdle = 2 * time.Second

func (p *Pipeline) worker(f func()) {
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		f()
		t.Reset(workerIdle)
		select {
		case f = <-p.idle:
		case <-t.C:
			return
		}
	}
}

// priced reports whether a cost is known for the calls: the ledger has
// prices.
func (p *Pipeline) priced() bool {
	l := p.ledger()
	return l != nil && l.Prices().Known()
}

func (p *Pipeline) finishNotAttempted(j *Job) { p.finish(j, p.notAttempted()) }

func (p *Pipeline) notAttempted() results.Row {
	return results.Row{Outcome: outcome.NotAttempted, StartedMs: -1, Error: "not sent: " + string(p.StopReason())}
}

func (p *Pipeline) ms(t time.Time) int64 { return t.Sub(p.start).Milliseconds() }

func (p *Pipeline) sinceStart() time.Duration { return time.Since(p.start) }

// finish completes a job.
func (p *Pipeline) finish(j *Job, res results.Row) {
	if res.Attempts == 0 && !res.Costed && p.priced() {
		res.Costed = true // no call: it cost nothing, at any price
	}
	res.Seq = j.Row.Seq
	res.RequestID = j.Row.ID
	res.QueuedMs = p.ms(j.At)
	res.FinishedMs = p.ms(time.Now())
	if p.cfg.IncludeText || p.cfg.KeepText {
		res.Text = j.Row.Text
	}
	res.Gold = j.Row.Gold
	if res.Cached {
		p.cacheHits.Add(1)
	}
	if res.Stage > 0 && res.Outcome.OK() {
		p.stages[res.Stage-1].answered.Add(1)
	}
	if res.Outcome == outcome.Fallback {
		p.guard.Counters().FallbackRows.Add(1)
	}
	if a := p.answers(res); a.Active() {
		a.Apply(&res)
	}
	j.Done(res)
	p.jobs.Done()
}

// errStop is the cause admission stopped with.
type errStop struct{ reason StopReason }

func (e errStop) Error() string { return string(e.reason) }

// classifyError maps a failed call to its outcome and a safe message.
func (p *Pipeline) classifyError(err error, rowCtx context.Context) (outcome.Code, string) {
	if pe, ok := provider.AsError(err); ok {
		if p.cfg.ProviderText {
			return pe.Outcome, pe.Summary()
		}
		return pe.Outcome, pe.Short()
	}
	switch {
	case resilience.IsLapsed(err):
		return outcome.NotAttempted, "not sent: the row's lease lapsed before its call (the process was stopped, or could not renew it, past its lease); another worker may hold it"
	case resilience.IsStopped(err):
		return outcome.NotAttempted, "not sent: " + string(p.StopReason())
	case p.callCtx.Err() != nil:
		return outcome.NotAttempted, "interrupted before an answer came"
	case errors.Is(rowCtx.Err(), context.DeadlineExceeded):
		return outcome.UpstreamTimeout, "no answer before the row's deadline (" + p.cfg.DeadlineFlag + ")"
	case errors.Is(err, context.Canceled):
		return outcome.NotAttempted, "the caller went away before an answer came"
	}
	return outcome.UpstreamFailed, "call failed"
}

// fatal stops admission when an answer says no other row can succeed
// either (the token, the account, the model, or no connection at all).
func (p *Pipeline) fatal(pe *provider.Error) {
	p.fatalOnce.Do(func() {
		reason, msg := p.fatalReason(pe)
		if p.cfg.Advice != nil {
			if advice := p.cfg.Advice(reason); advice != "" {
				msg += "; " + advice
			}
		}
		p.fatalMsg.Store(&msg)
		if !p.cfg.StopOnFatal {
			p.cfg.Logger.Error(msg)
			return
		}
		p.cfg.Logger.Error(msg + "; no more rows will be sent")
		p.stopAdmit(errStop{reason})
	})
}

// fatalReason says why pe stops the run, and what it said: the command
// that runs the pipeline adds what to do (Config.Advice).
func (p *Pipeline) fatalReason(pe *provider.Error) (StopReason, string) {
	said, summary := "", pe.Short()
	if p.cfg.ProviderText {
		summary = pe.Summary()
		if pe.Reason != "" {
			said = fmt.Sprintf(" (%q)", pe.Reason)
		}
		if pe.RequestID != "" {
			said += " [request id " + pe.RequestID + "]"
		}
	}
	switch {
	case pe.Unreachable:
		return StopUnreachable, "cannot reach the provider: " + pe.Msg + fmt.Sprintf(" (the first %d calls could not connect and none was ever answered)", resilience.UnreachableAfter)
	case pe.Down:
		return StopDown, "the provider has failed every call since the run began, and the circuit breaker's probe calls too (" + pe.Msg +
			"): it looks down, not busy"
	case pe.Outcome == outcome.UpstreamQuota:
		answered := "HTTP 402 Payment Required"
		if pe.Status != 0 && pe.Status != 402 {
			// An OpenAI-style server says it with a 429 insufficient_quota.
			answered = fmt.Sprintf("HTTP %d (quota exceeded)", pe.Status)
		}
		return StopQuota, "the provider answered " + answered + said +
			": the account cannot pay for these calls (no credits left, or pay-as-you-go is off for this provider)"
	case pe.Outcome == outcome.UpstreamNotFound:
		return StopNotFound, "the provider answered HTTP 404 Not Found" + said + ": it has no such model at this endpoint"
	case pe.Outcome == outcome.UpstreamEndpoint:
		return StopEndpoint, summary
	}
	return StopAuth, "the provider rejected the token (HTTP 401/403)" + said
}
