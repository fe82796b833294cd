package engine

import (
	"context"
	"sync"
	"time"

	"github.com/hfsent/hfsent/internal/dedupe"
	"github.com/hfsent/hfsent/internal/input"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/results"
)

// answer is what the dedupe cache remembers of a success.
type answer struct {
	Label string
	Score float64
	Model string
}

// item is a row on its way to a call. flight is set when this row leads the
// dedupe flight for its text and must end it.
type item struct {
	q      queued
	key    dedupe.Key
	flight *dedupe.Flight[answer]
}

func next(src Source) (input.Row, *results.Row, error) {
	if ps, ok := src.(PriorSource); ok {
		return ps.NextPrior()
	}
	row, err := src.Next()
	return row, nil, err
}

// claim decides whether q needs a call. It does not when admission has
// stopped (not_attempted), when its text's answer is known (reused at once),
// or when the same text is in flight (a waiter takes it, without a slot:
// its answer costs nothing, so it must not hold a slot a call could use).
func (r *run) claim(q queued, workers *sync.WaitGroup) (item, bool) {
	if r.admitCtx.Err() != nil {
		r.finishNotAttempted(q)
		return item{}, false
	}
	if r.cache == nil {
		return item{q: q}, true
	}
	k := r.cache.Key(q.row.Text)
	v, st, f := r.cache.Claim(k)
	switch st {
	case dedupe.Hit:
		r.finishReused(q, v)
		return item{}, false
	case dedupe.Wait:
		workers.Add(1)
		go func() {
			defer workers.Done()
			r.follow(q, k, f, workers)
		}()
		return item{}, false
	}
	return item{q: q, key: k, flight: f}, true
}

// follow waits for the call in flight for the same text. If it failed, the
// row asks for itself (the failure may have been passing), taking a slot.
func (r *run) follow(q queued, k dedupe.Key, f *dedupe.Flight[answer], workers *sync.WaitGroup) {
	<-f.Done() // every flight is finished: its leader is always completed
	if v, ok := f.Result(); ok {
		r.finishReused(q, v)
		return
	}
	if r.admitCtx.Err() != nil {
		r.finishNotAttempted(q)
		return
	}
	if !r.acquireSlot(q) {
		return
	}
	r.dispatch([]item{{q: q, key: k}}, workers)
}

// release ends the row's dedupe flight, or remembers its answer.
func (r *run) release(it item, res results.Row) {
	if r.cache == nil {
		return
	}
	ok := res.Outcome == outcome.Success && res.Label != ""
	a := answer{res.Label, res.Score, res.Model}
	if it.flight != nil {
		r.cache.Finish(it.flight, a, ok)
	} else if ok {
		r.cache.Add(it.key, a)
	}
}

// finishReused answers q with another row's answer. q was never sent, so
// it has no start: its wait for that answer is waiting, and it stays out of
// the latency percentiles and the calls in flight.
func (r *run) finishReused(q queued, a answer) {
	r.reused.Add(1)
	r.finish(q, results.Row{Outcome: outcome.Success, Label: a.Label, Score: a.Score, Model: a.Model, StartedMs: -1})
}

// gather fills a batch with the rows that follow, while the slot is held:
// those already queued at once, then for at most BatchWait, so that a slow
// input (a pipe) does not hold a call back.
func (r *run) gather(admitq <-chan queued, batch []item, workers *sync.WaitGroup) []item {
	var timer *time.Timer
	for len(batch) < r.cfg.BatchSize {
		var q queued
		var ok bool
		select {
		case q, ok = <-admitq:
		default:
			if timer == nil {
				timer = time.NewTimer(r.cfg.BatchWait)
				defer timer.Stop()
			}
			select {
			case q, ok = <-admitq:
			case <-timer.C:
				return batch
			case <-r.admitCtx.Done():
				return batch
			}
		}
		if !ok {
			return batch
		}
		if it, lead := r.claim(q, workers); lead {
			batch = append(batch, it)
		}
	}
	return batch
}

// call asks the classifier for a batch of rows (often one) and maps the
// answer to one result per row.
func (r *run) call(batch []item) []results.Row {
	out := make([]results.Row, len(batch))
	ctx, cancel := context.WithTimeout(r.callCtx, r.cfg.RowDeadline)
	defer cancel()
	var started time.Time
	r.send(ctx, batch, out, &started)
	return out
}

// send makes one call for batch. A batch the provider refuses as a whole
// (413, another 4xx, or an answer that is not a classification) is split in
// halves and each half asked again, so that one bad row ends alone with its
// outcome and its neighbours still succeed.
//
// started is set to when the first call was sent: the wait before it (rate
// limit, adaptive limit, cooldown, an open breaker) counts as waiting, not as
// time at the provider.
func (r *run) send(ctx context.Context, batch []item, out []results.Row, started *time.Time) {
	texts := make([]string, len(batch))
	for i, it := range batch {
		texts[i] = it.q.row.Text
	}
	trace := &provider.Trace{}
	ans, err := r.cls.Classify(provider.WithTrace(ctx, trace), texts)
	n := trace.Attempts()
	if at, ok := trace.FirstAttempt(); ok && started.IsZero() {
		*started = at
	}
	r.calls.Add(int64(n))
	if n > 1 {
		r.retries.Add(int64(n - 1))
	}
	for i := range out {
		out[i].Attempts += n
	}
	if err == nil && len(ans.Predictions) != len(batch) {
		err = &provider.Error{Outcome: outcome.UpstreamPayload, Msg: "answer does not have one prediction per text"}
	}
	if err != nil && len(batch) > 1 && splittable(err) && ctx.Err() == nil {
		h := len(batch) / 2
		r.send(ctx, batch[:h], out[:h], started)
		r.send(ctx, batch[h:], out[h:], started)
		return
	}
	startedMs, latency := int64(-1), int64(0) // never sent: no start, no latency
	if !started.IsZero() {
		startedMs, latency = r.ms(*started), time.Since(*started).Milliseconds()
	}
	var code outcome.Code
	var msg string
	if err != nil {
		code, msg = r.classifyError(err, ctx)
		if code == outcome.UpstreamAuth {
			r.authLog.Do(func() {
				r.cfg.Logger.Error("the provider rejected the token (HTTP 401/403): no more rows will be sent; check HF_TOKEN or the token file, or use --provider local")
				r.stopAdmit(errStop{StopAuth})
			})
		}
	}
	for i := range out {
		res := &out[i]
		res.StartedMs, res.LatencyMs, res.Model = startedMs, latency, r.cls.Model()
		if err != nil {
			res.Outcome, res.Error = code, msg
			continue
		}
		p := ans.Predictions[i]
		res.Label, res.Score = p.Label, p.Score
		if ans.Model != "" {
			res.Model = ans.Model
		}
		res.Outcome = outcome.Success
		if ans.Fallback {
			res.Outcome = outcome.Fallback
		}
	}
}

// splittable reports whether a failed batch may succeed in parts: the
// provider refused its size or shape, or one of its texts. Rate limits,
// auth, quota (402) and server failures would fail the halves too.
func splittable(err error) bool {
	pe, ok := provider.AsError(err)
	if !ok {
		return false
	}
	switch {
	case pe.Outcome == outcome.UpstreamPayload:
		return true
	case pe.Outcome == outcome.UpstreamRequestRejected:
		return pe.Status != 402
	}
	return false
}
