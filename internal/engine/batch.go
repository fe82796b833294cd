package engine

import (
	"context"
	"time"

	"github.com/hfsent/hfsent/internal/dedupe"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/resilience"
	"github.com/hfsent/hfsent/internal/results"
)

// item is a job on its way to a call. flight is set when this job leads the
// dedupe flight for its text and must end it.
type item struct {
	job    *Job
	key    dedupe.Key
	flight *dedupe.Flight[answer]
}

// claim decides whether j needs a call. It does not when admission has
// stopped (not_attempted), when its text's answer is known (reused at once),
// or when the same text is in flight (a waiter takes it, without a slot:
// its answer costs nothing, so it must not hold a slot a call could use).
//
// A text answered earlier in the run is reused (dedupe) before the
// response cache is asked, so that reused counts what it always did; a
// cache hit that leads its text's flight gives its answer to the rows
// waiting on it.
func (p *Pipeline) claim(j *Job) (item, bool) {
	hit := j.cache.hit != nil
	if p.admitCtx.Err() != nil && (!hit || !p.answersHits()) {
		p.finishNotAttempted(j)
		return item{}, false
	}
	// A text the provider cannot be sent (a prompt over its bound) is
	// invalid_input here, whatever brought it: it takes no slot and no
	// tokens of a --tpm.
	if err := p.guard.CheckText(j.Row.Text); err != nil {
		code, msg := p.classifyError(err, context.Background())
		p.finish(j, results.Row{Outcome: code, Error: msg, StartedMs: -1})
		return item{}, false
	}
	if p.cache == nil {
		if hit {
			p.answerHit(item{job: j})
			return item{}, false
		}
		return item{job: j}, true
	}
	k := p.cache.Key(j.Row.Text)
	v, st, f := p.cache.Claim(k)
	switch {
	case st == dedupe.Hit:
		p.finishReused(j, v)
		return item{}, false
	case st == dedupe.Wait:
		go p.follow(j, k, f)
		return item{}, false
	case hit:
		p.answerHit(item{job: j, key: k, flight: f})
		return item{}, false
	}
	return item{job: j, key: k, flight: f}, true
}

// follow waits for the call in flight for the same text. If it failed (the
// failure may have been passing), the text passes to one waiter, which asks
// again; the others wait for that call in turn.
func (p *Pipeline) follow(j *Job, k dedupe.Key, f *dedupe.Flight[answer]) {
	for {
		<-f.Done() // every flight is finished: its leader is always completed
		if v, ok := f.Result(); ok {
			p.finishReused(j, v)
			return
		}
		next, lead := p.cache.Follow(f)
		if next == nil || lead {
			it := item{job: j, key: k, flight: next}
			if p.admitCtx.Err() != nil {
				p.finishNotAttempted(j)
				p.release(it, results.Row{})
				return
			}
			permit := p.acquire(j)
			if permit == nil {
				p.release(it, results.Row{})
				return
			}
			p.dispatch([]item{it}, permit)
			return
		}
		f = next
	}
}

// release ends the job's dedupe flight, or remembers its answer.
func (p *Pipeline) release(it item, res results.Row) {
	if p.cache == nil {
		return
	}
	a, ok := p.remember(res)
	if it.flight != nil {
		p.cache.Finish(it.flight, a, ok)
	} else if ok {
		p.cache.Add(it.key, a)
	}
}

// finishReused answers j with another row's answer. j was never sent, so
// it has no start: its wait for that answer is waiting, and it stays out of
// the latency percentiles and the calls in flight.
func (p *Pipeline) finishReused(j *Job, a answer) {
	p.reused.Add(1)
	p.finish(j, results.Row{Outcome: outcome.Success, Label: p.names.name(a.label), Score: a.score, Scores: a.scores,
		Model: p.names.name(a.model), StartedMs: -1, Stage: int(a.stage)})
}

// gather fills a batch with the jobs that follow, while the slot is held:
// those already queued at once, then for at most BatchWait (and never past
// a member's admission wait), so that a slow input (a pipe) or a quiet
// moment of a server does not hold a call back.
func (p *Pipeline) gather(batch []item) []item {
	if p.cfg.BatchSize <= 1 {
		return batch
	}
	var timer *time.Timer
	for len(batch) < p.cfg.BatchSize {
		j, ok := p.nextNow()
		switch {
		case !ok:
			return batch
		case j == nil:
			if timer == nil {
				wait := p.cfg.BatchWait
				if p.cfg.AdmissionWait > 0 {
					wait = min(wait, time.Until(batch[0].job.At.Add(p.cfg.AdmissionWait)))
				}
				if wait <= 0 {
					return batch
				}
				timer = time.NewTimer(wait)
				defer timer.Stop()
			}
			select {
			case j, ok = <-p.admitq:
				if ok {
					j = p.fill(j)
				}
			case <-timer.C:
				return batch
			case <-p.admitCtx.Done():
				return batch
			}
		}
		if !ok {
			return batch
		}
		if it, lead := p.claim(j); lead {
			batch = append(batch, it)
		}
	}
	return batch
}

// rowContext is the context a batch's call to stage k runs in: the
// caller's, when one job brought its own (a request whose client may
// leave), bounded by the grace period after a stop, and by the earliest
// deadline in the batch (else the stage's row deadline, from now). It
// carries cancellation and the deadline only: what the guard is asked of
// the row travels in its resilience.Row.
func (p *Pipeline) rowContext(batch []item, k int) (context.Context, context.CancelFunc) {
	base, stopBase := p.callCtx, func() bool { return false }
	if len(batch) == 1 && batch[0].job.Ctx != nil {
		var cancel context.CancelFunc
		base, cancel = context.WithCancel(batch[0].job.Ctx)
		stop := context.AfterFunc(p.callCtx, cancel)
		stopBase = func() bool { cancel(); return stop() }
	}
	var deadline time.Time
	for _, it := range batch {
		if d := it.job.Deadline; !d.IsZero() && (deadline.IsZero() || d.Before(deadline)) {
			deadline = d
		}
	}
	if deadline.IsZero() {
		d := p.stages[k].RowDeadline
		if d <= 0 {
			d = p.cfg.RowDeadline
		}
		deadline = time.Now().Add(d)
	}
	ctx, cancel := context.WithDeadline(base, deadline)
	return ctx, func() { cancel(); stopBase() }
}

// call asks stage k's classifier for a batch of jobs (often one) and maps
// the answer to one result per job, as the stage ended it; each answer is
// kept in the response cache under the stage's key.
func (p *Pipeline) call(k int, batch []item, permit *resilience.Permit) []results.Row {
	out := make([]results.Row, len(batch))
	ctx, cancel := p.rowContext(batch, k)
	defer cancel()
	var started time.Time
	s := p.stages[k]
	p.send(ctx, s.Guard, permit, batch, out, &started)
	for i := range out {
		out[i].Stage = k + 1
		if s.Free && p.priced() {
			out[i].Costed = true // the embedded model: free
		}
		p.store(k, batch[i].job, out[i])
	}
	s.charge(out)
	return out
}

// send makes one call for batch, whose first attempt takes permit (nil: its
// own slot). A batch the provider refuses as a whole (413, another 4xx, or
// an answer that is not a classification) is split in halves and each half
// asked again, so that one bad row ends alone with its outcome and its
// neighbours still succeed; a 4xx before the endpoint's verdict waits for
// it first (awaitVerdict), and is not split when the endpoint refuses
// every call.
//
// started is set to when the first call was sent: the wait before it (rate
// limit, adaptive limit, cooldown, an open breaker) counts as waiting, not as
// time at the provider.
func (p *Pipeline) send(ctx context.Context, g *resilience.Guard, permit *resilience.Permit, batch []item, out []results.Row, started *time.Time) {
	texts := make([]string, len(batch))
	for i, it := range batch {
		texts[i] = it.job.Row.Text
	}
	row := &resilience.Row{Permit: permit, Stop: p.admitCtx.Done(), FailFast: p.cfg.FailFast, Held: leasesHeld(batch)}
	ans, err := g.Classify(ctx, row, texts)
	answered := time.Now()
	if at, ok := row.FirstAttempt(); ok && started.IsZero() {
		*started = at
	}
	n := row.Attempts()
	p.countLater(g, n)
	for i := range out {
		out[i].Attempts += n
	}
	if err == nil && len(ans.Predictions) != len(batch) {
		err = &provider.Error{Outcome: outcome.UpstreamPayload, Msg: "answer does not have one prediction per text"}
	}
	if err != nil && len(batch) > 1 && splittable(err) && ctx.Err() == nil {
		// A refusal before the endpoint's verdict is one call of evidence,
		// the batch's as a text's: held until the verdict, the batch is
		// split only if the endpoint serves (or no verdict can come), not
		// into calls an endpoint that refuses every call refuses too.
		if err = p.awaitVerdict(ctx, g, err); splittable(err) && ctx.Err() == nil {
			// The permit went with the first attempt (row.Permit is nil):
			// the halves take their own.
			h := len(batch) / 2
			p.send(ctx, g, row.Permit, batch[:h], out[:h], started)
			p.send(ctx, g, row.Permit, batch[h:], out[h:], started)
			return
		}
	}
	startedMs, latency := int64(-1), int64(0) // never sent: no start, no latency
	if !started.IsZero() {
		// Up to the answer: a wait for the verdict is not time at the
		// provider.
		startedMs, latency = p.ms(*started), answered.Sub(*started).Milliseconds()
	}
	if err != nil && len(batch) == 1 {
		// Its text's fault, or the endpoint's?
		err = p.awaitVerdict(ctx, g, err)
	}
	var code outcome.Code
	var msg string
	var retryAfter time.Duration
	if err != nil {
		code, msg = p.classifyError(err, ctx)
		if pe, ok := provider.AsError(err); ok {
			retryAfter = pe.RetryAfter
			if pe.StopsRun() {
				p.fatal(pe)
			}
		}
	}
	for i := range out {
		res := &out[i]
		res.StartedMs, res.LatencyMs, res.Model = startedMs, latency, g.Model()
		if u := row.Usage(); len(out) == 1 && u.Known {
			// Every call of the row, a retried one's too, was paid for.
			res.PromptTokens, res.CompletionTokens, res.CachedPromptTokens, res.Tokens = u.Prompt, u.Completion, u.Cached, true
		}
		if c, ok := row.Cost(); len(out) == 1 && ok {
			res.CostUSD, res.Costed = c, true
		}
		if err != nil {
			res.Outcome, res.Error, res.RetryAfter = code, msg, retryAfter
			continue
		}
		pr := ans.Predictions[i]
		res.Label, res.Score, res.Scores = pr.Label, pr.Score, pr.Scores
		batch[i].job.cache.usage = pr.Usage // what the answer's own call cost
		if u := pr.Usage; len(out) > 1 && u.Known {
			res.PromptTokens, res.CompletionTokens, res.CachedPromptTokens, res.Tokens = u.Prompt, u.Completion, u.Cached, true
		}
		if ans.Model != "" {
			res.Model = ans.Model
		}
		if l := g.Ledger(); l != nil && len(out) > 1 {
			// Several texts in one call: each its own share, as reported.
			res.CostUSD, res.Costed = l.Cost(res.Model, pr.Usage, false)
		}
		res.Outcome = outcome.Success
	}
}

// countLater counts n calls to g when g is a later stage's: stage 1's
// counters call them fallback calls (the summary's fallback_calls, serve's
// metrics).
func (p *Pipeline) countLater(g *resilience.Guard, n int) {
	if g != p.guard {
		p.guard.Counters().FallbackCalls.Add(int64(n))
	}
}

// splittable reports whether a failed batch may succeed in parts: the
// provider refused its size or shape, or one of its texts. Rate limits,
// auth, quota (402), a missing model (404) and server failures would fail
// the halves too.
func splittable(err error) bool {
	pe, ok := provider.AsError(err)
	if !ok {
		return false
	}
	return pe.Outcome == outcome.UpstreamPayload || pe.Outcome == outcome.UpstreamRequestRejected
}

// leasesHeld is the check, just before each call, that every job of batch
// still holds its lease (Job.Lease); nil when none has one.
func leasesHeld(batch []item) func() bool {
	var leases []Lease
	for _, it := range batch {
		if it.job.Lease != nil {
			leases = append(leases, it.job.Lease)
		}
	}
	if leases == nil {
		return nil
	}
	return func() bool {
		for _, l := range leases {
			if !l.Held() {
				return false
			}
		}
		return true
	}
}
