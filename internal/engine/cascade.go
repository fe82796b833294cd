package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hfsent/hfsent/internal/cache"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/quality"
	"github.com/hfsent/hfsent/internal/resilience"
	"github.com/hfsent/hfsent/internal/results"
	"github.com/hfsent/hfsent/internal/spend"
)

// Stage is one stage of a cascade (Config.Stages): a guarded provider, the
// key of its requests in the response cache, what the run does to its
// answers, and when a row goes on to the next stage. A run of one provider
// is a cascade of one stage; --fallback-model is a cascade of two whose
// first stage sends a row on only when it fails.
//
// A row goes to stage 1 first: its cache entry, else its guarded call.
// It goes on to the next stage when stage i failed it in a way another
// provider may mend (outcome.Code.Escalates: after its retries, or at
// once when its breaker is open), or when stage i answered with a score
// (as Answers makes it: calibrated) under EscalateBelow, or with none.
// The last stage's answer, or failure, is final.
type Stage struct {
	// Guard is the stage's guarded provider (stage 1's is the pipeline's:
	// nil there means it). A stage that is not the last must be built
	// with resilience.Config.Escalates: its rows do not wait for its open
	// breaker, they go on.
	Guard *resilience.Guard
	// Keys, with Config.Cache, are the keys of the stage's requests: each
	// stage has its own (its own model and request), so a row answered
	// at stage 1 before is not asked again there, whatever later stages
	// did. nil: the stage's answers are not cached.
	Keys *cache.Keyer
	// Answers is what the run does to the rows this stage answered (its
	// label map, its calibration, the review flag); nil: nothing.
	Answers *quality.Answers
	// EscalateBelow: a row this stage answered with a score under it (a
	// score as Answers makes it, rounded as written), or with none, goes
	// on to the next stage. 0: only a failure sends a row on.
	EscalateBelow float64
	// RowDeadline bounds the stage's attempts and waits for one row; 0:
	// Config.RowDeadline. A Job's own Deadline bounds every stage.
	RowDeadline time.Duration
	// Free: the stage's calls cost nothing (the embedded model): in a
	// priced run, a row's cost at this stage is 0, not unknown.
	Free bool
}

// StageSummary is what one stage of a cascade did.
type StageSummary struct {
	Model string
	// Reached: rows that came to the stage (looked up in its cache, or
	// sent to it); Escalated: of those, the rows it sent on.
	Reached, Escalated int64
	// Answered: rows whose answer is the stage's (success or fallback).
	Answered int64
	// CacheHits: rows its cache entry answered here, without a call.
	CacheHits int64
	// CostUSD is what the rows' calls to the stage cost; Costed is false
	// when no call of it had a known cost.
	CostUSD float64
	Costed  bool
	// Provider is what the stage's guard counted of its calls.
	Provider resilience.Stats
}

// stageRun is a stage in a running pipeline, with its counts.
type stageRun struct {
	Stage
	reached, escalated, answered, hits atomic.Int64

	mu     sync.Mutex
	cost   float64
	costed bool
}

func (s *stageRun) charge(rows []results.Row) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rows {
		if r.Costed {
			s.cost += r.CostUSD
			s.costed = true
		}
	}
}

// stagesOf is the pipeline's cascade: cfg.Stages with stage 1's guard g,
// or g alone with cfg's keys and answers.
func stagesOf(g *resilience.Guard, cfg Config) []*stageRun {
	stages := cfg.Stages
	if len(stages) == 0 {
		stages = []Stage{{Guard: g, Keys: cfg.Keys, Answers: cfg.Answers}}
	}
	out := make([]*stageRun, len(stages))
	for i, s := range stages {
		if i == 0 {
			s.Guard = g
		}
		out[i] = &stageRun{Stage: s}
	}
	return out
}

// Marks reports what the run adds to each answer: calibrated, a score
// some stage calibrates (the model's is kept as raw_score); review, the
// review flag.
func (c Config) Marks() (calibrated, review bool) {
	answers := []*quality.Answers{c.Answers}
	for _, s := range c.Stages {
		answers = append(answers, s.Answers)
	}
	for _, a := range answers {
		if a != nil {
			calibrated = calibrated || a.Calibration != nil || a.Uncalibrated
			review = review || a.Review
		}
	}
	return calibrated, review
}

// cascade reports whether a row may go through more than one stage.
func (p *Pipeline) cascade() bool { return len(p.stages) > 1 }

// ledger is what every stage's calls are charged to (the stages of a run
// share one); nil: none.
func (p *Pipeline) ledger() *spend.Ledger {
	for _, s := range p.stages {
		if l := s.Guard.Ledger(); l != nil {
			return l
		}
	}
	return nil
}

// answers is what the run does to res: the Answers of the stage that
// answered it (or where it ended; stage 1's for a row no stage was asked
// for).
func (p *Pipeline) answers(res results.Row) *quality.Answers {
	if res.Stage > 1 && res.Stage <= len(p.stages) {
		return p.stages[res.Stage-1].Answers
	}
	return p.stages[0].Answers
}

// anyAnswers reports whether some stage changes its answers.
func (p *Pipeline) anyAnswers() bool {
	for _, s := range p.stages {
		if s.Answers.Active() {
			return true
		}
	}
	return false
}

// escalates reports whether r, as stage k ended it, goes on to the next
// stage.
func (p *Pipeline) escalates(k int, r results.Row) bool {
	if k+1 >= len(p.stages) {
		return false
	}
	if r.Outcome != outcome.Success || r.Label == "" {
		return r.Outcome.Escalates()
	}
	s := p.stages[k]
	if s.EscalateBelow <= 0 {
		return false
	}
	if s.Answers.Active() {
		s.Answers.Apply(&r) // a copy: the row is written as the stage it ends at makes it
	}
	return quality.NeedsReview(r, s.EscalateBelow)
}

// onward sends the rows of batch that stage 1 sends on (acc holds each
// row as stage 1 ended it) through the later stages, and leaves in acc
// each row's result: the stage it ended at, with what the earlier stages'
// calls cost carried in.
func (p *Pipeline) onward(batch []item, acc []results.Row) {
	if !p.cascade() {
		return
	}
	idx := make([]int, len(batch))
	for i := range idx {
		idx[i] = i
	}
	last := append([]results.Row(nil), acc...) // each row as its stage ended it
	for k := 0; k+1 < len(p.stages) && len(idx) > 0; k++ {
		var up []int
		var sub []item
		for n, i := range idx {
			if p.escalates(k, last[n]) {
				up, sub = append(up, i), append(sub, batch[i])
			}
		}
		p.stages[k].escalated.Add(int64(len(up)))
		if len(up) == 0 {
			return
		}
		p.paceOpen(k, sub, last, idx, up)
		next := p.stageRows(k+1, sub)
		for n, i := range up {
			acc[i] = p.carry(acc[i], next[n])
		}
		idx, last = up, next
	}
}

// paceOpen has each row that stage k's open breaker sent on (circuit_open:
// never sent) wait for a turn of stage k's rate limit, as its call would
// have (resilience.Guard.Pace): while the breaker is open, the rows go on
// at the stage's pace, so a short outage sends on only its share of them.
// last holds the rows as stage k ended them, at idx's positions; up are
// the positions sent on.
func (p *Pipeline) paceOpen(k int, sub []item, last []results.Row, idx, up []int) {
	g := p.stages[k].Guard
	at := make(map[int]int, len(idx))
	for n, i := range idx {
		at[i] = n
	}
	for n, i := range up {
		if last[at[i]].Outcome != outcome.CircuitOpen {
			continue
		}
		ctx, cancel := p.rowContext(sub[n:n+1], k)
		_ = g.Pace(ctx, &resilience.Row{Stop: p.admitCtx.Done()})
		cancel()
	}
}

// stageRows asks stage k (after stage 1) for items: its cache entry, else
// its guarded call (which takes a slot of the stage's own). Each row is
// as stage k ended it.
func (p *Pipeline) stageRows(k int, items []item) []results.Row {
	s := p.stages[k]
	s.reached.Add(int64(len(items)))
	out := make([]results.Row, len(items))
	found := p.lookupStage(k, items, out)
	var live []int
	for i, it := range items {
		if found[i] {
			continue
		}
		if err := s.Guard.CheckText(it.job.Row.Text); err != nil {
			code, msg := p.classifyError(err, context.Background())
			out[i] = results.Row{Outcome: code, Error: msg, StartedMs: -1, Stage: k + 1}
			continue
		}
		live = append(live, i)
	}
	if len(live) == 0 {
		return out
	}
	sub := make([]item, len(live))
	for n, i := range live {
		sub[n] = items[i]
	}
	for n, r := range p.call(k, sub, nil) {
		out[live[n]] = r
	}
	return out
}

// lookupStage answers from the response cache the items whose request to
// stage k it holds, into out, and reports which it answered.
func (p *Pipeline) lookupStage(k int, items []item, out []results.Row) []bool {
	found := make([]bool, len(items))
	s := p.stages[k]
	if p.cfg.Cache == nil || s.Keys == nil {
		return found
	}
	var keys []cache.Key
	var idx []int
	for i, it := range items {
		if key, ok := s.Keys.Key(it.job.Row.Text); ok {
			keys, idx = append(keys, key), append(idx, i)
		}
	}
	for n, h := range p.cfg.Cache.Lookup(context.Background(), keys) {
		if h.Found {
			e := h.Entry
			out[idx[n]], found[idx[n]] = p.hitRow(k, &e), true
		}
	}
	return found
}

// hitRow is the row stage k's cache entry e answers: no call, no slot,
// attempts 0.
func (p *Pipeline) hitRow(k int, e *cache.Entry) results.Row {
	p.stages[k].hits.Add(1)
	res := results.Row{Outcome: outcome.Success, Label: e.Label, Score: e.Score, Scores: e.Scores, Model: e.Model, StartedMs: -1, Cached: true, Stage: k + 1}
	if l := p.ledger(); l != nil {
		if usd, ok := l.Cost(e.Model, e.Usage, false); ok {
			p.cfg.Cache.Saved(usd)
		}
		res.Costed = p.priced() // no call: it cost nothing, at any price
	}
	return res
}

// carry is next, the row as a later stage ended it, with what the earlier
// stages did for it (prev) added: the calls, the tokens and the cost add
// up, the latency runs from the row's first call, and an answer that came
// after an earlier stage's failure is a fallback.
func (p *Pipeline) carry(prev, next results.Row) results.Row {
	next.Attempts += prev.Attempts
	if prev.Tokens {
		next.PromptTokens += prev.PromptTokens
		next.CompletionTokens += prev.CompletionTokens
		next.CachedPromptTokens += prev.CachedPromptTokens
		next.Tokens = true
	}
	next.CostUSD += prev.CostUSD
	next.Costed = next.Costed || prev.Costed
	if prev.StartedMs >= 0 {
		next.StartedMs, next.LatencyMs = prev.StartedMs, p.ms(time.Now())-prev.StartedMs
	}
	if next.Outcome == outcome.Success && prev.Outcome != outcome.Success {
		next.Outcome = outcome.Fallback
	}
	return next
}

// answerHit answers it from stage 1's cache entry, or, when that answer
// sends the row on, takes it through the later stages on a goroutine of
// its own (admission goes on meanwhile; the hit holds no slot).
func (p *Pipeline) answerHit(it item) {
	j := it.job
	p.stages[0].reached.Add(1)
	res := p.hitRow(0, j.cache.hit)
	if !p.escalates(0, res) {
		p.release(it, res)
		p.finish(j, res)
		return
	}
	// Counted as a call in progress: rows held for the endpoint's verdict
	// must not take the source for quiet while it goes on.
	p.active.Add(1)
	p.run(func() {
		out := []results.Row{res}
		defer func() {
			if v := recover(); v != nil {
				out[0] = p.panicked(v)
			}
			p.callEnded()
			p.release(it, out[0])
			p.finish(j, out[0])
		}()
		p.onward([]item{it}, out)
	})
}

// stageSummaries are the stages' counts, for a cascade's summary.
func (p *Pipeline) stageSummaries(elapsed time.Duration) []StageSummary {
	if !p.cascade() {
		return nil
	}
	out := make([]StageSummary, len(p.stages))
	for i, s := range p.stages {
		s.mu.Lock()
		cost, costed := s.cost, s.costed
		s.mu.Unlock()
		out[i] = StageSummary{Model: s.Guard.Model(), Reached: s.reached.Load(), Escalated: s.escalated.Load(),
			Answered: s.answered.Load(), CacheHits: s.hits.Load(), CostUSD: cost, Costed: costed, Provider: s.Guard.Stats(elapsed)}
	}
	return out
}

// addLaterStages adds the later stages' tokens to stage 1's stats: the
// run's summary counts every call's (their calls are its FallbackCalls).
func addLaterStages(st *resilience.Stats, later []StageSummary) {
	for _, s := range later {
		st.PromptTokens += s.Provider.PromptTokens
		st.CompletionTokens += s.Provider.CompletionTokens
		st.ReasoningTokens += s.Provider.ReasoningTokens
		st.TokenCalls += s.Provider.TokenCalls
		st.CachedPromptTokens += s.Provider.CachedPromptTokens
	}
}
