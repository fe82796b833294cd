package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"

	"github.com/hfsent/hfsent/internal/batchapi"
	"github.com/hfsent/hfsent/internal/batchrun"
	"github.com/hfsent/hfsent/internal/cache"
	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/input"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/resilience"
	"github.com/hfsent/hfsent/internal/results"
	"github.com/hfsent/hfsent/internal/spend"
	"github.com/hfsent/hfsent/internal/stage"
)

// batchOptions are classify's Batch API flags (--batch-api and its limits).
type batchOptions struct {
	api            bool
	poll           time.Duration
	maxRequests    int
	maxBytes       byteSize
	maxSubmissions int
	cancel         bool
	keepFiles      bool
	fallback       string
	discount       float64
	flags          *pflag.FlagSet
}

// Bounds of the Batch API flags.
const (
	minBatchPoll   = 10 * time.Millisecond
	maxBatchPoll   = time.Hour
	maxBatchReqs   = 1_000_000
	maxBatchSubmit = 10
)

func addBatchFlags(fs *pflag.FlagSet, o *batchOptions) {
	o.flags = fs
	o.maxBytes = byteSize{n: batchrun.DefaultMaxBytes, lo: 1 << 10, hi: 1 << 40}
	fs.BoolVar(&o.api, "batch-api", false, "with --provider chat: send the rows through the provider's OpenAI-style Batch API (OpenAI, Groq, Together, OpenRouter) at its batch price instead of live calls; answers within 24h; needs --output FILE (see docs/guides/batch-api.md)")
	fs.DurationVar(&o.poll, "batch-poll", batchrun.DefaultPoll, "with --batch-api: how often a running batch is asked its status, doubling while nothing changes ("+show(minBatchPoll)+"-"+show(maxBatchPoll)+")")
	fs.IntVar(&o.maxRequests, "batch-max-requests", batchrun.DefaultMaxRequests, "with --batch-api: the most rows in one batch; more are split into several batches, submitted in order ("+rangeHelp(1, maxBatchReqs)+")")
	fs.Var(&o.maxBytes, "batch-max-bytes", "with --batch-api: the largest batch input file (default 200 MB, OpenAI's limit; Together: 100MB); more are split into several batches")
	fs.IntVar(&o.maxSubmissions, "batch-max-submissions", batchrun.DefaultMaxSubmissions, "with --batch-api: times a row is submitted when batches expire or are cancelled by the provider before answering it; then it is upstream_timeout (not final: --resume submits it again) ("+rangeHelp(1, maxBatchSubmit)+")")
	fs.BoolVar(&o.cancel, "batch-cancel", false, "with --batch-api --resume: cancel the batches recorded beside --output that are still running, keep the rows they completed, and submit nothing")
	fs.BoolVar(&o.keepFiles, "batch-keep-files", false, "with --batch-api: keep the batches' files at the provider (by default each batch's input file is deleted once it has ended, its output and error files once the results are written: providers cap an account's file storage)")
	fs.StringVar(&o.fallback, "batch-fallback", "none", "with --batch-api: what becomes of the rows no batch answered in --batch-max-submissions: none (upstream_timeout, for --resume) or live (sent as live calls, under --tpm, --rps and the other live limits)")
	fs.Float64Var(&o.discount, "batch-discount", 0, "with --batch-api: the batch price as a share of the live one (0.5: half), for a model whose price the flags give no batch price of (--price-in/--price-out; a --prices entry without *_cost_per_token_batches); without it such a model is priced live")
}

// validate checks the Batch API flags against the others.
func (o *batchOptions) validate(c *classifyOptions) error {
	given := func(n string) bool { return o.flags.Changed(n) }
	if !o.api {
		for _, n := range []string{"batch-poll", "batch-max-requests", "batch-max-bytes", "batch-max-submissions", "batch-cancel", "batch-keep-files", "batch-fallback", "batch-discount"} {
			if given(n) {
				return usageErrorf("--%s goes with --batch-api", n)
			}
		}
		return nil
	}
	for _, err := range []error{
		refuse(c.prov.cascading(), "--batch-api sends every row to one chat model's Batch API: leave out --cascade and --fallback-model (--batch-fallback live answers the rows a batch left)"),
		refuse(c.prov.Provider != "chat", "--batch-api needs --provider chat: only a chat model's OpenAI-style API has a Batch API"),
		refuse(!c.dryRun && (c.output == "" || c.output == "-"), "--batch-api needs --output FILE: the batches are recorded beside it, for --resume"),
		refuse(c.input == "-", "--batch-api needs INPUT to be a file: its rows are read again to send the ones a batch left unanswered"),
		refuse(c.cost.maxSpend > 0, "--max-spend and --batch-api: a batch is paid for when it runs, so a cap cannot stop it half-way; leave --max-spend out (--dry-run --batch-api estimates the batch price)"),
		refuse(c.prov.Budget.Name != "", "--budget and --batch-api: a fleet budget shares live calls, which batch submissions are not; leave --budget out"),
		refuse(o.cancel && !c.resume, "--batch-cancel needs --resume: it cancels the batches an earlier run recorded beside --output"),
		refuse(o.fallback != "none" && o.fallback != "live", "--batch-fallback %q: want none or live", o.fallback),
		inRange("--batch-poll", o.poll, minBatchPoll, maxBatchPoll, ""),
		inRange("--batch-max-requests", o.maxRequests, 1, maxBatchReqs, ""),
		inRange("--batch-max-submissions", o.maxSubmissions, 1, maxBatchSubmit, ""),
		inRange("--batch-discount", o.discount, 0, 1, "the live price"),
	} {
		if err != nil {
			return err
		}
	}
	_, err := batchRoot(c.prov.Endpoint)
	return err
}

// warnOverOpenAI warns, once and before any call, when --batch-max-requests
// or --batch-max-bytes is raised above OpenAI's limits while the endpoint
// is OpenAI's: it refuses such a file, or fails such a batch at
// validation, so the run would pay for nothing and end with every row
// failed.
func (o *batchOptions) warnOverOpenAI(endpoint string, log *slog.Logger) {
	if !o.api || !provider.IsOpenAI(endpoint) {
		return
	}
	var over []any
	if o.maxRequests > batchrun.DefaultMaxRequests {
		over = append(over, "batch_max_requests", o.maxRequests)
	}
	if o.maxBytes.n > batchrun.DefaultMaxBytes {
		over = append(over, "batch_max_bytes", o.maxBytes.n)
	}
	if len(over) > 0 {
		log.Warn(fmt.Sprintf("OpenAI refuses a batch input file over 200 MB (%d bytes) or %d requests: a file or batch over it fails; "+
			"lower --batch-max-bytes or --batch-max-requests to those limits", batchrun.DefaultMaxBytes, batchrun.DefaultMaxRequests), over...)
	}
}

// batchRoot is the API root of a chat endpoint: the endpoint with its
// trailing /chat/completions removed.
func batchRoot(endpoint string) (string, error) {
	if endpoint == "" {
		endpoint = provider.DefaultChatEndpoint
	}
	root, err := batchapi.RootOf(endpoint)
	if err != nil {
		return "", usageErrorf("--batch-api: --endpoint %v", err)
	}
	return root, nil
}

// batchPrices are the prices a batch's usage is charged at.
func (o *batchOptions) batchPrices(l *spend.Ledger) *spend.Ledger {
	if l == nil {
		return nil
	}
	ps := l.Prices()
	ps.BatchDiscount = o.discount
	return spend.NewLedger(ps.AtBatch(), 0)
}

// runBatchClassify is classify --batch-api: the batches first
// (internal/batchrun), then every row through the engine, answered from
// them.
func runBatchClassify(ctx context.Context, o *classifyOptions, ios *IOStreams, log *slog.Logger, src *input.Reader, info inputInfo) error {
	start := time.Now()
	journal := o.output + batchrun.JournalSuffix
	if _, err := os.Stat(journal); err == nil && !o.resume {
		return usageErrorf("%s records the batches of an earlier run of %s: collect them with the same command and --resume (nothing is paid twice), or remove it to start again (its batches are paid for)", journal, o.output)
	}
	if o.prov.ledger != nil && o.prov.ledger.Prices().Known() && !o.prov.ledger.Prices().HasBatch(o.prov.Model) && o.batch.discount == 0 {
		log.Warn("no batch price for --model: the batch is priced at the live price; give --batch-discount 0.5 or a --prices entry with *_cost_per_token_batches", "model", o.prov.Model)
	}
	leave, err := o.prov.openStages(ctx, ios, log, nil, nil)
	if err != nil {
		return err
	}
	defer leave(true)
	guard := o.prov.guard()
	rc, closeDB, err := o.cost.openCache(ctx, ios, log, &o.prov, nil, "")
	if err != nil {
		return err
	}
	defer closeDB()
	chat, ok := guard.Client().(*provider.Chat)
	if !ok {
		return usageErrorf("--batch-api needs --provider chat")
	}
	api, err := o.batchClient(ios, log)
	if err != nil {
		return err
	}
	out, err := openOutput(o, ios, log, src, info)
	if err != nil {
		return err
	}
	ctx, stopSignals := interruptContext(ctx, ios, log, out.w.Freeze)
	defer stopSignals()
	prior, closePrior, err := priorOutcomes(o)
	if err != nil {
		out.close(nil)
		return err
	}
	defer closePrior()
	r, err := batchrun.New(o.batchConfig(api, chat, prior, rc, guard, journal, info.total, ios, log))
	if err != nil {
		out.close(nil)
		return usageError(err)
	}
	if err := r.Run(ctx); err != nil {
		out.close(nil)
		return batchStopped(ios, r, err)
	}
	return o.writeBatchResults(ctx, ios, log, r, out, guard, rc, info, start)
}

// batchStopped reports a batch run that stopped before its results.
func batchStopped(ios *IOStreams, r *batchrun.Runner, err error) error {
	st := r.Stats()
	fmt.Fprintln(ios.ErrOut, batchLine(st))
	if errors.Is(err, batchrun.ErrInterrupted) {
		return &exitError{code: ExitInterrupted, err: fmt.Errorf("interrupted: %d batches are left running at the provider (they are being paid for, not cancelled), recorded in %s; collect them with the same command and --resume, or cancel them with --resume --batch-cancel", st.Running, r.JournalPath())}
	}
	return &exitError{code: ExitRowsFailed, err: err}
}

// batchLine is the closing line of the batches: exactly how many rows were
// answered, failed, sent again and are still missing.
func batchLine(st batchrun.Stats) string {
	return fmt.Sprintf("batches: created=%d recorded=%d uploads=%d submitted=%d answered=%d failed=%d resubmitted=%d missing=%d not_submitted=%d running=%d cancelled=%d",
		st.Batches, st.Recorded, st.Uploads, st.Submitted, st.Answered, st.Failed, st.Resubmitted, st.Missing, st.NotSent, st.Running, st.Cancelled)
}

// batchClient is the Batch API's client, on the chat endpoint's root
// with the chat token.
func (o *classifyOptions) batchClient(ios *IOStreams, log *slog.Logger) (*batchapi.Client, error) {
	root, err := batchRoot(o.prov.Endpoint)
	if err != nil {
		return nil, err
	}
	tok, err := stage.ResolveToken(ios.getenv, o.prov.TokenEnv)
	if err != nil {
		return nil, usageError(err)
	}
	return &batchapi.Client{Root: root, Token: tok.Value, Log: log, UserAgent: "hfsent/" + version}, nil
}

func (o *classifyOptions) batchConfig(api *batchapi.Client, chat *provider.Chat, prior func(int64) (outcome.Code, error),
	rc *cache.Cache, guard *resilience.Guard, journal string, rows int64, ios *IOStreams, log *slog.Logger) batchrun.Config {
	cfg := batchrun.Config{
		API: api, Chat: chat, Prior: prior, Journal: journal,
		Open:           o.reopenInput,
		CancelRunning:  o.batch.cancel,
		KeepFiles:      o.batch.keepFiles,
		Rows:           rows,
		MaxRequests:    o.batch.maxRequests,
		MaxBytes:       o.batch.maxBytes.n,
		Poll:           o.batch.poll,
		MaxSubmissions: o.batch.maxSubmissions,
		Rules:          engine.Rules{MaxChars: o.maxChars},
		Dedupe:         o.eng.dedupe && !o.eng.noDedupe,
		Progress:       batchProgress(ios, o.prog.show(ios), log),
		Logger:         log,
	}
	if rc != nil {
		cfg.Cache, cfg.Keys = rc, stage.Keyer(guard.Client())
	}
	return cfg
}

// reopenInput reads INPUT again from its first row, as classify read it.
func (o *classifyOptions) reopenInput() (engine.Source, func(), error) {
	f, err := os.Open(o.input)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	src, err := input.NewReader(input.Watch(f, st.Size(), o.input), o.in.readerOptions(o.input, o.maxChars))
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return src, func() { f.Close() }, nil
}

// priorOutcomes reads the earlier results (--resume) alongside the input:
// the outcome of each row, by position.
func priorOutcomes(o *classifyOptions) (func(int64) (outcome.Code, error), func(), error) {
	none := func(int64) (outcome.Code, error) { return "", nil }
	if !o.resume {
		return none, func() {}, nil
	}
	f, err := os.Open(o.output)
	if err != nil {
		return none, func() {}, nil
	}
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		f.Close()
		return none, func() {}, nil
	}
	s, err := results.NewStream(f, st.Size(), o.includeText)
	if err != nil {
		f.Close()
		return none, func() {}, nil // resume.Open checked it; an unreadable file keeps nothing
	}
	var at int64
	return func(seq int64) (outcome.Code, error) {
		for at <= seq && s.More() {
			row, err := s.Next()
			if err != nil {
				return "", nil
			}
			at++
			if at-1 == seq {
				return row.Outcome, nil
			}
		}
		return "", nil
	}, func() { s.Close(); f.Close() }, nil
}

// writeBatchResults writes every row through the engine, answered from
// the batches (and the cache, and earlier results), at the batch price.
func (o *classifyOptions) writeBatchResults(ctx context.Context, ios *IOStreams, log *slog.Logger, r *batchrun.Runner, out *output,
	guard *resilience.Guard, rc *cache.Cache, info inputInfo, start time.Time) error {
	log.Info("every batch has ended: writing the results", "output", o.output)
	replay := r.Replay()
	var live atomic.Int64
	if o.batch.fallback == "live" {
		replay.Live = func(ctx context.Context, text string) (provider.Prediction, error) {
			live.Add(1)
			ans, err := guard.Classify(ctx, &resilience.Row{}, []string{text})
			if err != nil {
				return provider.Prediction{}, err
			}
			return ans.Predictions[0], nil
		}
	}
	rg := resilience.Build(replay, resilience.Config{Plain: true, Concurrency: 4, Ledger: o.batch.batchPrices(o.prov.ledger), Logger: log})
	cfg := o.eng.config(&o.prov, "classify")
	cfg.Rules = engine.Rules{MaxChars: o.maxChars}
	cfg.IncludeText = o.includeText
	cfg.ExpectedRows = info.total
	cfg.Logger = log
	if rc != nil {
		cfg.Cache, cfg.Keys = rc, stage.Keyer(guard.Client())
	}
	cfg.Answers = o.qual.answers(&o.prov)[0]
	q, sink, err := o.withQuality(&cfg, r.Sink(out.sink))
	if err != nil {
		return err
	}
	sum, runErr := engine.Run(ctx, out.src, sink, rg, cfg)
	closeCache(log, rc)
	if err := out.close(runErr); err != nil && runErr == nil {
		runErr = err
	}
	sum.Provider.Calls = live.Load() // the replay is no call; a live fallback is
	sum.Elapsed = time.Since(start)  // the batches' wait too
	v := endQuality(ios, log, q, sum, exitFor(sum, runErr, o.failOn), false)
	fmt.Fprintln(ios.ErrOut, batchLine(r.Stats()))
	if o.summaryJSON != "" {
		err := writeSummaryJSON(o.summaryJSON, sum, v, q, false)
		if err == nil {
			err = addBatchesJSON(o.summaryJSON, r.Stats())
		}
		if err != nil {
			log.Error("cannot write --summary-json", "path", o.summaryJSON, "err", err)
		}
	}
	writeStepSummary(ios, log, "hfsent classify "+o.input, sum, v)
	if runErr != nil {
		return &exitError{code: v.Code, err: fmt.Errorf("writing %s: %w", outputName(o), runErr)}
	}
	if sum.Stop == engine.StopNone && sum.InputErr == nil {
		if err := r.Finished(ctx); err != nil && !errors.Is(err, os.ErrNotExist) {
			log.Warn("cannot remove the batch journal; remove it before a run without --resume", "path", r.JournalPath(), "err", err)
		}
	}
	if sum.Stop == engine.StopInterrupted {
		log.Warn("interrupted: finished rows are written; the batches are recorded: --resume collects the rest")
	}
	return silentExit(v.Code)
}

// batchProgress draws the batches' request counts: a line that redraws
// itself on a terminal, else a line now and then.
func batchProgress(ios *IOStreams, tty bool, log *slog.Logger) func(batchrun.Progress) {
	var last time.Time
	return func(p batchrun.Progress) {
		line := fmt.Sprintf("batches %d (%d running, %s): %d/%d rows done, %d failed", p.Batches, p.Running, orDash(p.Status), p.Completed+p.Failed, p.Total, p.Failed)
		if tty {
			fmt.Fprintf(ios.ErrOut, "\r%s\x1b[K", line)
			if p.Running == 0 {
				fmt.Fprintln(ios.ErrOut)
			}
			return
		}
		if time.Since(last) >= time.Minute || p.Running == 0 {
			last = time.Now()
			log.Info(line)
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// batchesJSON is the closing line's counts in --summary-json ("batches").
type batchesJSON struct {
	Created      int   `json:"created"`
	Recorded     int   `json:"recorded"`
	Uploads      int   `json:"uploads"`
	Submitted    int64 `json:"submitted"`
	Answered     int64 `json:"answered"`
	Failed       int64 `json:"failed"`
	Resubmitted  int64 `json:"resubmitted"`
	Missing      int64 `json:"missing"`
	NotSubmitted int64 `json:"not_submitted"`
	Running      int   `json:"running"`
	Cancelled    int   `json:"cancelled"`
}

// addBatchesJSON adds the batches' counts to the summary file just
// written, under "batches", keeping every key it has.
func addBatchesJSON(path string, st batchrun.Stats) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(b, &doc); err != nil {
		return err
	}
	raw, err := json.Marshal(batchesJSON{Created: st.Batches, Recorded: st.Recorded, Uploads: st.Uploads, Submitted: st.Submitted,
		Answered: st.Answered, Failed: st.Failed, Resubmitted: st.Resubmitted, Missing: st.Missing, NotSubmitted: st.NotSent,
		Running: st.Running, Cancelled: st.Cancelled})
	if err != nil {
		return err
	}
	doc["batches"] = raw
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(out, '\n'), 0o644)
}
