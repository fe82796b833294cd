package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/report"
	"github.com/hfsent/hfsent/internal/results"
)

type reportOptions struct {
	input   string
	output  string
	title   string
	maxBars int
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
	if err := report.ReadCSV(in, c); err != nil {
		var le *report.LineError
		if errors.As(err, &le) {
			return usageErrorf("%s:%d: %s", name, le.Line, le.Msg)
		}
		return usageErrorf("%s: %v", name, err)
	}
	if err := writeReport(o.output, format, c.Report()); err != nil {
		return usageError(err)
	}
	return nil
}

// writeReport writes the picture through a temporary file and a rename, so
// that a failed write never leaves half a picture under the final name.
func writeReport(path string, f report.Format, rep *report.Report) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("cannot create %s: %v", path, unwrapPathError(err))
	}
	defer os.Remove(tmp.Name())
	werr := rep.Write(tmp, f)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("cannot write %s: %v", path, werr)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("cannot write %s: %v", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("cannot write %s: %v", path, unwrapPathError(err))
	}
	return nil
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
// returns the function that writes the picture when the run is over.
func (o *classifyOptions) classifyReport(sink engine.Sink, log *slog.Logger) (engine.Sink, func()) {
	if o.report == "" {
		return sink, func() {}
	}
	format, _ := report.FormatFor(o.report) // checked in validate
	title := "classify " + o.input
	c := report.NewCollector(report.Options{Title: title})
	return reportTee{Sink: sink, c: c}, func() {
		if err := writeReport(o.report, format, c.Report()); err != nil {
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
