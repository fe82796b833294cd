package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hfsent/hfsent/internal/calibration"
	"github.com/hfsent/hfsent/internal/input"
	"github.com/hfsent/hfsent/internal/paths"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/quality"
	"github.com/hfsent/hfsent/internal/results"
	"github.com/hfsent/hfsent/internal/resume"
	"github.com/hfsent/hfsent/internal/stage"
)

// MinCalibrationRows is the fewest rows a calibration should be fitted
// on: calibrate warns below it (docs/guides/quality.md says why).
const MinCalibrationRows = 300

type calibrateOptions struct {
	results  string
	output   string
	gold     goldOptions
	labelMap string
	// prov describes the run when RESULTS has no sidecar: --provider,
	// --model, --endpoint, --labels, --prompt-file, --constrain.
	prov  stage.Config
	flags *pflag.FlagSet
}

// goldOptions name a gold file and its columns (calibrate, report).
type goldOptions struct {
	path     string
	column   string
	idColumn string
}

func addGoldFlags(fs *pflag.FlagSet, o *goldOptions, required bool) {
	what := "a CSV of gold labels, joined to RESULTS by request id (the input with its gold column, or a filled-in --review-out file)"
	if !required {
		what += ": adds the quality against them to the picture"
	}
	fs.StringVar(&o.path, "gold", "", what)
	fs.StringVar(&o.column, "gold-column", "gold", "the column of --gold holding the gold labels")
	fs.StringVar(&o.idColumn, "gold-id-column", "request_id", "the column of --gold holding the request id")
}

// runDescription are the flags that describe a run whose results have no
// sidecar: the ones that change its answers.
var runDescription = []string{"provider", "model", "endpoint", "labels", "labels-file", "examples", "examples-per-label", "examples-text-column", "examples-label-column", "hypothesis-template", "prompt-file", "constrain"}

func newCalibrateCmd(ios *IOStreams, g *globalOptions) *cobra.Command {
	o := &calibrateOptions{}
	cmd := &cobra.Command{
		Use:   "calibrate RESULTS --gold GOLD.csv -o CAL.json",
		Short: "Fit a calibration of the scores from a labelled run",
		Long: `Calibrate fits, from a results file and the gold labels of its rows, a map
from the model's score to the probability that its label is right, and
writes it to a small JSON file for --calibration (classify, serve, worker).

The gold labels are joined to RESULTS by request id, from GOLD's
--gold-column (default gold). Only rows that ended success with a score
and a non-blank gold label are used (raw_score, when RESULTS was itself
written with --calibration). The method is isotonic regression with each
block shrunk toward the overall rate: it keeps the ranking of the scores
and never gives 0 or 1 from a few rows. Each label with at least 100 rows
gets a map of its own; the others share the pooled one. Fewer than 300
rows, or a label under 100, is warned about.

The file says what it was fitted for: the provider, the model, the labels,
the label map and a hash of the request (the prompt and every parameter
that changes the answers), read from the file classify keeps beside
RESULTS (RESULTS.hfsent.json); without one (results on stdout, queue
export), give the run's --provider, --model, --endpoint, --labels (or
--labels-file, --examples with --examples-per-label and its columns;
--hypothesis-template),
--prompt-file and --constrain. A run for anything else refuses the file.`,
		Example: `  hfsent classify sample.csv --provider local --gold-column gold -o sample-results.csv
  hfsent calibrate sample-results.csv --gold sample.csv -o cal.json
  hfsent classify all.csv --provider local --calibration cal.json --review-below 0.8 -o results.csv`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.results = args[0]
			log, err := g.logger(ios)
			if err != nil {
				return err
			}
			return runCalibrate(o, ios, log)
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&o.output, "output", "o", "", "the calibration file to write (JSON; required)")
	addGoldFlags(fs, &o.gold, true)
	fs.StringVar(&o.labelMap, "label-map", "", "map the labels of RESULTS onto the gold ones before comparing (when the run did not), e.g. LABEL_0=negative; runs using the file must give the same")
	o.flags, o.prov.Given = fs, fs.Changed
	fs.StringVar(&o.prov.Provider, "provider", "hf", "without RESULTS.hfsent.json: the run's --provider (hf, tei, chat, local)")
	fs.StringVar(&o.prov.Model, "model", provider.DefaultModel, "without RESULTS.hfsent.json: the run's --model")
	fs.StringVar(&o.prov.Endpoint, "endpoint", "", "without RESULTS.hfsent.json: the run's --endpoint")
	fs.StringVar(&o.prov.Labels, "labels", "", "without RESULTS.hfsent.json: the run's --labels")
	fs.StringVar(&o.prov.PromptFile, "prompt-file", "", "without RESULTS.hfsent.json: the run's --prompt-file")
	fs.StringVar(&o.prov.LabelsFile, "labels-file", "", "without RESULTS.hfsent.json: the run's --labels-file (everything in it is in the request's hash)")
	fs.StringVar(&o.prov.Examples, "examples", "", "without RESULTS.hfsent.json: the run's --examples")
	fs.IntVar(&o.prov.ExamplesPerLabel, "examples-per-label", 3, "without RESULTS.hfsent.json: the run's --examples-per-label")
	fs.StringVar(&o.prov.ExamplesTextColumn, "examples-text-column", stage.ExamplesTextColumn, "without RESULTS.hfsent.json: the run's --examples-text-column")
	fs.StringVar(&o.prov.ExamplesLabelColumn, "examples-label-column", stage.ExamplesLabelColumn, "without RESULTS.hfsent.json: the run's --examples-label-column")
	fs.StringVar(&o.prov.HypothesisTemplate, "hypothesis-template", "", "without RESULTS.hfsent.json: the run's --hypothesis-template (its hypotheses are in the request's hash)")
	addConstrainFlag(fs, &o.prov.Constrain)
	return cmd
}

func runCalibrate(o *calibrateOptions, ios *IOStreams, log *slog.Logger) error {
	if o.output == "" {
		return usageErrorf("--output CAL.json is required")
	}
	if o.gold.path == "" {
		return usageErrorf("--gold GOLD.csv is required: the gold labels to fit on")
	}
	for _, p := range []string{o.results, o.gold.path} {
		if paths.Clash(o.output, p) {
			return usageErrorf("--output %s would overwrite %s; choose another path", o.output, p)
		}
	}
	lm, err := quality.ParseLabelMap(o.labelMap)
	if err != nil {
		return usageErrorf("--label-map: %v", err)
	}
	run, err := o.describe(lm)
	if err != nil {
		return err
	}
	gold, err := readGold(o.gold)
	if err != nil {
		return err
	}
	samples, skipped, err := joinSamples(o.results, gold, lm)
	if err != nil {
		return err
	}
	f, err := calibration.Fit(samples, run)
	if errors.Is(err, calibration.ErrTooFew) {
		return usageErrorf("%s: %d rows ended success with a score and a gold label in %s (%d others skipped): too few to fit on", o.results, len(samples), o.gold.path, skipped)
	}
	if err != nil {
		return usageError(err)
	}
	warnFew(log, f)
	if err := writeAtomic(o.output, f.Write); err != nil {
		return usageError(err)
	}
	fmt.Fprintln(ios.ErrOut, calibrateLine(f, samples, skipped))
	return nil
}

// describe is what the fit is for: the sidecar beside RESULTS, else the
// flags that describe the run.
func (o *calibrateOptions) describe(lm quality.LabelMap) (calibration.For, error) {
	var given []string
	for _, name := range runDescription {
		if o.flags.Changed(name) {
			given = append(given, "--"+name)
		}
	}
	id, err := resume.ReadIdentity(o.results)
	if err == nil && id.RequestSHA256 != "" {
		if len(given) > 0 {
			return calibration.For{}, usageErrorf("%s says which run wrote %s: leave %s out", o.results+resume.SidecarSuffix, o.results, strings.Join(given, ", "))
		}
		if id.LabelMap != "" && !lm.Empty() {
			return calibration.For{}, usageErrorf("%s was written with --label-map %q already: leave --label-map out", o.results, id.LabelMap)
		}
		labels := id.Labels
		if labels == nil {
			labels = []string{}
		}
		return calibration.For{Provider: id.Provider, Model: id.Model, Labels: labels, LabelMap: cmpOr(id.LabelMap, lm.String()), Request: id.RequestSHA256}, nil
	}
	o.prov.LabelMap = lm.String()
	if err := o.prov.ValidateRequest(); err != nil {
		return calibration.For{}, usageError(err)
	}
	f, err := o.prov.For()
	if err != nil {
		return f, usageError(err)
	}
	return f, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// readGold reads --gold.
func readGold(o goldOptions) (*quality.Gold, error) {
	f, err := os.Open(o.path)
	if err != nil {
		return nil, usageErrorf("--gold %s: %v", o.path, unwrapPathError(err))
	}
	defer f.Close()
	g, err := quality.ReadGold(f, input.Options{Name: o.path, IDColumn: o.idColumn, GoldColumn: o.column, MaxChars: input.DefaultMaxChars})
	if err != nil {
		return nil, usageError(fmt.Errorf("--gold %w", err))
	}
	return g, nil
}

// joinSamples reads RESULTS and joins each row with its gold label.
func joinSamples(path string, gold *quality.Gold, lm quality.LabelMap) ([]calibration.Sample, int64, error) {
	s, closeS, err := openResults(path)
	if err != nil {
		return nil, 0, err
	}
	defer closeS()
	raw := s.Extra().RawScore
	var out []calibration.Sample
	var skipped int64
	for {
		r, err := s.Next()
		if errors.Is(err, io.EOF) {
			return out, skipped, nil
		}
		if err != nil {
			return nil, 0, usageErrorf("%s: %v", path, err)
		}
		r.Label = lm.Apply(r.Label)
		g, _ := gold.Label(r.RequestID)
		if smp, ok := calibration.SampleOf(r, g, raw); ok {
			out = append(out, smp)
		} else {
			skipped++
		}
	}
}

// openResults opens a results file, written with or without the text.
func openResults(path string) (*results.Stream, func(), error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, usageErrorf("cannot open %s: %v", path, unwrapPathError(err))
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, usageErrorf("cannot read %s: %v", path, err)
	}
	s, err := results.NewStreamAny(f, st.Size())
	if err != nil {
		f.Close()
		return nil, nil, usageErrorf("%s is not an hfsent results file: %v", path, err)
	}
	return s, func() { s.Close(); f.Close() }, nil
}

// warnFew warns of a fit on too few rows, and of labels that share the
// pooled map for want of their own.
func warnFew(log *slog.Logger, f *calibration.File) {
	if f.Rows < MinCalibrationRows {
		log.Warn(fmt.Sprintf("fitted on %d rows, fewer than %d: the calibrated scores will be rough; label more rows (docs/guides/quality.md)", f.Rows, MinCalibrationRows))
	}
	labels := make([]string, 0, len(f.Counts))
	for l := range f.Counts {
		labels = append(labels, l)
	}
	slices.Sort(labels)
	for _, l := range labels {
		if n := f.Counts[l]; n < calibration.MinLabelRows {
			log.Warn(fmt.Sprintf("label %q has %d rows, fewer than %d: it uses the pooled map", l, n, calibration.MinLabelRows))
		}
	}
}

// calibrateLine is calibrate's closing line: what it fitted on, and the
// ECE of those rows before and after (in-sample: optimistic).
func calibrateLine(f *calibration.File, samples []calibration.Sample, skipped int64) string {
	var before, after quality.Eval
	for _, s := range samples {
		g := "x"
		if !s.Correct {
			g = "y"
		}
		before.Add(quality.Obs{Gold: g, Success: true, Label: "x", Score: results.RoundScore(s.Score)})
		after.Add(quality.Obs{Gold: g, Success: true, Label: "x", Score: results.RoundScore(f.Calibrate(s.Label, s.Score))})
	}
	own := make([]string, 0, len(f.Labels))
	for l := range f.Labels {
		own = append(own, l)
	}
	slices.Sort(own)
	b, a := before.Report(0), after.Report(0)
	return fmt.Sprintf("rows=%d skipped=%d accuracy=%s own_maps=%s ece_before=%s ece_after=%s (on the rows fitted: a held-out set tells more)",
		f.Rows, skipped, fixed(b.Accuracy), strings.Join(own, ","), fixed(b.ECE), fixed(a.ECE))
}

// writeAtomic writes path through a temporary file and a rename.
func writeAtomic(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("cannot create %s: %v", path, unwrapPathError(err))
	}
	defer os.Remove(tmp.Name())
	werr := write(tmp)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(tmp.Name(), 0o644)
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		return fmt.Errorf("cannot write %s: %v", path, unwrapPathError(werr))
	}
	return nil
}
