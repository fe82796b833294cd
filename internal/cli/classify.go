package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hfsent/hfsent/internal/budget"
	"github.com/hfsent/hfsent/internal/calibration"
	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/input"
)

type classifyOptions struct {
	input       string
	output      string
	in          inputOptions
	prov        providerOptions
	db          dbOptions // --db, for --budget
	eng         engineOptions
	maxChars    int
	resume      bool
	maxDuration time.Duration
	includeText bool
	rawCSV      bool
	summaryJSON string
	report      string
	failOn      failPolicy
	prog        progressOptions
	cost        costOptions
	dryRun      bool
	batch       batchOptions
	qual        qualityOptions
	configFile  string
	// run is what a calibration fitted on this run's answers is for
	// (prepareQuality): its first stage's.
	run calibration.For
}

// classifyLong is classify's --help.
const classifyLong = `Classify reads INPUT (a CSV with a header line; - reads stdin), sends each
row's text to the model, and writes one result row per input row, in input
order, to --output (stdout by default). Results are written as rows finish, so
an interrupted run keeps everything it finished.

INPUT may be separated by commas, semicolons, tabs or pipes (sniffed from the
header; --delimiter sets it), in UTF-8, in UTF-16 with a byte-order mark, or
in the encoding --encoding names; LF, CRLF and CR-only line ends are read.
Bytes not valid in the encoding refuse the file, naming the line. Texts and
ids are written back exactly as read (a CRLF inside a quoted text stays CRLF).

Columns written: request_id, status, label, score, outcome, model, attempts,
latency_ms, error, queued_ms, started_ms, finished_ms (and text with
--include-text), then prompt_tokens, completion_tokens (a chat model's
usage; blank otherwise), cost_usd (the row's calls at --price-in/--price-out
or --prices; blank without a price) and cached (true when the response cache
answered the row, without a call), then raw_score (with --calibration),
review (with --review-below) and stage (with --cascade). Outcome codes and
exit codes are listed in the README.

--cascade FILE sends each row to a cheap model first and on to the next
stage only when its calibrated score is under the stage's escalate-below,
or its call failed (docs/guides/cascade.md); --config FILE sets any flag
by its long name, the command line winning.

With --gold-column COL, each row's label is compared with the gold label in
COL: accuracy, macro-F1, per-label figures, the confusion matrix, the ECE
and a coverage table follow the summary line (and go to --summary-json and
--report); --min-accuracy and --min-macro-f1 exit 3 when they fall short.
--calibration makes score the calibrated probability that the label is
right (hfsent calibrate fits one); --review-below marks the rows to check
(docs/guides/quality.md).

Every final answer is kept in a response cache across runs, under the key of
the exact request (--cache-dir, default the user's cache directory/hfsent;
--no-cache bypasses it): the same request is never paid for twice.
--dry-run prints what a run would send, cost and take, without a call;
--max-spend stops a run before it spends more. With --provider chat,
--batch-api sends the rows through the provider's OpenAI-style Batch API at
its batch price instead of live calls, recording the batches beside
--output for --resume (docs/guides/batch-api.md).
Text, label and error that begin with = + - @ tab or CR get a leading ' so
that a spreadsheet does not run them as formulas (--raw-csv: as they are);
request_id is written exactly as read.

The token comes from HF_TOKEN, else the Hugging Face token file
($HF_TOKEN_PATH, else $HF_HOME/token, else ~/.cache/huggingface/token).`

func newClassifyCmd(ios *IOStreams, g *globalOptions) *cobra.Command {
	o := &classifyOptions{}
	cmd := &cobra.Command{
		Use:   "classify INPUT",
		Short: "Classify every text row of a CSV file (INPUT, or - for stdin)",
		Long:  classifyLong,
		Example: `  # offline, no token: the embedded model
  hfsent classify samples/feedback.csv --provider local -o results.csv

  # the Hugging Face API, 8 calls in flight
  HF_TOKEN=hf_... hfsent classify feedback.csv -o results.csv -c 8

  # a pipe, columns named differently
  cat reviews.csv | hfsent classify - --id-column id --text-column body > results.csv

  # a Windows-1252 export from an old CRM (the ; delimiter is sniffed)
  hfsent classify export.csv --encoding windows-1252 -o results.csv

  # a chat model on the router, choosing among labels
  hfsent classify feedback.csv -o results.csv --provider chat \
    --model meta-llama/Llama-3.1-8B-Instruct:cerebras --labels positive,negative,neutral

  # the bill before, and a cap on it
  hfsent classify feedback.csv --provider chat --model gpt-4o-mini --labels positive,negative \
    --endpoint https://api.openai.com/v1/chat/completions --token-env OPENAI_API_KEY \
    --price-in 0.15 --price-out 0.6 --dry-run
  hfsent classify feedback.csv -o results.csv ... --price-in 0.15 --price-out 0.6 --max-spend 5

  # against gold labels, a CI gate, and the unsure rows for a person
  hfsent classify sample.csv --gold-column gold --min-accuracy 0.9 -o results.csv
  hfsent classify all.csv --calibration cal.json --review-below 0.9 --review-out review.csv -o results.csv`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.input = args[0]
			return withConfig(cmd, ios, g, o.configFile, func(log *slog.Logger) error { return runClassify(cmd.Context(), o, ios, log) })
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&o.output, "output", "o", "", "results CSV (default: stdout)")
	addConfigFlag(fs, &o.configFile)
	addInputFlags(fs, &o.in)
	addProviderFlags(fs, &o.prov, batchProvider)
	addDBFlags(fs, &o.db, false)
	addEngineFlags(fs, &o.eng, batchEngine)
	addCacheFlags(fs, &o.cost)
	addPriceFlags(fs, &o.prov.Config)
	addSpendFlag(fs, &o.cost)
	fs.BoolVar(&o.dryRun, "dry-run", false, "read and check INPUT as a run would, make no call, and print what the run would do: the rows it would send, the cache hits already there, the estimated tokens, cost (at the prices given) and time (at --tpm, --rps, -c); nothing is written but --summary-json")
	fs.IntVar(&o.maxChars, "max-chars", 5000, "longer texts are invalid_input ("+rangeHelp(1, maxCharsLimit)+")")
	fs.BoolVar(&o.resume, "resume", false, "keep rows already in --output whose outcome is final, process only the rest")
	fs.DurationVar(&o.maxDuration, "max-duration", 0, "a deadline for the run: after this long no row is admitted and no call not yet sent is sent; calls in flight get 10s; the rest are not_attempted (0: no limit, up to "+show(maxRunDuration)+")")
	fs.BoolVar(&o.includeText, "include-text", false, "copy the input text into the results")
	fs.BoolVar(&o.rawCSV, "raw-csv", false, "write text, label and error as they are, without the spreadsheet-formula guard (a ' before a leading = + - @ tab or CR); for programs, not spreadsheets")
	fs.StringVar(&o.summaryJSON, "summary-json", "", "write counts by outcome, calls, retries, elapsed time, achieved rate and exit reason to this JSON file")
	fs.StringVar(&o.report, "report", "", "at the end, draw the run to this .svg or .html file (see hfsent report)")
	fs.Var(&o.failOn, "fail-on", "which failed rows make the exit code 1: any, a failure rate such as 5% (exit 1 above it), or none")
	addProgressFlags(fs, &o.prog, "bar")
	addBatchFlags(fs, &o.batch)
	addQualityFlags(fs, &o.qual, classifyQuality, &o.prov.Config)
	return cmd
}

func (o *classifyOptions) validate() error {
	if err := o.prov.setup(); err != nil {
		return err
	}
	if err := o.prov.checkDB(&o.db); err != nil {
		return err
	}
	if err := o.validBounds(); err != nil {
		return err
	}
	if err := o.in.validate(); err != nil {
		return err
	}
	if o.resume && (o.output == "" || o.output == "-") {
		return usageErrorf("--resume needs --output FILE: it reads the rows already there")
	}
	if o.resume && o.input == "-" {
		return usageErrorf("--resume needs INPUT to be a file: stdin cannot be checked against the earlier run")
	}
	if st, err := os.Stat(o.input); o.resume && err == nil && !st.Mode().IsRegular() {
		// Checked before INPUT is opened: opening a pipe with no writer
		// would wait for ever.
		return usageErrorf("--resume needs INPUT to be a regular file: %s cannot be checked against the earlier run", o.input)
	}
	if err := o.validReport(); err != nil {
		return err
	}
	if err := o.cost.validate(&o.prov); err != nil {
		return err
	}
	if o.dryRun && o.resume {
		return usageErrorf("--dry-run estimates a whole INPUT: leave --resume out")
	}
	if err := o.qual.validate(o.qual.gold()); err != nil {
		return err
	}
	o.in.goldColumn = strings.TrimSpace(o.qual.goldColumn)
	return o.batch.validate(o)
}

// prepareQuality checks the flags (validate), then reads each stage's
// --calibration and checks it against the stage, before any call.
func (o *classifyOptions) prepareQuality(log *slog.Logger) error {
	err := o.validate()
	if err == nil {
		err = o.prov.prepare(log)
	}
	if err == nil {
		o.run = o.prov.answers[0].For
	}
	return err
}

// withQuality sets the engine up for the quality flags and opens what
// the run counts into (gold labels, --review-out): the rows then pass
// through the returned sink.
func (o *classifyOptions) withQuality(cfg *engine.Config, sink engine.Sink) (*qualityRun, engine.Sink, error) {
	cfg.KeepText = o.qual.reviewOut != ""
	q, err := o.qual.start(o.qual.gold(), o.rawCSV, o.prov.stageCount(), o.prov.first().MultiLabel)
	if err != nil {
		return nil, nil, err
	}
	return q, q.sink(sink), nil
}

// endQuality prints the summary line (with a --cascade's stages: cascade)
// and the quality block, and applies the gates to the run's verdict.
func endQuality(ios *IOStreams, log *slog.Logger, q *qualityRun, sum engine.Summary, v verdict, cascade bool) verdict {
	q.finish()
	fmt.Fprintln(ios.ErrOut, summaryLine(sum)+q.keys()+stageKeys(sum, cascade, q.stageAccuracy()))
	q.print(ios.ErrOut)
	if q != nil && q.err != nil {
		log.Error(q.err.Error())
	}
	v = gateQuality(v, q.short())
	if v.QualityShort != "" {
		log.Error("quality gate: " + v.QualityShort)
	}
	return v
}

func runClassify(ctx context.Context, o *classifyOptions, ios *IOStreams, log *slog.Logger) error {
	if err := o.prepareQuality(log); err != nil {
		return err
	}
	o.batch.warnOverOpenAI(o.prov.Endpoint, log)
	if o.output == "" || o.output == "-" {
		if err := ios.checkOut("results"); err != nil {
			return err
		}
	}
	in, info, closeIn, err := openInput(o, ios)
	if err != nil {
		return err
	}
	defer closeIn()
	src, err := input.NewReader(in, o.in.readerOptions(info.name, o.maxChars))
	if err != nil {
		return usageError(err)
	}
	logInput(log, info.name, src)
	if err := o.cost.ledger(&o.prov); err != nil {
		return err
	}
	if o.dryRun {
		return runDryRun(ctx, o, ios, log, src)
	}
	if o.batch.api {
		return runBatchClassify(ctx, o, ios, log, src, info)
	}
	leave, err := o.prov.openStages(ctx, ios, log, &budgets{dbo: &o.db, kind: budget.KindClassify}, nil)
	if err != nil {
		return err
	}
	// Run after the run: no call is in flight any more.
	defer leave(true)
	guard := o.prov.guard()
	rc, closeDB, err := o.cost.openCache(ctx, ios, log, &o.prov, nil, o.db.url)
	if err != nil {
		return err
	}
	defer closeDB()
	out, err := openOutput(o, ios, log, src, info)
	if err != nil {
		return err
	}

	ctx, stopSignals := interruptContext(ctx, ios, log, out.w.Freeze)
	defer stopSignals()

	runSink, writePicture := o.classifyReport(out.sink, log)
	bar := newProgress(ios, o.prog.show(ios), info.total)
	if o.prov.first().Adaptive {
		bar.showLimit(guard.Counters().Limit)
	}
	cfg := o.eng.config(&o.prov, "classify")
	cfg.MaxDuration = o.maxDuration
	cfg.Rules = engine.Rules{MaxChars: o.maxChars}
	cfg.IncludeText = o.includeText
	cfg.ExpectedRows = info.total
	cfg.Progress = bar.update
	cfg.Logger = log
	cfg.Cache, cfg.Stages = rc, o.prov.opened.Engine(rc, o.qual.answers(&o.prov))
	q, runSink, err := o.withQuality(&cfg, runSink)
	if err != nil {
		return err
	}
	sum, runErr := engine.Run(ctx, out.src, runSink, guard, cfg)
	bar.finish()
	closeCache(log, rc)
	if err := out.close(runErr); err != nil && runErr == nil {
		runErr = err
	}

	cascade := o.prov.file != nil
	v := endQuality(ios, log, q, sum, exitFor(sum, runErr, o.failOn), cascade)
	code := v.Code
	if o.summaryJSON != "" {
		if err := writeSummaryJSON(o.summaryJSON, sum, v, q, cascade); err != nil {
			log.Error("cannot write --summary-json", "path", o.summaryJSON, "err", err)
		}
	}
	writeStepSummary(ios, log, "hfsent classify "+o.input, sum, v)
	writePicture(q.quality())
	switch {
	case runErr != nil:
		return &exitError{code: code, err: fmt.Errorf("writing %s: %w", outputName(o), runErr)}
	case sum.InputErr != nil:
		return &exitError{code: code, err: fmt.Errorf("%w; stopped reading there, the rows before it were processed", sum.InputErr)}
	case sum.Stop == engine.StopInterrupted:
		log.Warn("interrupted: finished rows are written; rows not_attempted can be redone with --resume")
	case sum.Stop.ProviderStop():
		return &exitError{code: code, err: fmt.Errorf("stopped sending (%s): %s", sum.Stop, sum.StopDetail)}
	case sum.Stop == engine.StopMaxSpend:
		return &exitError{code: code, err: errors.New(spendAdvice(sum, "finish with --resume and a higher --max-spend"))}
	}
	return silentExit(code)
}

// exitFor decides the exit code of a classify run; --fail-on decides only
// among row outcomes.
func exitFor(sum engine.Summary, runErr error, failOn failPolicy) verdict {
	v := failOn.judge(sum)
	switch {
	case sum.Stop == engine.StopInterrupted:
		v.Code, v.Reason = ExitInterrupted, reasonInterrupted
	case sum.InputErr != nil:
		v.Code, v.Reason = ExitUsage, reasonInputError
	case runErr != nil:
		v.Code, v.Reason = ExitRowsFailed, reasonWriteError
	case sum.Stop.ProviderStop():
		// Not a matter of tolerating failed rows: none could succeed.
		v.Code, v.Reason = ExitRowsFailed, reasonProviderStop
	case sum.Stop == engine.StopMaxSpend:
		v.Code, v.Reason = ExitRowsFailed, reasonMaxSpend
	}
	return v
}

// inputInfo is what is known of INPUT before the run.
type inputInfo struct {
	name   string // for messages: the path, or "stdin"
	total  int64  // data rows, -1 when unknown (stdin, a pipe)
	size   int64  // bytes, with digest
	digest string // hex SHA-256 of a regular file, "" otherwise
}

// openInput opens INPUT. A regular file is read once in full first, so a
// malformed CSV is refused (exit 2, naming the line) before any call, the
// progress bar knows the total, and --resume has the file's fingerprint;
// stdin and pipes cannot be read twice.
func openInput(o *classifyOptions, ios *IOStreams) (io.Reader, inputInfo, func(), error) {
	if o.input == "-" {
		return ios.In, inputInfo{name: "stdin", total: -1}, func() {}, nil
	}
	info := inputInfo{name: o.input, total: -1}
	f, err := os.Open(o.input)
	if err != nil {
		return nil, info, nil, usageErrorf("cannot open input %s: %v", o.input, unwrapPathError(err))
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		if err == nil && st.IsDir() {
			f.Close()
			return nil, info, nil, usageErrorf("input %s is a directory", o.input)
		}
		return f, info, func() { f.Close() }, nil
	}
	// Both readings are watched: a file that changes while it is read
	// (truncated, or grown) stops the run where that is seen, and nothing
	// read after is processed.
	h := &digest{h: sha256.New()}
	total, err := input.Count(io.TeeReader(input.Watch(f, st.Size(), o.input), h), o.in.readerOptions(o.input, o.maxChars))
	if err != nil {
		f.Close()
		return nil, info, nil, usageError(err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, info, nil, usageErrorf("cannot read input %s: %v", o.input, err)
	}
	info.total, info.size, info.digest = total, h.n, hex.EncodeToString(h.h.Sum(nil))
	return input.Watch(f, st.Size(), o.input), info, func() { f.Close() }, nil
}

// digest hashes and counts what passes through it.
type digest struct {
	h hash.Hash
	n int64
}

func (d *digest) Write(p []byte) (int, error) {
	d.n += int64(len(p))
	return d.h.Write(p)
}

func outputName(o *classifyOptions) string {
	if o.output == "" || o.output == "-" {
		return "stdout"
	}
	return o.output
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
