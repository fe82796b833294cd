package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/input"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/results"
	"github.com/hfsent/hfsent/internal/spend"
)

// dryRunLatency is the time a call is assumed to take when a dry run
// estimates the time at -c: about what a small chat model on a hosted
// router answers in.
const dryRunLatency = 500 * time.Millisecond

// runDryRun is classify --dry-run: INPUT is read and checked as a run
// would read it, the cache is looked up, and what the run would send,
// cost and take is printed (and written to --summary-json); no call is
// made and no results file is written.
func runDryRun(ctx context.Context, o *classifyOptions, ios *IOStreams, log *slog.Logger, src *input.Reader, ledger *spend.Ledger) error {
	// The client is built as a run builds it (the same checks: the token,
	// the endpoint), but nothing is sent through it.
	guard, rc, closeDB, err := o.cost.openGuarded(ctx, ios, log, &o.prov, nil, o.db.url)
	if err != nil {
		return err
	}
	defer closeDB()
	cfg := engine.EstimateConfig{
		Rules:       engine.Rules{MaxChars: o.maxChars},
		Dedupe:      o.eng.dedupe && !o.eng.noDedupe,
		Ledger:      ledger,
		Model:       o.prov.model,
		Concurrency: o.prov.concurrency,
		Latency:     dryRunLatency,
		RPS:         o.prov.rps,
		TPM:         float64(o.prov.lab.tpm),
	}
	var ecfg engine.Config
	cacheConfig(&ecfg, rc, guard)
	cfg.Cache, cfg.Keys = ecfg.Cache, ecfg.Keys
	if est, ok := guard.Client().(provider.UsageEstimator); ok {
		cfg.Estimator = est
	}
	est, err := engine.EstimateRun(ctx, src, cfg)
	closeCache(log, rc)
	if err != nil {
		return err
	}
	fmt.Fprintln(ios.ErrOut, dryRunLine(est, o))
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
	pace := fmt.Sprintf("-c %d at %s a call", o.prov.concurrency, dryRunLatency)
	if o.prov.rps > 0 {
		pace += fmt.Sprintf(", --rps %g", o.prov.rps)
	}
	if o.prov.lab.tpm > 0 {
		pace += fmt.Sprintf(", --tpm %d", o.prov.lab.tpm)
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
}

func writeDryRunJSON(path string, e engine.Estimate) error {
	out := dryRunJSON{DryRun: true, Rows: e.Rows, WouldSend: e.Send, CacheHits: e.CacheHits, Reused: e.Reused, Invalid: e.Invalid,
		Estimate: estimateJSON{Seconds: e.Seconds}}
	if e.Usage.Known {
		p, c := int64(e.Usage.Prompt), int64(e.Usage.Completion)
		out.Estimate.PromptTokens, out.Estimate.CompletionTokens = &p, &c
	}
	if e.Costed {
		c := roundUSD(e.Cost)
		out.Estimate.CostUSD = &c
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
