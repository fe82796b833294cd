package engine

import (
	"context"
	"errors"
	"io"
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
	// InputErr is set when the input could not be read past some line.
	InputErr error
}

// EstimateRun reads src as Run would and says what the run would do: no
// call is made. Rows are checked by the same rules, identical texts
// counted once (as dedupe would, within its bound), and looked up in the
// cache in batches.
func EstimateRun(ctx context.Context, src Source, cfg EstimateConfig) (Estimate, error) {
	var est Estimate
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
	return est, ctx.Err()
}

// add counts texts that a run would look up, then send when missed.
func (e *Estimate) add(ctx context.Context, texts []string, cfg EstimateConfig) {
	if len(texts) == 0 {
		return
	}
	hit := make([]bool, len(texts))
	if cfg.Cache != nil && cfg.Keys != nil {
		keys, idx := make([]cache.Key, 0, len(texts)), make([]int, 0, len(texts))
		for i, t := range texts {
			if k, ok := cfg.Keys.Key(t); ok {
				keys, idx = append(keys, k), append(idx, i)
			}
		}
		for n, h := range cfg.Cache.Lookup(ctx, keys) {
			hit[idx[n]] = h.Found
		}
	}
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

// pace is how long the calls would take: the slowest of -c at the assumed
// latency, --rps and --tpm.
func (e *Estimate) pace(cfg EstimateConfig) {
	calls := float64(e.Send)
	secs := calls * cfg.Latency.Seconds() / float64(max(1, cfg.Concurrency))
	if cfg.RPS > 0 {
		secs = max(secs, calls/cfg.RPS)
	}
	if cfg.TPM > 0 && e.Usage.Known {
		secs = max(secs, float64(e.Usage.Total())/(cfg.TPM/60))
	}
	e.Seconds = secs
}
