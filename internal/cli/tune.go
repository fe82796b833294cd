package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/hfsent/hfsent/internal/calibration"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/quality"
	"github.com/hfsent/hfsent/internal/results"
	"github.com/hfsent/hfsent/internal/stage"
	"github.com/hfsent/hfsent/internal/tune"
)

// maxCostPer1k bounds --max-cost-per-1k (USD).
const maxCostPer1k = 1e6

type tuneOptions struct {
	gold        string
	cascadeFile string
	target      float64
	maxCost     float64
	output      string
	in          inputOptions
	flags       *pflag.FlagSet
	logLevel    string
}

func newTuneCmd(ios *IOStreams, g *globalOptions) *cobra.Command {
	o := &tuneOptions{}
	cmd := &cobra.Command{
		Use:   "tune GOLD.csv --cascade FILE --target-accuracy X [-o TUNED.yaml]",
		Short: "Pick a cascade's escalate-below thresholds from gold rows",
		Long: `Tune runs every stage of the --cascade file over the gold rows of GOLD.csv
(each stage alone, through classify's own path: the response cache makes a
second tune cost nothing), fits a calibration for each stage but the last
that has none, and picks the escalate-below thresholds that reach
--target-accuracy at the least expected cost per row (or, with
--max-cost-per-1k, the best accuracy at no more than that cost).

The thresholds and calibrations are fitted on every second gold row; the
figures it prints are measured on the other half (the held-out rows), which
neither saw: each stage alone and the tuned cascade, with accuracy, cost
per 1,000 rows, the share of rows each stage answers, and the p50 latency
of a row (the stages' latencies summed; a cached answer's is 0).

-o writes the cascade file with each stage's escalate-below and tuned
(escalates, accuracy) set, keeping its comments and key order; a fitted
calibration is written beside it (TUNED.stageN.cal.json) and named in its
stage. When the held-out accuracy does not reach the target, tune says so,
prints the best it found, writes nothing, and exits 3.

Exit codes: 0 the target is reached on the held-out rows; 2 bad flags, file
or gold rows (before any call); 3 the target is not reached; 1 a stage's
run failed.`,
		Example: `  hfsent tune gold.csv --cascade cascade.yaml --target-accuracy 0.95 -o tuned.yaml
  hfsent classify all.csv --cascade tuned.yaml -o results.csv`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.gold = args[0]
			o.logLevel = g.logLevel
			log, err := g.logger(ios)
			if err != nil {
				return err
			}
			return runTune(cmd.Context(), o, ios, log)
		},
	}
	fs := cmd.Flags()
	o.flags = fs
	fs.StringVar(&o.cascadeFile, "cascade", "", "the cascade file to tune (required; docs/guides/cascade.md)")
	fs.Float64Var(&o.target, "target-accuracy", 0, "the accuracy to reach on the held-out gold rows, above 0 and at most 1 (required unless --max-cost-per-1k)")
	fs.Float64Var(&o.maxCost, "max-cost-per-1k", 0, "instead of the least cost: the best accuracy at no more than this cost per 1,000 rows, USD (0: no cap; "+rangeHelp(0, maxCostPer1k)+")")
	fs.StringVarP(&o.output, "output", "o", "", "write the tuned cascade file here (default: print the table only)")
	addInputFlags(fs, &o.in)
	fs.StringVar(&o.in.goldColumn, "gold-column", "gold", "the column of GOLD.csv holding the gold labels")
	return cmd
}

func (o *tuneOptions) validate() error {
	switch {
	case o.cascadeFile == "":
		return usageErrorf("--cascade FILE is required: the cascade to tune")
	case o.flags.Changed("target-accuracy") && !(o.target > 0 && o.target <= 1):
		return usageErrorf("--target-accuracy must be above 0 and at most 1, got %v", o.target)
	case !o.flags.Changed("target-accuracy") && o.maxCost == 0:
		return usageErrorf("--target-accuracy X is required (or --max-cost-per-1k USD)")
	case !(o.maxCost >= 0 && o.maxCost <= maxCostPer1k):
		return usageErrorf("--max-cost-per-1k must be %s USD, got %v", rangeHelp(0, maxCostPer1k), o.maxCost)
	case strings.TrimSpace(o.in.goldColumn) == "":
		return usageErrorf("--gold-column must not be empty")
	}
	if err := o.in.validate(); err != nil {
		return err
	}
	if _, err := os.Stat(o.gold); err != nil {
		return usageErrorf("GOLD %s: %v", o.gold, unwrapPathError(err))
	}
	return nil
}

func runTune(ctx context.Context, o *tuneOptions, ios *IOStreams, log *slog.Logger) error {
	if err := o.validate(); err != nil {
		return err
	}
	data, err := stage.ReadFile("--cascade", o.cascadeFile)
	if err != nil {
		return usageError(err)
	}
	file, err := stage.LoadCascade(o.cascadeFile, data, stageFlags(batchProvider))
	if err != nil {
		return usageError(err)
	}
	for i, c := range file.Configs() {
		if err := c.Validate(); err != nil {
			return usageError(file.Wrap(i, err))
		}
	}
	g, err := o.readGold()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "hfsent-tune-")
	if err != nil {
		return fmt.Errorf("a scratch folder: %w", err)
	}
	defer os.RemoveAll(dir)
	var stages []*tune.Stage
	var gold []tune.Row
	for k := range file.Stages {
		s, ids, err := o.runStage(ctx, file, k, dir, ios, log)
		if err != nil {
			return err
		}
		if k == 0 {
			for _, id := range ids {
				l, _ := g.Label(id)
				gold = append(gold, tune.Row{Gold: l})
			}
		} else if len(ids) != len(gold) {
			return fmt.Errorf("%s: %d result rows, stage 1 had %d", s.Name, len(ids), len(gold))
		}
		stages = append(stages, s)
	}
	if len(gold) < 2*calibration.MinRows {
		return usageErrorf("GOLD %s: %d rows: too few to fit on half and check on the other", o.gold, len(gold))
	}
	if err := tune.Fit(stages, gold); err != nil {
		return usageError(err)
	}
	res := tune.Choose(stages, gold, tune.Goal{Target: o.target, MaxCostPer1k: o.maxCost})
	printTune(ios.Out, o, stages, gold, res)
	if !res.Reached {
		fmt.Fprintf(ios.ErrOut, "hfsent: the target accuracy %s is not reached on the held-out rows: the best found is %.3f at $%.4f per 1,000 rows (above); nothing written\n", show(o.target), res.HeldOut.Accuracy, res.HeldOut.CostPer1k)
		return silentExit(ExitQuality)
	}
	if o.output != "" {
		return o.write(file, stages, gold, res)
	}
	return nil
}

// readGold reads the gold labels of GOLD.csv.
func (o *tuneOptions) readGold() (*quality.Gold, error) {
	f, err := os.Open(o.gold)
	if err != nil {
		return nil, usageErrorf("GOLD %s: %v", o.gold, unwrapPathError(err))
	}
	defer f.Close()
	g, err := quality.ReadGold(f, o.in.readerOptions(o.gold, 0))
	if err != nil {
		return nil, usageError(err)
	}
	return g, nil
}

// runStage runs stage k of file alone over the gold rows, as classify
// does (a one-stage cascade, its escalate-below and tuned left out), and
// reads its answers back.
func (o *tuneOptions) runStage(ctx context.Context, file *stage.File, k int, dir string, ios *IOStreams, log *slog.Logger) (*tune.Stage, []string, error) {
	c := file.Stages[k].Config
	one := filepath.Join(dir, fmt.Sprintf("stage%d.yaml", k+1))
	if err := writeOneStage(one, file.Stages[k].Node); err != nil {
		return nil, nil, err
	}
	res, sum := filepath.Join(dir, fmt.Sprintf("stage%d.csv", k+1)), filepath.Join(dir, fmt.Sprintf("stage%d.json", k+1))
	args := []string{"classify", o.gold, "--cascade", one, "-o", res, "--summary-json", sum, "--no-progress", "--fail-on", "none",
		"--log-level", o.logLevel, "--gold-column", o.in.goldColumn}
	for _, name := range []string{"id-column", "text-column", "delimiter", "encoding"} {
		if f := o.flags.Lookup(name); f.Changed {
			args = append(args, "--"+name+"="+f.Value.String())
		}
	}
	name := fmt.Sprintf("stage %d (%s)", k+1, c.ModelName())
	log.Info("tune: running a stage over the gold rows", "stage", k+1, "model", c.ModelName())
	var stderr bytes.Buffer
	sub := *ios
	sub.Out, sub.ErrOut = io.Discard, &stderr
	if code := Main(args, &sub); code != ExitOK && code != ExitQuality {
		fmt.Fprint(ios.ErrOut, stderr.String())
		return nil, nil, &exitError{code: ExitRowsFailed, err: fmt.Errorf("%s: its run over the gold rows exited %d", name, code)}
	}
	s := &tune.Stage{Name: name, Calibrated: c.Calibration != ""}
	var err error
	if s.For, err = c.For(); err != nil {
		return nil, nil, usageError(file.Wrap(k, err))
	}
	var ids []string
	if s.Rows, ids, err = readStageRows(res, s.Calibrated); err != nil {
		return nil, nil, err
	}
	s.CostPerRow = stageCost(sum, len(ids))
	return s, ids, nil
}

// writeOneStage writes a cascade file of the one stage node, without its
// escalate-below and tuned.
func writeOneStage(path string, node *yaml.Node) error {
	m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for i := 0; i+1 < len(node.Content); i += 2 {
		if key := node.Content[i].Value; key != "escalate-below" && key != "tuned" {
			m.Content = append(m.Content, node.Content[i], node.Content[i+1])
		}
	}
	root := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{
		{Kind: yaml.ScalarNode, Value: "stages"}, {Kind: yaml.SequenceNode, Tag: "!!seq", Content: []*yaml.Node{m}}}}
	b, err := yaml.Marshal(root)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// readStageRows reads a stage's results: each row's answer, its scores and
// latency.
func readStageRows(path string, calibrated bool) ([]tune.Obs, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	rs, err := results.NewStreamAny(f, st.Size())
	if err != nil {
		return nil, nil, err
	}
	var out []tune.Obs
	var ids []string
	for rs.More() {
		r, err := rs.Next()
		if err != nil {
			return nil, nil, err
		}
		ids = append(ids, r.RequestID)
		ob := tune.Obs{OK: r.Outcome == outcome.Success && r.Label != "", Label: r.Label, Score: math.NaN(), Raw: r.Score, LatencyMs: float64(r.LatencyMs)}
		if calibrated {
			ob.Score, ob.Raw = r.Score, r.RawScore
		}
		out = append(out, ob)
	}
	return out, ids, nil
}

// stageCost is a row's cost at a stage: what its calls cost and what the
// cache's hits saved (a hit is priced as the call it saves), over n rows.
func stageCost(path string, n int) float64 {
	b, err := os.ReadFile(path)
	if err != nil || n == 0 {
		return 0
	}
	var s struct {
		Cost  *float64 `json:"cost_usd"`
		Saved *float64 `json:"saved_usd"`
	}
	if json.Unmarshal(b, &s) != nil {
		return 0
	}
	total := 0.0
	for _, v := range []*float64{s.Cost, s.Saved} {
		if v != nil {
			total += *v
		}
	}
	return total / float64(n)
}

// printTune prints the table: each stage alone and the tuned cascade, on
// the held-out rows.
func printTune(w io.Writer, o *tuneOptions, stages []*tune.Stage, gold []tune.Row, r tune.Result) {
	fmt.Fprintf(w, "gold rows: %d (thresholds fitted on %d, figures on the %d held out)\n", len(gold), r.Fitting.Rows, r.HeldOut.Rows)
	head := fmt.Sprintf("%-34s %8s %12s", "", "accuracy", "usd_per_1k")
	for k := range stages {
		head += fmt.Sprintf(" %8s", fmt.Sprintf("stage%d", k+1))
	}
	fmt.Fprintln(w, head+"   p50_ms")
	line := func(name string, f tune.Figures, at int) {
		s := fmt.Sprintf("%-34s %8.3f %12.4f", name, f.Accuracy, f.CostPer1k)
		for k := range stages {
			share := 0.0
			switch {
			case at < 0:
				share = f.Answers[k]
			case k == at:
				share = 1
			}
			s += fmt.Sprintf(" %8.3f", share)
		}
		fmt.Fprintf(w, "%s   %6.0f\n", s, f.P50Ms)
	}
	for k, s := range stages {
		line(clip(s.Name+" alone", 34), tune.Alone(s, gold, tune.Held), k)
	}
	line("tuned cascade", r.HeldOut, -1)
	th := make([]string, len(r.Thresholds))
	for k, t := range r.Thresholds {
		th[k] = fmt.Sprintf("stage %d escalate-below %s", k+1, show(t))
	}
	goal := "target accuracy " + show(o.target)
	if o.maxCost > 0 {
		goal = fmt.Sprintf("best accuracy at most $%s per 1,000 rows", show(o.maxCost))
	}
	verdict := "reached on the held-out rows"
	if !r.Reached {
		verdict = "NOT reached on the held-out rows (the best found)"
		if !r.Possible {
			verdict = "NOT reachable with these stages, even on the fitting rows (the best found)"
		}
	}
	fmt.Fprintf(w, "%s: %s; fitting-rows accuracy %.3f; %s\n", goal, verdict, r.Fitting.Accuracy, strings.Join(th, ", "))
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "~"
}

// write writes the tuned file to -o, and each fitted calibration beside it.
func (o *tuneOptions) write(file *stage.File, stages []*tune.Stage, gold []tune.Row, r tune.Result) error {
	cals := map[int]string{}
	base := strings.TrimSuffix(o.output, filepath.Ext(o.output))
	for k, s := range stages {
		if s.Cal == nil {
			continue
		}
		path := fmt.Sprintf("%s.stage%d.cal.json", base, k+1)
		var b bytes.Buffer
		if err := s.Cal.Write(&b); err != nil {
			return err
		}
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
		cals[k] = path
	}
	all := func(int) bool { return true }
	f := tune.Eval(stages, gold, r.Thresholds, all)
	tuned := make([]stage.Tuned, len(stages))
	for k := range stages {
		tuned[k] = stage.Tuned{Escalates: 0, Accuracy: -1}
		if f.Reach[k] > 0 && k < len(stages)-1 {
			tuned[k].Escalates = round3(f.Reach[k+1] / f.Reach[k])
		}
		tuned[k].Accuracy = round3(answeredAccuracy(stages, gold, r.Thresholds, k))
	}
	var b bytes.Buffer
	if err := tune.Write(&b, file, r.Thresholds, tuned, cals); err != nil {
		return err
	}
	if err := os.WriteFile(o.output, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", o.output, err)
	}
	return nil
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// answeredAccuracy is stage k's accuracy on the gold rows it answers in
// the tuned cascade (0 when it answers none).
func answeredAccuracy(stages []*tune.Stage, gold []tune.Row, th []float64, k int) float64 {
	var n, right int
	for i := range gold {
		for j, s := range stages {
			o := s.Rows[i]
			if j < len(stages)-1 && (!o.OK || math.IsNaN(o.Score) || o.Score < th[j]) {
				continue
			}
			if j == k {
				n++
				if o.OK && quality.Same(o.Label, gold[i].Gold) {
					right++
				}
			}
			break
		}
	}
	if n == 0 {
		return 0
	}
	return float64(right) / float64(n)
}
