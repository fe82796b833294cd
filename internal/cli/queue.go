package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hfsent/hfsent/internal/input"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/queue"
	"github.com/hfsent/hfsent/internal/results"
	"github.com/hfsent/hfsent/internal/stage"
)

// dbEnv is the environment variable --db defaults to, so that a password
// need not be on the command line.
const dbEnv = "HFSENT_DB"

// dbOptions are the flags every queue command and worker share.
type dbOptions struct {
	url   string
	batch string
}

func addDBFlags(fs *pflag.FlagSet, o *dbOptions, batch bool) {
	fs.StringVar(&o.url, "db", "", "PostgreSQL URL, e.g. postgres://user@host:5432/db, or key=value settings (default: $"+dbEnv+"); messages show only its host, port, database and user")
	if batch {
		fs.StringVar(&o.batch, "batch", "", "batch name (required)")
	}
}

// open validates the flags and connects, checking the schema unless
// migrating.
func (o *dbOptions) open(ctx context.Context, ios *IOStreams, needBatch, checkSchema bool) (*queue.DB, error) {
	fromEnv := o.url == ""
	if fromEnv {
		o.url = ios.getenv(dbEnv)
	}
	if strings.TrimSpace(o.url) == "" {
		return nil, usageErrorf("--db is required (or set %s): the PostgreSQL URL of the queue, e.g. postgres://user@host:5432/db", dbEnv)
	}
	if needBatch && strings.TrimSpace(o.batch) == "" {
		return nil, usageErrorf("--batch NAME is required")
	}
	db, err := queue.Open(ctx, o.url)
	if err != nil {
		if fromEnv && errors.Is(err, queue.ErrURL) {
			err = fmt.Errorf("%w; it came from $%s", err, dbEnv)
		}
		return nil, queueError(err)
	}
	if checkSchema {
		if err := db.Check(ctx); err != nil {
			db.Close()
			return nil, queueError(err)
		}
	}
	return db, nil
}

// queueError maps a queue error to its exit code: set-up errors (a bad URL,
// a database down, no schema or a newer one, no such batch, a refused push)
// are exit 2; anything else, a failure on the way, exit 1.
func queueError(err error) error {
	for _, k := range []error{queue.ErrURL, queue.ErrConnect, queue.ErrNoSchema, queue.ErrNewer, queue.ErrNoBatch, queue.ErrRefused, queue.ErrMigration, queue.ErrName} {
		if errors.Is(err, k) {
			return usageError(err)
		}
	}
	var ie *input.Error
	if errors.As(err, &ie) {
		return usageError(err)
	}
	return &exitError{code: ExitRowsFailed, err: err}
}

func newQueueCmd(ios *IOStreams, g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "Keep a batch in PostgreSQL for many workers: push, status, export",
		Long: `A batch too big for one machine, or a provider account shared by several
teams, goes into PostgreSQL: queue push copies a CSV into a batch, any number
of hfsent worker processes on any machines claim its rows under the batch's
global and per-client caps (counted in the database), and queue export writes
the same results CSV classify writes.

The database URL comes from --db, else $` + dbEnv + `. The schema (in the
schema hfsent) is created by push, or by queue migrate.`,
		Example: `  export HFSENT_DB=postgres://hfsent@db.internal:5432/hfsent
  hfsent queue push feedback.csv --batch nightly --global-cap 16 --client-column team --client-cap 4
  hfsent worker --batch nightly -c 8 --exit-when-done      # on each machine
  hfsent queue status --batch nightly --watch
  hfsent queue export --batch nightly -o results.csv`,
	}
	cmd.AddCommand(newQueueMigrateCmd(ios, g), newQueuePushCmd(ios, g), newQueueStatusCmd(ios, g),
		newQueueExportCmd(ios, g), newQueueListCmd(ios, g), newQueueDropCmd(ios, g))
	return cmd
}

func newQueueMigrateCmd(ios *IOStreams, g *globalOptions) *cobra.Command {
	o := &dbOptions{}
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the queue schema in the database",
		Long: `Create the queue's tables (schema hfsent) or bring them up to this hfsent's
version. push does it on first use too. A database whose schema is newer than
this hfsent is refused (exit 2): upgrade hfsent instead.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := g.logger(ios); err != nil {
				return err
			}
			db, err := o.open(cmd.Context(), ios, false, false)
			if err != nil {
				return err
			}
			defer db.Close()
			from, to, err := db.Migrate(cmd.Context())
			if err != nil {
				return queueError(err)
			}
			if from == to {
				fmt.Fprintf(ios.Out, "queue schema at %s is up to date (version %d)\n", db.URL(), to)
			} else {
				fmt.Fprintf(ios.Out, "queue schema at %s migrated from version %d to %d\n", db.URL(), from, to)
			}
			return nil
		},
	}
	addDBFlags(cmd.Flags(), o, false)
	return cmd
}

type pushOptions struct {
	db           dbOptions
	input        string
	in           inputOptions
	model        string
	globalCap    int
	clientColumn string
	clientCap    int
	globalRPS    float64
	lease        time.Duration
	maxAttempts  int
	maxChars     int
	prog         progressOptions
	flags        *pflag.FlagSet
	// provider and labels: the kind of model the batch is for (workers of
	// another kind, or with other labels, are refused).
	provider  string
	labels    string
	labelList []string
}

const (
	maxGlobalCap    = 100_000
	maxAttemptsCap  = 100
	minLease        = 100 * time.Millisecond
	maxLease        = 24 * time.Hour
	maxPollInterval = time.Minute
)

func newQueuePushCmd(ios *IOStreams, g *globalOptions) *cobra.Command {
	o := &pushOptions{}
	cmd := &cobra.Command{
		Use:   "push INPUT",
		Short: "Copy a CSV (INPUT, or - for stdin) into a batch",
		Long: `push reads INPUT exactly as classify does (delimiter, encoding, header checks)
and copies every row into the batch with COPY, in one transaction: a row that
breaks the rules (no id, blank text, duplicate id, too long) is stored already
finished as invalid_input, never dropped. The batch is created on first push
with the settings given; later pushes append and may not change them. A
batch name holds at most 200 characters and no control character (a newline,
an escape): another is refused, exit 2.

Pushing the same file again does nothing (it is recognised by its SHA-256).
A file whose ids are already in the batch, from another file, is refused.
SIGINT, SIGTERM or SIGHUP stop a push at once, adding no row: exit 130.

Caps hold over all workers together: --global-cap rows running at once in
the whole batch, --client-cap per value of --client-column; --global-rps
limits claims per second. --lease is how long a claimed row stays with its
worker without a heartbeat; --max-attempts how many times a row is claimed
before its last failure is final.`,
		Example: `  hfsent queue push feedback.csv --db postgres://hfsent@db/hfsent --batch nightly --global-cap 16
  hfsent queue push tickets.csv --batch support --client-column team --client-cap 3 --global-rps 20
  cat more.csv | hfsent queue push - --batch nightly`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.input = args[0]
			log, err := g.logger(ios)
			if err != nil {
				return err
			}
			return runPush(cmd.Context(), o, ios, log)
		},
	}
	fs := cmd.Flags()
	o.flags = fs
	addDBFlags(fs, &o.db, true)
	addInputFlags(fs, &o.in)
	fs.StringVar(&o.model, "model", provider.DefaultModel, "model id the batch is for: workers with another --model are refused ("+provider.LocalModel+" for workers with --provider local)")
	fs.StringVar(&o.provider, "provider", "hf", "the kind of model the batch is for: hf (a text-classification model: workers with --provider hf, tei or local) or chat (workers with --provider chat and the same --labels)")
	fs.StringVar(&o.labels, "labels", "", "the labels the batch's answers are chosen from (required with --provider chat; with hf, zero-shot): workers with other --labels are refused")
	fs.IntVar(&o.globalCap, "global-cap", 8, "rows running at once over all workers ("+rangeHelp(1, maxGlobalCap)+")")
	fs.StringVar(&o.clientColumn, "client-column", "", "column naming each row's client (a team, a tenant), for --client-cap and fair shares")
	fs.IntVar(&o.clientCap, "client-cap", 0, "rows running at once per client (0: no cap, else "+rangeHelp(1, maxGlobalCap)+"); needs --client-column")
	fs.Float64Var(&o.globalRPS, "global-rps", 0, "rows claimed per second over all workers (0: no limit, else "+rangeHelp(minRPS, maxRPS)+")")
	fs.DurationVar(&o.lease, "lease", 30*time.Second, "how long a claimed row stays with its worker without a heartbeat ("+rangeHelp(minLease, maxLease)+"); a worker's --lease overrides it")
	fs.IntVar(&o.maxAttempts, "max-attempts", 3, "claims of a row before its last failure is final ("+rangeHelp(1, maxAttemptsCap)+")")
	fs.IntVar(&o.maxChars, "max-chars", 5000, "longer texts are invalid_input ("+rangeHelp(1, maxCharsLimit)+")")
	fs.StringVar(&o.in.goldColumn, "gold-column", "", "a column of gold labels to store with each row: queue export then compares the results with them (accuracy, macro-F1, the coverage table; --min-accuracy)")
	addProgressFlags(fs, &o.prog, "bar")
	return cmd
}

func (o *pushOptions) validate() error {
	if o.flags.Changed("gold-column") && strings.TrimSpace(o.in.goldColumn) == "" {
		return usageErrorf("--gold-column must name a column")
	}
	o.in.goldColumn = strings.TrimSpace(o.in.goldColumn)
	for _, err := range []error{
		inRange("--global-cap", o.globalCap, 1, maxGlobalCap, ""),
		inRange("--client-cap", o.clientCap, 1, maxGlobalCap, "no cap"),
		inRange("--global-rps", o.globalRPS, minRPS, maxRPS, "no limit"),
		inRange("--lease", o.lease, minLease, maxLease, ""),
		inRange("--max-attempts", o.maxAttempts, 1, maxAttemptsCap, ""),
		inRange("--max-chars", o.maxChars, 1, maxCharsLimit, ""),
	} {
		if err != nil {
			return err
		}
	}
	if strings.TrimSpace(o.model) == "" {
		return usageErrorf("--model must not be empty")
	}
	if o.provider != "hf" && o.provider != "chat" {
		return usageErrorf("--provider %q: want hf or chat", o.provider)
	}
	if o.flags.Changed("labels") {
		var err error
		if o.labelList, err = stage.ParseLabels(o.labels); err != nil {
			return usageError(err)
		}
	}
	if o.provider == "chat" && (len(o.labelList) == 0 || !o.flags.Changed("model")) {
		return usageErrorf("--provider chat needs --model and --labels: the chat model and the labels its workers answer with")
	}
	if o.db.batch != "" {
		if err := queue.CheckName(o.db.batch); err != nil {
			return usageError(err)
		}
	}
	if err := o.prog.validate(); err != nil {
		return err
	}
	return o.in.validate()
}

func runPush(ctx context.Context, o *pushOptions, ios *IOStreams, log *slog.Logger) error {
	if err := o.validate(); err != nil {
		return err
	}
	db, err := o.db.open(ctx, ios, true, false)
	if err != nil {
		return err
	}
	defer db.Close()
	// An existing batch decides the client column when none is given.
	if v, err := db.Version(ctx); err == nil && v > 0 {
		if v > queue.Latest() {
			return queueError(db.Check(ctx))
		}
		if b, err := db.Batch(ctx, o.db.batch); err == nil {
			if !o.flags.Changed("client-column") {
				o.clientColumn = b.ClientColumn
			}
			// Texts are cut to the batch's limit as they are read.
			if !o.flags.Changed("max-chars") {
				o.maxChars = b.MaxChars
			}
		}
	}
	if o.clientCap > 0 && o.clientColumn == "" {
		return usageErrorf("--client-cap needs --client-column: the column that names each row's client")
	}
	in, info, closeIn, err := openInput(&classifyOptions{input: o.input, in: o.in, maxChars: o.maxChars}, ios)
	if err != nil {
		return err
	}
	defer closeIn()
	var h *digest
	if info.digest == "" {
		h = &digest{h: sha256.New()}
		in = io.TeeReader(in, h)
	}
	ropts := o.in.readerOptions(info.name, o.maxChars)
	ropts.ClientColumn = o.clientColumn
	src, err := input.NewReader(in, ropts)
	if err != nil {
		return usageError(err)
	}
	logInput(log, info.name, src)

	ctx, stop := signal.NotifyContext(ctx, stopSignals...)
	defer stop()
	bar := newCountBar(ios, o.prog.show(ios), info.total, "push")
	req := queue.PushRequest{
		Spec: queue.Spec{Name: o.db.batch, Model: o.model, GlobalCap: o.globalCap, ClientColumn: o.clientColumn,
			ClientCap: o.clientCap, GlobalRPS: o.globalRPS, Lease: o.lease, MaxAttempts: o.maxAttempts, MaxChars: o.maxChars,
			Provider: batchKind(o.provider), Labels: o.labelList},
		Given:    o.flags.Changed,
		Source:   info.name,
		Digest:   info.digest,
		Progress: bar.set,
		Gold:     o.in.goldColumn != "",
	}
	if h != nil {
		req.DigestAfter = func() string { return hex.EncodeToString(h.h.Sum(nil)) }
	}
	start := time.Now()
	res, err := db.Push(ctx, req, src)
	bar.finish()
	if err != nil {
		if ctx.Err() != nil {
			return &exitError{code: ExitInterrupted, err: errors.New("push interrupted: nothing was added (a push is one transaction)")}
		}
		return queueError(err)
	}
	switch {
	case res.Already:
		fmt.Fprintf(ios.ErrOut, "batch %q: %s was pushed before; nothing added (%d rows in the batch)\n", res.Batch.Name, info.name, res.Batch.Rows)
	default:
		verb := "added to"
		if res.Created {
			verb = "created"
		}
		el := time.Since(start)
		fmt.Fprintf(ios.ErrOut, "batch %q %s: %d rows pushed (%d invalid_input) in %s, %.0f rows/s; %d rows in the batch\n",
			res.Batch.Name, verb, res.Rows, res.Invalid, el.Round(time.Millisecond), float64(res.Rows)/max(el.Seconds(), 1e-9), res.Batch.Rows)
	}
	return nil
}

// countBar is a progress bar (or a spinner, total unknown) of rows; nil
// draws nothing.
type countBar struct{ bar *progressbar.ProgressBar }

func newCountBar(ios *IOStreams, show bool, total int64, desc string) *countBar {
	if !show {
		return nil
	}
	if total <= 0 {
		total = -1
	}
	return &countBar{bar: newBar(ios, desc, total)}
}

func (b *countBar) set(n int64) {
	if b != nil {
		_ = b.bar.Set64(n)
	}
}

func (b *countBar) describe(s string) {
	if b != nil {
		b.bar.Describe(s)
	}
}

func (b *countBar) finish() {
	if b != nil {
		_ = b.bar.Finish()
	}
}

type statusOptions struct {
	db       dbOptions
	watch    bool
	interval time.Duration
}

func newQueueStatusCmd(ios *IOStreams, g *globalOptions) *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show a batch: counts by state and outcome, rows running against the caps, workers, rate, ETA",
		Long: `status prints the batch's rows by state (pending, with those a worker holds
reserved; running; done) and the done ones by outcome, the rows running against the global cap and, per client,
against the client cap, the workers seen in the last minute, the rate over
the last minute and an ETA at that rate, and any shared pause or open
breaker. Every count comes from one snapshot, so they add up.

--watch redraws it every --interval until nothing is pending or running.`,
		Example: `  hfsent queue status --batch nightly
  hfsent queue status --batch nightly --watch`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := g.logger(ios); err != nil {
				return err
			}
			return runStatus(cmd.Context(), o, ios)
		},
	}
	fs := cmd.Flags()
	addDBFlags(fs, &o.db, true)
	fs.BoolVar(&o.watch, "watch", false, "redraw until the batch is done")
	fs.DurationVar(&o.interval, "interval", 2*time.Second, "time between redraws with --watch ("+rangeHelp(minLease, maxPollInterval)+")")
	return cmd
}

func runStatus(ctx context.Context, o *statusOptions, ios *IOStreams) error {
	if err := inRange("--interval", o.interval, minLease, maxPollInterval, ""); err != nil {
		return err
	}
	db, err := o.db.open(ctx, ios, true, true)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, stop := signal.NotifyContext(ctx, stopSignals...)
	defer stop()
	for {
		st, err := db.Status(ctx, o.db.batch)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return queueError(err)
		}
		if o.watch && ios.ErrTTY {
			// Clear the screen and home the cursor (no colours).
			fmt.Fprint(ios.Out, "\x1b[H\x1b[2J")
		}
		fmt.Fprint(ios.Out, formatStatus(st))
		if !o.watch || st.Left() == 0 {
			return nil
		}
		fmt.Fprintln(ios.Out)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(o.interval):
		}
	}
}

func formatStatus(st *queue.Status) string {
	var b strings.Builder
	bt := st.Batch
	// Every name below comes from the database: shown through
	// queue.Printable, so none forges a line or runs a terminal escape.
	show := queue.Printable
	fmt.Fprintf(&b, "batch:    %s (model %s, created %s)\n", show(bt.Name), show(bt.Model), bt.CreatedAt.UTC().Format(time.RFC3339))
	if bt.Provider != "" || len(bt.Labels) > 0 {
		fmt.Fprintf(&b, "provider: %s, labels %s\n", show(shownProvider(bt.Provider)), show(strings.Join(bt.Labels, ",")))
	}
	reserved := ""
	if st.Reserved > 0 {
		reserved = fmt.Sprintf(" (%d reserved)", st.Reserved)
	}
	fmt.Fprintf(&b, "rows:     %d = %d pending%s + %d running + %d lease expired + %d done\n", st.Total(), st.Pending, reserved, st.Running, st.Expired, st.Done)
	var oc []string
	for _, c := range outcome.All() {
		if n := st.Outcomes[c]; n > 0 {
			oc = append(oc, fmt.Sprintf("%s=%d", c, n))
		}
	}
	if len(oc) == 0 {
		oc = append(oc, "none yet")
	}
	fmt.Fprintf(&b, "outcomes: %s\n", strings.Join(oc, " "))
	if st.Priced > 0 || st.CacheHits > 0 || st.PromptTokens+st.CompletionTokens > 0 {
		spent := "cost_usd unknown (no worker had prices)"
		if st.Priced > 0 {
			spent = "cost_usd=" + results.FormatUSD(st.CostUSD)
		}
		fmt.Fprintf(&b, "spend:    %s prompt_tokens=%d completion_tokens=%d cache_hits=%d\n", spent, st.PromptTokens, st.CompletionTokens, st.CacheHits)
	}
	fmt.Fprintf(&b, "running:  %d of --global-cap %d", st.Running, bt.GlobalCap)
	if bt.GlobalRPS > 0 {
		fmt.Fprintf(&b, ", --global-rps %g", bt.GlobalRPS)
	}
	b.WriteString("\n")
	if bt.ClientColumn != "" {
		capText := "no --client-cap"
		if bt.ClientCap > 0 {
			capText = fmt.Sprintf("--client-cap %d", bt.ClientCap)
		}
		fmt.Fprintf(&b, "clients:  %d with rows left (column %s, %s)", st.NClients, show(bt.ClientColumn), capText)
		for _, c := range st.Clients {
			fmt.Fprintf(&b, "\n          %-20s %d running, %d pending", show(c.Client), c.Running, c.Pending)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "workers:  %d seen in the last minute", len(st.Workers))
	ws := append([]queue.WorkerSeen(nil), st.Workers...)
	sort.Slice(ws, func(i, j int) bool { return ws[i].ID < ws[j].ID })
	for _, w := range ws {
		fmt.Fprintf(&b, "\n          %s (%s pid %d, %s ago)", show(w.ID), show(w.Host), w.PID, w.Seen.Round(time.Second))
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "rate:     %d rows in the last minute", st.PerMinute)
	left := st.Left()
	switch {
	case left == 0:
		b.WriteString("; done")
	case st.ETA > 0:
		fmt.Fprintf(&b, "; ETA %s", st.ETA.Round(time.Second))
	default:
		b.WriteString("; ETA unknown")
	}
	b.WriteString("\n")
	if st.Paused > 0 {
		fmt.Fprintf(&b, "shared:   paused %s more (a worker got HTTP 429 with Retry-After)\n", st.Paused.Round(100*time.Millisecond))
	}
	if st.Open > 0 {
		fmt.Fprintf(&b, "shared:   breaker open %s more (a worker's breaker opened)\n", st.Open.Round(100*time.Millisecond))
	}
	return b.String()
}

type exportOptions struct {
	db          dbOptions
	output      string
	includeText bool
	rawCSV      bool
	qual        qualityOptions
}

func newQueueExportCmd(ios *IOStreams, g *globalOptions) *cobra.Command {
	o := &exportOptions{}
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Write a batch's results as the results CSV classify writes",
		Long: `export writes one row per pushed row, in push order, with exactly the columns,
header and spreadsheet-formula guard classify writes, so hfsent report draws a
queue run too. Times are milliseconds since the batch's first claim, by the
database clock. A row not finished yet is written not_attempted, its error
saying whether it is pending or running. The columns raw_score and review
follow when a worker wrote them (--calibration, --review-below).

A batch pushed with --gold-column is compared with its gold labels: the
quality block (accuracy, macro-F1, ECE, the coverage table) follows the
closing line on stderr, and --min-accuracy or --min-macro-f1 falling short
exits 3.`,
		Example: `  hfsent queue export --batch nightly -o results.csv
  hfsent queue export --batch nightly | hfsent report /dev/stdin -o run.svg`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := g.logger(ios); err != nil {
				return err
			}
			return runExport(cmd.Context(), o, ios)
		},
	}
	fs := cmd.Flags()
	addDBFlags(fs, &o.db, true)
	fs.StringVarP(&o.output, "output", "o", "", "results CSV (default: stdout)")
	fs.BoolVar(&o.includeText, "include-text", false, "copy the input text into the results")
	fs.BoolVar(&o.rawCSV, "raw-csv", false, "write text, label and error as they are, without the spreadsheet-formula guard")
	addQualityFlags(fs, &o.qual, exportQuality, nil)
	return cmd
}

func runExport(ctx context.Context, o *exportOptions, ios *IOStreams) error {
	// The batch says whether it has gold labels; the flags are checked
	// against that below.
	if err := o.qual.validate(true); err != nil {
		return err
	}
	if o.output == "" || o.output == "-" {
		if err := ios.checkOut("rows exported"); err != nil {
			return err
		}
	}
	db, err := o.db.open(ctx, ios, true, true)
	if err != nil {
		return err
	}
	defer db.Close()
	b, err := db.Batch(ctx, o.db.batch)
	if err != nil {
		return queueError(err)
	}
	extra, gold, err := db.ExportColumns(ctx, b)
	if err != nil {
		return queueError(err)
	}
	if !gold && (o.qual.minAccuracy > 0 || o.qual.minMacroF1 > 0 || o.qual.targetAccuracy > 0) {
		return usageErrorf("batch %q has no gold labels (queue push --gold-column COL stores them): --min-accuracy, --min-macro-f1 and --target-accuracy need them", o.db.batch)
	}
	q, err := o.qual.start(gold, false, 0, false)
	if err != nil {
		return err
	}
	out := ios.Out
	var f *os.File
	if o.output != "" && o.output != "-" {
		f, err = os.Create(o.output)
		if err != nil {
			return usageErrorf("cannot create --output %s: %v", o.output, unwrapPathError(err))
		}
		defer f.Close()
		out = f
	}
	w, err := results.NewWriter(out, o.includeText, results.Raw(o.rawCSV), results.WithExtra(extra))
	if err != nil {
		return &exitError{code: ExitRowsFailed, err: fmt.Errorf("writing %s: %w", exportName(o), err)}
	}
	st, err := db.Export(ctx, b, q.sink(w), o.includeText)
	if err == nil && f != nil {
		err = f.Close()
	}
	if err != nil {
		return &exitError{code: ExitRowsFailed, err: fmt.Errorf("exporting batch %q to %s: %w", o.db.batch, exportName(o), err)}
	}
	msg := fmt.Sprintf("batch %q: %d rows exported to %s (%d success or fallback)", o.db.batch, st.Rows, exportName(o), st.OK)
	if st.Unfinished > 0 {
		msg += fmt.Sprintf("; %d not finished yet, written not_attempted", st.Unfinished)
	}
	q.finish()
	fmt.Fprintln(ios.ErrOut, msg+q.keys())
	q.print(ios.ErrOut)
	if short := q.short(); short != "" {
		return &exitError{code: ExitQuality, err: errors.New("quality gate: " + short)}
	}
	return nil
}

func exportName(o *exportOptions) string {
	if o.output == "" || o.output == "-" {
		return "stdout"
	}
	return o.output
}

func newQueueListCmd(ios *IOStreams, g *globalOptions) *cobra.Command {
	o := &dbOptions{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the batches in the database",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := g.logger(ios); err != nil {
				return err
			}
			db, err := o.open(cmd.Context(), ios, false, true)
			if err != nil {
				return err
			}
			defer db.Close()
			bs, err := db.Batches(cmd.Context())
			if err != nil {
				return queueError(err)
			}
			fmt.Fprintf(ios.Out, "%-24s %10s %10s %-12s %-20s %s\n", "batch", "rows", "global_cap", "client_cap", "created", "model")
			for _, b := range bs {
				cc := "-"
				if b.ClientCap > 0 {
					cc = fmt.Sprintf("%d/%s", b.ClientCap, queue.Printable(b.ClientColumn))
				}
				// Names from the database, escaped: none forges a row.
				fmt.Fprintf(ios.Out, "%-24s %10d %10d %-12s %-20s %s\n", queue.Printable(b.Name), b.Rows, b.GlobalCap, cc,
					b.CreatedAt.UTC().Format("2006-01-02T15:04:05Z"), queue.Printable(b.Model))
			}
			return nil
		},
	}
	addDBFlags(cmd.Flags(), o, false)
	return cmd
}

func newQueueDropCmd(ios *IOStreams, g *globalOptions) *cobra.Command {
	o := &dbOptions{}
	var yes bool
	cmd := &cobra.Command{
		Use:   "drop",
		Short: "Delete a batch with its rows and results (asks for --yes)",
		Long: `drop deletes the batch, its rows, results, pushes and workers in one
transaction, while workers run or not: it waits for a push under way and for
the workers' round trips in flight, and those that come after it find the
batch gone. A worker whose batch was dropped says so, cuts its calls in
flight and exits 1 at once; an idle one is woken by the drop.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := g.logger(ios); err != nil {
				return err
			}
			if !yes {
				return usageErrorf("queue drop deletes batch %q with every row and result: add --yes to confirm", o.batch)
			}
			db, err := o.open(cmd.Context(), ios, true, true)
			if err != nil {
				return err
			}
			defer db.Close()
			n, err := db.Drop(cmd.Context(), o.batch)
			if err != nil {
				return queueError(err)
			}
			fmt.Fprintf(ios.ErrOut, "batch %q dropped (%d rows)\n", o.batch, n)
			return nil
		},
	}
	addDBFlags(cmd.Flags(), o, true)
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm the drop")
	return cmd
}

// batchKind is the kind of model a batch records for a --provider:
// "chat", or "" for every text-classification kind.
func batchKind(kind string) string {
	if k, ok := provider.KindOf(kind); ok && k.Chat {
		return "chat"
	}
	return ""
}

// shownProvider is a batch's provider as the flags name it.
func shownProvider(p string) string {
	if p == "" {
		return "hf"
	}
	return p
}
