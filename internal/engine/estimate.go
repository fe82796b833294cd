package engine

import (
	"context"
	"errors"
	"io"
	"math"
	"time"

	"github.com/hfsent/hfsent/internal/cache"
	"github.com/hfsent/hfsent/internal/dedupe"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/spend"
)

// EstimateConfig is what a dry run needs: the rules a run would check,
// what would spare a call (dedupe, the cache), and what would price and
// pace the calls left.
type EstimateConfig struct {
	Rules        Rules
	Dedupe       bool
	DedupeSize   int
	ExpectedRows int64
	// Cache and Keys: the response cache a run would look rows up in (nil:
	// none).
	Cache *cache.Cache
	Keys  *cache.Keyer
	// Estimator guesses a call's tokens (nil: the provider reports none);
	// Ledger prices them for Model (nil: no price).
	Estimator provider.UsageEstimator
	Ledger    *spend.Ledger
	Model     string
	// The pace: calls in flight and their latency (assumed), calls a
	// second (0: no limit), tokens a minute (0: no limit).
	Concurrency int
	Latency     time.Duration
	RPS, TPM    float64
	// Later are a cascade's stages after the first, each with the share
	// of the rows it is expected to be asked for (Reach, from a tuned
	// cascade's escalation rates).
	Later []EstimateStage
}

// EstimateStage is a later stage of a cascade, for a dry run: its cache
// keys, estimator, prices and pace (as EstimateConfig's), and Reach, the
// share of the rows that come to the cascade expected to reach it.
type EstimateStage struct {
	Reach       float64
	Keys        *cache.Keyer
	Estimator   provider.UsageEstimator
	Model       string
	Concurrency int
	Latency     time.Duration
	RPS, TPM    float64
}

// StageEstimate is what a later stage of a cascade is expected to do:
// its figures scaled by its Reach (expected values, rounded).
type StageEstimate struct {
	Reach     float64
	Send      int64 // rows expected to be sent to it
	CacheHits int64 // rows its cache is expected to answer
	Usage     provider.Usage
	Cost      float64
	Costed    bool
	Seconds   float64
	// the sums over every row that comes to the cascade, before scaling
	send, hits int64
}

// Estimate is what a run would do, found without a call.
type Estimate struct {
	Rows      int64 // rows read
	Send      int64 // rows that would be sent
	CacheHits int64 // rows the cache would answer
	Reused    int64 // rows an identical text earlier in the input would answer
	Invalid   int64 // rows that would be invalid_input
	// Usage is the tokens the rows sent would cost (Known false: the
	// provider reports none); Cost their price (Costed false: none).
	Usage   provider.Usage
	Cost    float64
	Costed  bool
	Seconds float64
	// Stages are the later stages' estimates (EstimateConfig.Later).
	Stages []StageEstimate
	// InputErr is set when the input could not be read past some line.
	InputErr error
}

// EstimateRun reads src as Run would and says what the run would do: no
// call is made. Rows are checked by the same rules, identical texts
// counted once (as dedupe would, within its bound), and looked up in the
// cache in batches.
func EstimateRun(ctx context.Context, src Source, cfg EstimateConfig) (Estimate, error) {
	est := Estimate{Stages: make([]StageEstimate, len(cfg.Later))}
	ids := NewIDs(cfg.ExpectedRows)
	defer ids.Release()
	var seen *dedupe.Cache[struct{}]
	if cfg.Dedupe {
		seen = dedupe.New[struct{}](cfg.DedupeSize)
	}
	var batch []string
	flush := func() {
		est.add(ctx, batch, cfg)
		batch = batch[:0]
	}
	for ctx.Err() == nil {
		row, err := src.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			est.InputErr = err
			break
		}
		est.Rows++
		if cfg.Rules.Check(row, ids.Seen) != "" {
			est.Invalid++
			continue
		}
		if seen != nil {
			k := seen.Key(row.Text)
			if _, st, f := seen.Claim(k); st == dedupe.Hit {
				est.Reused++
				continue
			} else if f != nil {
				seen.Finish(f, struct{}{}, true)
			}
		}
		if batch = append(batch, row.Text); len(batch) == lookupBatch {
			flush()
		}
	}
	flush()
	est.pace(cfg)
	for i, st := range cfg.Later {
		est.Stages[i].scale(st)
	}
	return est, ctx.Err()
}

// add counts texts that a run would look up, then send when missed, at
// the first stage and (to be scaled by their reach) at the later ones.
func (e *Estimate) add(ctx context.Context, texts []string, cfg EstimateConfig) {
	if len(texts) == 0 {
		return
	}
	for i, st := range cfg.Later {
		e.Stages[i].add(ctx, texts, cfg.Cache, st, cfg.Ledger)
	}
	hit := lookupTexts(ctx, texts, cfg.Cache, cfg.Keys)
	for i, t := range texts {
		if hit[i] {
			e.CacheHits++
			continue
		}
		e.Send++
		if cfg.Estimator == nil {
			continue
		}
		u, _ := cfg.Estimator.EstimateUsage(t)
		e.Usage = e.Usage.Add(u)
		if cfg.Ledger != nil {
			if usd, ok := cfg.Ledger.Cost(cfg.Model, u, false); ok {
				e.Cost += usd
				e.Costed = true
			}
		}
	}
}

// lookupTexts reports which of texts the cache holds under keys.
func lookupTexts(ctx context.Context, texts []string, c *cache.Cache, keys *cache.Keyer) []bool {
	hit := make([]bool, len(texts))
	if c == nil || keys == nil {
		return hit
	}
	ks, idx := make([]cache.Key, 0, len(texts)), make([]int, 0, len(texts))
	for i, t := range texts {
		if k, ok := keys.Key(t); ok {
			ks, idx = append(ks, k), append(idx, i)
		}
	}
	for n, h := range c.Lookup(ctx, ks) {
		hit[idx[n]] = h.Found
	}
	return hit
}

// add counts texts at a later stage as if every one reached it.
func (e *StageEstimate) add(ctx context.Context, texts []string, c *cache.Cache, st EstimateStage, l *spend.Ledger) {
	for i, hit := range lookupTexts(ctx, texts, c, st.Keys) {
		if hit {
			e.hits++
			continue
		}
		e.send++
		if st.Estimator == nil {
			continue
		}
		u, _ := st.Estimator.EstimateUsage(texts[i])
		e.Usage = e.Usage.Add(u)
		if l != nil {
			if usd, ok := l.Cost(st.Model, u, false); ok {
				e.Cost += usd
				e.Costed = true
			}
		}
	}
}

// scale turns the sums over every row into what the stage's reach
// expects, and paces its calls.
func (e *StageEstimate) scale(st EstimateStage) {
	e.Reach = st.Reach
	e.Send = int64(math.Round(float64(e.send) * st.Reach))
	e.CacheHits = int64(math.Round(float64(e.hits) * st.Reach))
	e.Usage.Prompt = int(math.Round(float64(e.Usage.Prompt) * st.Reach))
	e.Usage.Completion = int(math.Round(float64(e.Usage.Completion) * st.Reach))
	e.Cost *= st.Reach
	e.Seconds = paced(e.Send, e.Usage, st.Concurrency, st.Latency, st.RPS, st.TPM)
}

// pace is how long the calls would take: the slowest of -c at the assumed
// latency, --rps and --tpm.
func (e *Estimate) pace(cfg EstimateConfig) {
	e.Seconds = paced(e.Send, e.Usage, cfg.Concurrency, cfg.Latency, cfg.RPS, cfg.TPM)
}

func paced(send int64, u provider.Usage, concurrency int, latency time.Duration, rps, tpm float64) float64 {
	calls := float64(send)
	secs := calls * latency.Seconds() / float64(max(1, concurrency))
	if rps > 0 {
		secs = max(secs, calls/rps)
	}
	if tpm > 0 && u.Known {
		secs = max(secs, float64(u.Total())/(tpm/60))
	}
	return secs
}
