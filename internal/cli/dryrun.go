package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/input"
	"github.com/hfsent/hfsent/internal/labelset"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/results"
	"github.com/hfsent/hfsent/internal/stage"
)

// dryRunLatency is the time a call is assumed to take when a dry run
// estimates the time at -c: about what a small chat model on a hosted
// router answers in.
const dryRunLatency = 500 * time.Millisecond

// runDryRun is classify --dry-run: INPUT is read and checked as a run
// would read it, the cache is looked up, and what the run would send,
// cost and take is printed (and written to --summary-json); no call is
// made and no results file is written.
func runDryRun(ctx context.Context, o *classifyOptions, ios *IOStreams, log *slog.Logger, src *input.Reader) error {
	ledger := o.prov.ledger
	if o.batch.api {
		// Estimated at the price the batches would be charged.
		ledger = o.batch.batchPrices(ledger)
	}
	// The client is built as a run builds it (the same checks: the token,
	// the endpoint), but nothing is sent through it.
	leave, err := o.prov.openStages(ctx, ios, log, nil, nil)
	if err != nil {
		return err
	}
	defer leave(false)
	rc, closeDB, err := o.cost.openCache(ctx, ios, log, &o.prov, nil, o.db.url)
	if err != nil {
		return err
	}
	defer closeDB()
	first := o.prov.opened[0]
	cfg := engine.EstimateConfig{
		Rules:       engine.Rules{MaxChars: o.maxChars},
		Dedupe:      o.eng.dedupe && !o.eng.noDedupe,
		Ledger:      ledger,
		Model:       first.Config.Model,
		Concurrency: first.Config.Concurrency,
		Latency:     dryRunLatency,
		RPS:         first.Config.RPS,
		TPM:         float64(first.Config.TPM),
		Cache:       rc,
		Estimator:   estimator(first),
	}
	if rc != nil {
		cfg.Keys = stage.Keyer(first.Guard.Client())
	}
	reach, reached := o.reach()
	for i, s := range o.prov.opened[1:] {
		if !reached {
			break
		}
		later := engine.EstimateStage{Reach: reach[i+1], Estimator: estimator(s), Model: s.Config.Model, Concurrency: s.Config.Concurrency,
			Latency: dryRunLatency, RPS: s.Config.RPS, TPM: float64(s.Config.TPM)}
		if rc != nil {
			later.Keys = stage.Keyer(s.Guard.Client())
		}
		cfg.Later = append(cfg.Later, later)
	}
	est, err := engine.EstimateRun(ctx, src, cfg)
	closeCache(log, rc)
	if err != nil {
		return err
	}
	fmt.Fprintln(ios.ErrOut, dryRunLine(est, o))
	for i, st := range est.Stages {
		fmt.Fprintln(ios.ErrOut, dryRunStageLine(i+2, st, o.prov.opened[i+1].Config))
	}
	for i, s := range o.prov.opened {
		if line := dryRunPrefixLine(i+1, s.Config); line != "" {
			fmt.Fprintln(ios.ErrOut, line)
		}
	}
	if o.prov.file != nil && !reached {
		fmt.Fprintf(ios.ErrOut, "dry_run stages: %s records no tuned escalation rates (hfsent tune writes them), so the rows the later stages would get cannot be estimated: the figures above are stage 1's alone\n", o.prov.cascadeFile)
	}
	if o.summaryJSON != "" {
		if err := writeDryRunJSON(o.summaryJSON, est); err != nil {
			log.Error("cannot write --summary-json", "path", o.summaryJSON, "err", err)
		}
	}
	if est.InputErr != nil {
		return usageErrorf("%v; the estimate covers the rows before it", est.InputErr)
	}
	return nil
}

// reach is the share of the rows each stage of a --cascade is expected
// to be asked for, from the file's tuned escalation rates; reached is
// false without --cascade or without those rates.
func (o *classifyOptions) reach() (reach []float64, reached bool) {
	if o.prov.file == nil {
		return nil, false
	}
	return o.prov.file.Reach()
}

// estimator is a stage's usage estimator (nil: it reports none).
func estimator(s *stage.Stage) provider.UsageEstimator {
	if est, ok := s.Guard.Client().(provider.UsageEstimator); ok {
		return est
	}
	return nil
}

// dryRunPrefixLine says, for a stage sent a label file's fixed part,
// its estimated tokens and whether they reach the cacheable minimum of
// OpenAI's prompt cache ("" for a stage sent none).
func dryRunPrefixLine(n int, c *stage.Config) string {
	sys := c.System()
	if sys == "" {
		return ""
	}
	p := labelset.EstimatePrefix(sys, labelset.OpenAICache())
	verdict := fmt.Sprintf("under %s's cacheable minimum of %d tokens: no row's prompt can be read from its prompt cache", p.Rule.Provider, p.Rule.Min)
	if p.Reaches() {
		verdict = fmt.Sprintf("reaches %s's cacheable minimum of %d tokens: each row after the first may read about %d tokens from its prompt cache, at the cached rate", p.Rule.Provider, p.Rule.Min, p.Cached)
	}
	if p.Near() {
		verdict += " (the estimate is within a fifth of the minimum: the provider's count may fall either side)"
	}
	return fmt.Sprintf("dry_run prefix stage=%d fixed_bytes=%d fixed_tokens=%d: %s", n, p.Bytes, p.Tokens, verdict)
}

// dryRunStageLine is a later stage's expected share of the work.
func dryRunStageLine(n int, e engine.StageEstimate, c *stage.Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "dry_run stage=%d model=%s reach=%s would_send=%d cache_hits=%d", n, c.ModelName(), strconv.FormatFloat(e.Reach, 'f', 4, 64), e.Send, e.CacheHits)
	if e.Usage.Known {
		fmt.Fprintf(&b, " prompt_tokens=%d completion_tokens=%d", e.Usage.Prompt, e.Usage.Completion)
	}
	if e.Costed {
		fmt.Fprintf(&b, " cost_usd=%s", results.FormatUSD(e.Cost))
	}
	fmt.Fprintf(&b, " seconds=%.0f", e.Seconds)
	return b.String()
}

// dryRunLine is the dry run's account, in the summary line's words.
func dryRunLine(e engine.Estimate, o *classifyOptions) string {
	var b strings.Builder
	fmt.Fprintf(&b, "dry_run rows=%d would_send=%d cache_hits=%d", e.Rows, e.Send, e.CacheHits)
	if e.Reused > 0 {
		fmt.Fprintf(&b, " reused=%d", e.Reused)
	}
	if e.Invalid > 0 {
		fmt.Fprintf(&b, " invalid_input=%d", e.Invalid)
	}
	if e.Usage.Known {
		fmt.Fprintf(&b, " prompt_tokens=%d completion_tokens=%d", e.Usage.Prompt, e.Usage.Completion)
	}
	if e.Costed {
		fmt.Fprintf(&b, " cost_usd=%s", results.FormatUSD(e.Cost))
	}
	fmt.Fprintf(&b, " seconds=%.0f", e.Seconds)
	first := o.prov.first()
	pace := fmt.Sprintf("-c %d at %s a call", first.Concurrency, dryRunLatency)
	if first.RPS > 0 {
		pace += fmt.Sprintf(", --rps %g", first.RPS)
	}
	if first.TPM > 0 {
		pace += fmt.Sprintf(", --tpm %d", first.TPM)
	}
	if o.batch.api {
		// Not paced: the provider answers within its 24h window.
		pace = "--batch-api: the live time; a batch is answered within 24h, at the batch price"
	}
	fmt.Fprintf(&b, " pace=%q", pace)
	return b.String()
}

type estimateJSON struct {
	PromptTokens     *int64   `json:"prompt_tokens"`
	CompletionTokens *int64   `json:"completion_tokens"`
	CostUSD          *float64 `json:"cost_usd"`
	Seconds          float64  `json:"seconds"`
}

type dryRunJSON struct {
	DryRun    bool         `json:"dry_run"`
	Rows      int64        `json:"rows"`
	WouldSend int64        `json:"would_send"`
	CacheHits int64        `json:"cache_hits"`
	Reused    int64        `json:"reused"`
	Invalid   int64        `json:"invalid_input"`
	Calls     int64        `json:"calls"`
	Estimate  estimateJSON `json:"estimate"`
	// Stages are a tuned cascade's later stages (stage 2 first).
	Stages []dryRunStageJSON `json:"stages,omitempty"`
}

// dryRunStageJSON is a later stage's expected share of a dry run.
type dryRunStageJSON struct {
	Stage     int          `json:"stage"`
	Reach     float64      `json:"reach"`
	WouldSend int64        `json:"would_send"`
	CacheHits int64        `json:"cache_hits"`
	Estimate  estimateJSON `json:"estimate"`
}

// estimateOf is an estimate's tokens, cost and time as the JSON has them.
func estimateOf(u provider.Usage, cost float64, costed bool, seconds float64) estimateJSON {
	out := estimateJSON{Seconds: seconds}
	if u.Known {
		p, c := int64(u.Prompt), int64(u.Completion)
		out.PromptTokens, out.CompletionTokens = &p, &c
	}
	if costed {
		c := roundUSD(cost)
		out.CostUSD = &c
	}
	return out
}

func writeDryRunJSON(path string, e engine.Estimate) error {
	out := dryRunJSON{DryRun: true, Rows: e.Rows, WouldSend: e.Send, CacheHits: e.CacheHits, Reused: e.Reused, Invalid: e.Invalid,
		Estimate: estimateOf(e.Usage, e.Cost, e.Costed, e.Seconds)}
	for i, st := range e.Stages {
		out.Stages = append(out.Stages, dryRunStageJSON{Stage: i + 2, Reach: st.Reach, WouldSend: st.Send, CacheHits: st.CacheHits,
			Estimate: estimateOf(st.Usage, st.Cost, st.Costed, st.Seconds)})
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
