package engine

import (
	"context"
	"time"

	"github.com/hfsent/hfsent/internal/cache"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/results"
)

// The response cache on the row's path. Admission takes jobs in small
// batches (lookupBatch, those already queued) and looks their keys up in
// one go, before any of them is given a slot: a hit costs no call and no
// slot, and is answered at once (claim), whatever brought the row. A
// success or a fallback's answer is stored when its call ends (store).

// lookupBatch is the most jobs looked up at once.
const lookupBatch = 64

// cachedJob is what admission knows of a job's cache entry.
type cachedJob struct {
	// key is the request's (keyed: it could be made), made when the job
	// is submitted, on the submitter's goroutine (classify's reader, a
	// request's handler): admission only looks it up.
	key   cache.Key
	keyed bool
	hit   *cache.Entry // found: the row is answered with it
	// usage is what the call that answered cost (the last, not its
	// retries): what a later hit saves.
	usage provider.Usage
}

// next is the next job for admission, its cache entry looked up; ok is
// false once submission has ended and every job is taken.
func (p *Pipeline) next() (*Job, bool) {
	if j := p.popAhead(); j != nil {
		return j, true
	}
	j, ok := <-p.admitq
	if !ok {
		return nil, false
	}
	return p.fill(j), true
}

// nextNow is next without waiting: nil when no job is queued now.
func (p *Pipeline) nextNow() (j *Job, ok bool) {
	if j := p.popAhead(); j != nil {
		return j, true
	}
	select {
	case j, ok = <-p.admitq:
		if !ok {
			return nil, false
		}
		return p.fill(j), true
	default:
		return nil, true
	}
}

func (p *Pipeline) popAhead() *Job {
	if len(p.ahead) == 0 {
		return nil
	}
	j := p.ahead[0]
	p.ahead[0] = nil
	p.ahead = p.ahead[1:]
	p.aheadN.Add(-1)
	return j
}

// fill looks up j and the jobs queued behind it (up to lookupBatch, kept
// ahead), and returns j.
func (p *Pipeline) fill(j *Job) *Job {
	if p.cfg.Cache == nil || p.stages[0].Keys == nil {
		return j
	}
	batch := append(make([]*Job, 0, lookupBatch), j)
more:
	for len(batch) < lookupBatch {
		select {
		case k, ok := <-p.admitq:
			if !ok {
				break more
			}
			batch = append(batch, k)
		default:
			break more
		}
	}
	p.lookup(batch)
	if len(batch) > 1 {
		p.ahead = append(p.ahead, batch[1:]...)
		p.aheadN.Add(int64(len(batch) - 1))
	}
	return j
}

// lookup finds the cache entries of jobs' requests: those prefetched
// fresh (Prefetch) without asking the store.
func (p *Pipeline) lookup(jobs []*Job) {
	keys := make([]cache.Key, 0, len(jobs))
	idx := make([]int, 0, len(jobs))
	var took []cache.Hit
	now := time.Now()
	for i, j := range jobs {
		if !j.cache.keyed {
			continue
		}
		if h, ok := p.pre.take(j.cache.key, now); ok {
			took = append(took, h)
			if h.Found {
				e := h.Entry
				j.cache.hit = &e
			}
			continue
		}
		keys = append(keys, j.cache.key)
		idx = append(idx, i)
	}
	p.cfg.Cache.Count(took)
	if len(keys) == 0 {
		return
	}
	for n, h := range p.cfg.Cache.Lookup(context.Background(), keys) {
		if h.Found {
			e := h.Entry
			jobs[idx[n]].cache.hit = &e
		}
	}
}

// keyJob makes j's key, if there is a cache.
func (p *Pipeline) keyJob(j *Job) {
	if k := p.stages[0].Keys; p.cfg.Cache != nil && k != nil {
		j.cache.key, j.cache.keyed = k.Key(j.Row.Text)
	}
}

// answersHits reports whether a hit is still answered although admission
// stopped: it costs nothing, so a spending limit or a provider that
// refuses the calls does not refuse it; an interrupt does.
func (p *Pipeline) answersHits() bool {
	r := p.StopReason()
	return r == StopNone || r == StopMaxSpend || r.ProviderStop()
}

// store keeps stage k's usable answer to a job (a success: a label it
// gave live, whether or not the row went on) under the stage's request's
// key; nothing else is stored. The key is made again now: the request a
// client sends may have changed since the lookup (a server that refused
// logprobs is asked without them for the rest of the run), and the answer
// is the one to what was sent.
func (p *Pipeline) store(k int, j *Job, res results.Row) {
	if p.cfg.Cache == nil || res.Label == "" || res.Cached || res.Outcome != outcome.Success {
		return
	}
	keys := p.stages[k].Keys
	if keys == nil {
		return
	}
	key, ok := keys.Key(j.Row.Text)
	if !ok {
		return
	}
	p.cfg.Cache.Put(key, cache.Entry{Label: res.Label, Score: res.Score, Scores: res.Scores, Model: res.Model,
		Fallback: k > 0, Usage: j.cache.usage})
}
