package stage

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/hfsent/hfsent/internal/input"
	"github.com/hfsent/hfsent/internal/labelset"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/spend"
)

// The columns --examples is read by by default (--examples-text-column,
// --examples-label-column): a labelled CSV of examples has a text column
// and a label column under these names.
const (
	ExamplesTextColumn  = "text"
	ExamplesLabelColumn = "label"
)

// Bounds of the label settings.
const (
	MaxTopK = provider.MaxLabels
	// MultiSeparator joins the labels of a row with several.
	MultiSeparator = provider.MultiSeparator
)

// validScores checks --multi-label, --label-threshold and --top-k: the
// providers that can answer so, and the features that stay single-label
// (a calibration, a cascade: said so).
func (c *Config) validScores(kind provider.Kind) error {
	if err := first(
		InRange("--top-k", c.TopK, 0, MaxTopK, "the label alone"),
		// A Config built without flags holds 0: only a threshold in use
		// is bounded.
		refuse((c.MultiLabel || c.given("label-threshold")) && InRange("--label-threshold", c.LabelThreshold, 0.0001, 1, "") != nil,
			"--label-threshold must be between 0.0001 and 1, got %g", c.LabelThreshold),
		refuse(c.given("label-threshold") && !c.MultiLabel, "--label-threshold is for --multi-label: it chooses the labels whose scores reach it"),
		refuse(c.TopK > 0 && c.MultiLabel, "--top-k and --multi-label: with --multi-label, scores holds every label the answer scored; give one"),
	); err != nil || !c.MultiLabel {
		return err
	}
	switch {
	case !kind.Remote:
		return fmt.Errorf("--multi-label is not for --provider %s: the embedded model gives one label a text", kind.Name)
	case kind.Endpoint != "":
		return fmt.Errorf("--multi-label is not for --provider %s: its server's scores are shared out among the labels", kind.Name)
	case c.Calibration != "" || c.EscalateBelow > 0:
		return errors.New("--multi-label and a calibration: a calibration is fitted on one label a row; calibration stays single-label (run without --calibration)")
	case strings.TrimSpace(c.FallbackModel) != "":
		return errors.New("--multi-label and --fallback-model: a fallback is a cascade of two, and the cascade stays single-label; run without --fallback-model")
	}
	for _, l := range c.labels {
		if strings.Contains(l, MultiSeparator) {
			return fmt.Errorf("--multi-label: label %q holds %q, which joins a row's labels", l, MultiSeparator)
		}
	}
	return nil
}

// Multi reports whether the stage answers several labels a row.
func (c *Config) Multi() bool { return c.MultiLabel }

// LabelSet is the label set Validate read (--labels-file, with the
// examples --examples chose), nil without --labels-file or --examples.
func (c *Config) LabelSet() *labelset.Set { return c.set }

// LabelSetSHA256 is a SHA-256 of the labels the stage asks for, as
// Validate read them: the label set's digest (labelset.Digest: the label
// file with the examples --examples chose, or --labels as a set), with
// --hypothesis-template; "" when it asks for none (a model with labels of
// its own). A resume compares it.
func (c *Config) LabelSetSHA256() string {
	set := c.set
	if set == nil {
		if len(c.labels) == 0 {
			return ""
		}
		var err error
		if set, err = labelset.FromNames(c.labels); err != nil {
			return "" // not reached: Validate read them
		}
	}
	d := set.Digest()
	if c.HypothesisTemplate == "" {
		return d
	}
	sum := sha256.Sum256([]byte(d + "\x00hypothesis_template\x00" + c.HypothesisTemplate))
	return hex.EncodeToString(sum[:])
}

// System is the fixed part of a chat prompt the label set renders ("":
// none, the default instruction).
func (c *Config) System() string { return c.system }

// readLabelSet reads --labels-file and --examples into the set, before
// anything is opened or sent: every error names the file and the line.
// The set's names become the labels; a chat model is sent the set
// rendered (System), a zero-shot model its descriptions as hypotheses.
func (c *Config) readLabelSet(kind provider.Kind) error {
	fileGiven, exGiven := c.LabelsFile != "", c.Examples != ""
	if err := c.checkHypothesisTemplate(kind); err != nil {
		return err
	}
	switch {
	case !exGiven && (c.given("examples-per-label") || c.given("examples-text-column") || c.given("examples-label-column")):
		return errors.New("--examples-per-label, --examples-text-column and --examples-label-column need --examples FILE.csv: the examples to choose from")
	case !fileGiven && !exGiven && c.HypothesisTemplate != "" && kind.Remote:
		// --labels alone, put in the template.
		set, err := labelset.FromNames(c.labels)
		if err != nil {
			return err
		}
		return c.zeroShot(set)
	case !fileGiven && !exGiven:
		return nil
	case fileGiven && c.given("labels"):
		return fmt.Errorf("--labels and --labels-file %s contradict each other: the file names the labels; give one", c.LabelsFile)
	case c.PromptFile != "":
		return errors.New("--prompt-file and a label file (--labels-file, --examples) contradict each other: the label file's prompt is rendered by hfsent, first and the same for every row, so that a prompt cache can reuse it; give one")
	case kind.Endpoint != "":
		return fmt.Errorf("--labels-file and --examples are not for --provider %s: its server takes no candidate labels", kind.Name)
	case exGiven && !kind.Chat:
		return errors.New("--examples is for --provider chat: a zero-shot model is sent no examples")
	case exGiven && !fileGiven && !c.given("labels"):
		return errors.New("--examples needs the labels: give --labels a,b,... or --labels-file FILE")
	}
	if err := InRange("--examples-per-label", c.ExamplesPerLabel, 1, labelset.MaxPerLabel, ""); err != nil {
		return err
	}
	set, err := c.baseSet()
	if err != nil {
		return err
	}
	if exGiven {
		if set, err = c.readExamples(set); err != nil {
			return err
		}
	}
	c.set, c.labels = set, set.Names()
	if kind.Chat {
		c.system = set.System(c.instruction())
		return nil
	}
	return c.zeroShot(set)
}

// zeroShot makes the set a zero-shot model's hypotheses: its descriptions,
// put in --hypothesis-template when it is given.
func (c *Config) zeroShot(set *labelset.Set) error {
	z, err := set.ZeroShot(c.HypothesisTemplate)
	if err != nil {
		if c.LabelsFile == "" {
			return fmt.Errorf("--hypothesis-template: %v", err)
		}
		return fmt.Errorf("--labels-file %s: %v", c.LabelsFile, err)
	}
	c.hypotheses, c.template = nil, ""
	if z.Template != "" {
		c.hypotheses, c.template = z.Candidates, z.Template
	}
	return nil
}

// zeroShotUnsent says what of the label file a zero-shot model is not
// sent (its task and examples are for a chat model): a user who wrote
// them is told once, not left to think they shape the answers. "" when
// nothing is left out.
func (c *Config) zeroShotUnsent(kind provider.Kind) string {
	if kind.Chat || c.set == nil || c.LabelsFile == "" {
		return ""
	}
	n := len(c.set.None)
	for _, l := range c.set.Labels {
		n += len(l.Examples)
	}
	var parts []string
	if c.set.Task != "" {
		parts = append(parts, "its task")
	}
	if n > 0 {
		parts = append(parts, fmt.Sprintf("its %d example(s)", n))
	}
	if len(parts) == 0 {
		return ""
	}
	return "--labels-file " + c.LabelsFile + ": a zero-shot model is sent the labels' descriptions only (its hypotheses); " +
		strings.Join(parts, " and ") + " are not sent (they are read by --provider chat)"
}

// checkHypothesisTemplate refuses --hypothesis-template where no zero-shot
// model reads it, and a template the server would misread (see
// labelset.CheckTemplate). The embedded model ignores it, as it ignores
// every remote setting (Ignored).
func (c *Config) checkHypothesisTemplate(kind provider.Kind) error {
	if !c.given("hypothesis-template") && c.HypothesisTemplate == "" {
		return nil
	}
	switch {
	case !kind.Remote:
		return nil
	case kind.Chat:
		return errors.New("--hypothesis-template is for a zero-shot model (--provider hf with --labels or --labels-file): a chat model is sent the labels themselves")
	case kind.Endpoint != "":
		return fmt.Errorf("--hypothesis-template is not for --provider %s: its server takes no candidate labels", kind.Name)
	case !c.given("labels") && c.LabelsFile == "":
		return errors.New("--hypothesis-template needs the labels of a zero-shot model: give --labels a,b,... or --labels-file FILE (a text-classification model has labels of its own)")
	}
	if err := labelset.CheckTemplate(c.HypothesisTemplate); err != nil {
		return fmt.Errorf("--hypothesis-template: %v", err)
	}
	if c.HypothesisTemplate == "" {
		return errors.New("--hypothesis-template is empty: give a sentence with {} where the label goes, or leave the flag out")
	}
	return nil
}

// checkContext refuses a label file whose fixed part alone is over the
// model's context, where the price list gives it (LiteLLM's
// max_input_tokens): every row would be refused by the server.
func (c *Config) checkContext(ps spend.Prices) error {
	if c.system == "" {
		return nil
	}
	p, ok := ps.For(c.Model)
	if !ok || p.MaxInput == 0 {
		return nil
	}
	if n := provider.EstimateText(c.system); n > p.MaxInput {
		what := "--labels-file " + c.LabelsFile
		if c.LabelsFile == "" {
			what = "--examples " + c.Examples
		}
		return fmt.Errorf("%s: the prompt's fixed part is about %d tokens, over --model %s's context of %d (max_input_tokens in %s): fewer or shorter examples or descriptions", what, n, c.Model, p.MaxInput, ps.Source)
	}
	return nil
}

// instruction opens the fixed part: one label a row, or several.
func (c *Config) instruction() string {
	if c.MultiLabel {
		return labelset.MultiInstruction
	}
	return labelset.SingleInstruction
}

// baseSet is --labels-file read, else --labels as a set.
func (c *Config) baseSet() (*labelset.Set, error) {
	if c.LabelsFile == "" {
		labels, err := ParseLabels(c.Labels)
		if err != nil {
			return nil, err
		}
		return labelset.FromNames(labels)
	}
	set, err := labelset.Load(c.LabelsFile)
	if err != nil {
		return nil, fmt.Errorf("--labels-file: %w", err)
	}
	return set, nil
}

// readExamples adds --examples-per-label examples of each label chosen
// from --examples.
func (c *Config) readExamples(set *labelset.Set) (*labelset.Set, error) {
	f, err := os.Open(c.Examples)
	if err != nil {
		return nil, fmt.Errorf("--examples: cannot read %s: %v", c.Examples, unwrapPathError(err))
	}
	defer f.Close()
	text, label := cmp.Or(c.ExamplesTextColumn, ExamplesTextColumn), cmp.Or(c.ExamplesLabelColumn, ExamplesLabelColumn)
	out, _, err := labelset.ReadExamples(f, set, labelset.ExamplesOptions{
		Input:       input.Options{Name: c.Examples, TextColumn: text},
		LabelColumn: label,
		TextFlag:    "--examples-text-column", LabelFlag: "--examples-label-column",
		PerLabel: c.ExamplesPerLabel,
	})
	if err != nil {
		return nil, fmt.Errorf("--examples: %w", err)
	}
	return out, nil
}
