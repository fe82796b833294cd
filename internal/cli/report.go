package cli

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/quality"
	"github.com/hfsent/hfsent/internal/report"
	"github.com/hfsent/hfsent/internal/results"
)

type reportOptions struct {
	input   string
	output  string
	title   string
	maxBars int
	gold    goldOptions
	// labelMap and targetAccuracy, with --gold.
	labelMap       string
	targetAccuracy float64
}

func newReportCmd(ios *IOStreams) *cobra.Command {
	o := &reportOptions{}
	cmd := &cobra.Command{
		Use:   "report RESULTS.csv -o FILE",
		Short: "Draw a picture of a run from its results CSV (.svg or .html)",
		Long: `Report reads a results CSV written by classify (- reads stdin) and draws the
run: one horizontal bar per row from when it was queued to when it finished,
the wait (for a slot, a rate or adaptive limit, a cooldown) shaded light and
the time from the first call sent to the answer solid, coloured
by outcome; a line of calls in flight (and rows waiting) over time; and a
table of counts by outcome and latency percentiles (p50, p95, p99, max).

The output is self-contained (no network needed to view it): an SVG, or an
HTML page holding the SVG and the tables, chosen by the file extension. Its
size is bounded: past --max-bars rows, bars are a sample in which every
outcome keeps a fair share (rare failures are all drawn); counts, the
in-flight line and the percentiles always cover every row.

Times must be whole milliseconds between 0 and a year, with queued_ms <=
started_ms <= finished_ms; a row that breaks this is refused (exit 2),
naming its line.`,
		Example: `  hfsent report results.csv -o run.svg
  hfsent report results.csv -o run.html --title "nightly feedback batch"

  # or at the end of a run
  hfsent classify feedback.csv -o results.csv --report run.html`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.input = args[0]
			return runReport(o, ios)
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "picture to write: a .svg or .html file (required)")
	cmd.Flags().StringVar(&o.title, "title", "", "title of the picture (default: the results file name)")
	cmd.Flags().IntVar(&o.maxBars, "max-bars", 2000, "rows drawn as bars at most; beyond it they are sampled ("+rangeHelp(1, maxBars)+")")
	addGoldFlags(cmd.Flags(), &o.gold, false)
	cmd.Flags().StringVar(&o.labelMap, "label-map", "", "with --gold: map the labels of RESULTS onto the gold ones before comparing, e.g. LABEL_0=negative")
	cmd.Flags().Float64Var(&o.targetAccuracy, "target-accuracy", 0, "with --gold: name the lowest score threshold whose rows reach this accuracy (0: none, else "+rangeHelp(0.0, 1.0)+")")
	return cmd
}

func runReport(o *reportOptions, ios *IOStreams) error {
	if o.output == "" {
		return usageErrorf("--output FILE is required (.svg or .html)")
	}
	format, err := report.FormatFor(o.output)
	if err != nil {
		return usageErrorf("--output %v", err)
	}
	if err := inRange("--max-bars", o.maxBars, 1, maxBars, ""); err != nil {
		return err
	}
	judge, err := o.goldJudge()
	if err != nil {
		return err
	}
	var in io.Reader = ios.In
	name := "stdin"
	if o.input != "-" {
		f, err := os.Open(o.input)
		if err != nil {
			return usageErrorf("cannot open %s: %v", o.input, unwrapPathError(err))
		}
		defer f.Close()
		in, name = f, o.input
	}
	if o.title == "" {
		o.title = filepath.Base(name)
	}
	c := report.NewCollector(report.Options{MaxBars: o.maxBars, Title: o.title})
	var add report.Adder = c
	if judge != nil {
		judge.c = c
		add = judge
	}
	if err := report.ReadCSV(in, add); err != nil {
		var le *report.LineError
		if errors.As(err, &le) {
			return usageErrorf("%s:%d: %s", name, le.Line, le.Msg)
		}
		return usageErrorf("%s: %v", name, err)
	}
	rep := c.Report()
	if judge != nil {
		if err := judge.eval.Err(); err != nil {
			return usageErrorf("--gold %s: %v", o.gold.path, err)
		}
		q := judge.eval.Report(o.targetAccuracy)
		rep.Quality = &q
	}
	if err := writeReport(o.output, format, rep); err != nil {
		return usageError(err)
	}
	return nil
}

// goldJudge reads --gold, nil without it.
func (o *reportOptions) goldJudge() (*goldAdder, error) {
	if err := inRange("--target-accuracy", o.targetAccuracy, 0, 1, ""); err != nil {
		return nil, err
	}
	lm, err := quality.ParseLabelMap(o.labelMap)
	if err != nil {
		return nil, usageErrorf("--label-map: %v", err)
	}
	if o.gold.path == "" {
		if o.labelMap != "" || o.targetAccuracy != 0 {
			return nil, usageErrorf("--label-map and --target-accuracy need --gold GOLD.csv")
		}
		return nil, nil
	}
	g, err := readGold(o.gold)
	if err != nil {
		return nil, err
	}
	return &goldAdder{gold: g, lm: lm, eval: &quality.Eval{}}, nil
}

// goldAdder draws each row and counts it against its gold label (a row
// whose id the gold file lacks counts as a blank gold label).
type goldAdder struct {
	c    *report.Collector
	gold *quality.Gold
	lm   quality.LabelMap
	eval *quality.Eval
}

func (a *goldAdder) Add(r report.Record) {
	a.c.Add(r)
	g, _ := a.gold.Label(r.RequestID)
	a.eval.Add(quality.Obs{Gold: g, Success: r.Outcome == string(outcome.Success), Label: a.lm.Apply(r.Label), Score: r.Score})
}

// writeReport writes the picture through a temporary file and a rename, so
// that a failed write never leaves half a picture under the final name.
func writeReport(path string, f report.Format, rep *report.Report) error {
	return writeAtomic(path, func(w io.Writer) error { return rep.Write(w, f) })
}

// reportTee passes rows to the results sink and to the report collector
// (classify --report). The engine writes from one goroutine, so the
// collector needs no lock.
type reportTee struct {
	engine.Sink
	c *report.Collector
}

func (t reportTee) Write(rows []results.Row) error {
	err := t.Sink.Write(rows)
	for _, r := range rows {
		t.c.Add(report.Record{
			RequestID:  r.RequestID,
			Outcome:    string(r.Outcome),
			Sent:       r.StartedMs >= 0,
			QueuedMs:   r.QueuedMs,
			StartedMs:  r.StartedMs,
			FinishedMs: r.FinishedMs,
			LatencyMs:  r.LatencyMs,
		})
	}
	return err
}

// classifyReport wires --report into a classify run: it wraps the sink and
// returns the function that writes the picture when the run is over, with
// the run's quality against its gold labels when there is one.
func (o *classifyOptions) classifyReport(sink engine.Sink, log *slog.Logger) (engine.Sink, func(*quality.Report)) {
	if o.report == "" {
		return sink, func(*quality.Report) {}
	}
	format, _ := report.FormatFor(o.report) // checked in validate
	title := "classify " + o.input
	c := report.NewCollector(report.Options{Title: title})
	return reportTee{Sink: sink, c: c}, func(q *quality.Report) {
		rep := c.Report()
		rep.Quality = q
		if err := writeReport(o.report, format, rep); err != nil {
			log.Error("cannot write --report", "path", o.report, "err", err)
		}
	}
}

// validReport checks --report before the run starts.
func (o *classifyOptions) validReport() error {
	if o.report == "" {
		return nil
	}
	if _, err := report.FormatFor(o.report); err != nil {
		return usageErrorf("--report %v", err)
	}
	return nil
}
