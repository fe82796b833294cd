package cli

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/quality"
	"github.com/hfsent/hfsent/internal/results"
	"github.com/hfsent/hfsent/internal/stage"
)

// qualityOptions are the flags that judge a run's answers and mark them:
// gold labels, the gates and the review flag (docs/guides/quality.md).
// The label map and the calibration, which change a provider's answers,
// are its settings (stage.Config: addAnswerFlags).
type qualityOptions struct {
	goldColumn     string
	minAccuracy    float64
	minMacroF1     float64
	targetAccuracy float64
	reviewBelow    float64
	reviewOut      string

	flags *pflag.FlagSet
}

// qualityUse is which of the flags a command takes: classify all of
// them; serve and the worker those that change an answer; queue export
// those that judge a batch.
type qualityUse struct{ gold, answers, gates bool }

var (
	classifyQuality = qualityUse{gold: true, answers: true, gates: true}
	serviceQuality  = qualityUse{answers: true}
	exportQuality   = qualityUse{gates: true}
)

// addAnswerFlags adds the settings that change a provider's answers:
// --label-map, --calibration, --calibration-force (classify, serve,
// worker, a --cascade's stage).
func addAnswerFlags(fs *pflag.FlagSet, c *stage.Config) {
	fs.StringVar(&c.LabelMap, "label-map", "", "map the model's labels onto yours before anything is written or compared, e.g. LABEL_0=negative,LABEL_1=positive (FROM matched case-insensitively; the response cache keeps the model's own)")
	fs.StringVar(&c.Calibration, "calibration", "", "a calibration file (hfsent calibrate): score becomes the calibrated probability that the label is right, and raw_score keeps the model's")
	fs.BoolVar(&c.CalibrationForce, "calibration-force", false, "use --calibration even though it was fitted for another model, label set, label map or prompt (with a warning)")
}

// addQualityFlags adds the quality flags use names; answers, for a
// command that changes answers, is its provider's settings.
func addQualityFlags(fs *pflag.FlagSet, o *qualityOptions, use qualityUse, answers *stage.Config) {
	o.flags = fs
	if use.gold {
		fs.StringVar(&o.goldColumn, "gold-column", "", "the input column of gold labels: compare each row's label with it (case-insensitive) and report accuracy, macro-F1, per-label precision, recall and F1, the confusion matrix, the ECE and the coverage table (docs/guides/quality.md)")
		fs.StringVar(&o.reviewOut, "review-out", "", "write the rows marked for review (--review-below), with their text, to this CSV, with an empty gold column for a person to fill in (calibrate and --gold-column read it back)")
	}
	if use.answers {
		addAnswerFlags(fs, answers)
		fs.Float64Var(&o.reviewBelow, "review-below", 0, "mark for review (the review column) every row whose score is under P, or that has none ("+rangeHelp(0.0, 1.0)+")")
	}
	if use.gates {
		fs.Float64Var(&o.minAccuracy, "min-accuracy", 0, "exit 3 when the accuracy against the gold labels is under X (0: no gate, else "+rangeHelp(0.0, 1.0)+")")
		fs.Float64Var(&o.minMacroF1, "min-macro-f1", 0, "exit 3 when the macro-F1 against the gold labels is under X (0: no gate, else "+rangeHelp(0.0, 1.0)+")")
		fs.Float64Var(&o.targetAccuracy, "target-accuracy", 0, "name the lowest score threshold whose rows reach this accuracy against the gold labels (0: none, else "+rangeHelp(0.0, 1.0)+")")
	}
}

func (o *qualityOptions) changed(name string) bool {
	return o.flags != nil && o.flags.Lookup(name) != nil && o.flags.Changed(name)
}

// review reports whether --review-below was given.
func (o *qualityOptions) review() bool { return o.changed("review-below") }

// gold reports whether the run compares its rows with gold labels.
func (o *qualityOptions) gold() bool { return o.goldColumn != "" }

// validate checks the flags; gold says whether the command has gold
// labels to judge (classify: --gold-column; export: a batch pushed with
// one, known later).
func (o *qualityOptions) validate(gold bool) error {
	for _, err := range []error{
		inRange("--min-accuracy", o.minAccuracy, 0, 1, ""),
		inRange("--min-macro-f1", o.minMacroF1, 0, 1, ""),
		inRange("--target-accuracy", o.targetAccuracy, 0, 1, ""),
		inRange("--review-below", o.reviewBelow, 0, 1, ""),
	} {
		if err != nil {
			return err
		}
	}
	if o.changed("gold-column") && strings.TrimSpace(o.goldColumn) == "" {
		return usageErrorf("--gold-column must name a column")
	}
	for _, f := range []string{"min-accuracy", "min-macro-f1", "target-accuracy"} {
		if o.changed(f) && !gold {
			return usageErrorf("--%s needs gold labels: give --gold-column COL", f)
		}
	}
	if o.reviewOut != "" && !o.review() {
		return usageErrorf("--review-out needs --review-below P: the rows under P are the ones written")
	}
	return nil
}

// answers are what the run does to each stage's answers (prov's stages,
// their label maps and calibrations read), with the review flag: nil for
// a stage whose answers it leaves as they are.
func (o *qualityOptions) answers(prov *providerOptions) []*quality.Answers {
	cal := prov.calibrated()
	out := make([]*quality.Answers, len(prov.answers))
	for i, sa := range prov.answers {
		a := &quality.Answers{Map: sa.Map, Review: o.review(), ReviewBelow: o.reviewBelow, Uncalibrated: cal && sa.Calibration == nil,
			Multi: prov.stages[i].MultiLabel}
		if sa.Calibration != nil {
			a.Calibration = sa.Calibration
		}
		if a.Active() {
			out[i] = a
		}
	}
	return out
}

// extra are the results' extra columns these flags and prov's stages
// turn on: raw_score with a calibration, review, stage with --cascade.
func (o *qualityOptions) extra(prov *providerOptions) results.Extra {
	raw, chat, scores, topK := false, false, false, 0
	for _, c := range prov.stages {
		raw = raw || c.Calibration != ""
		k, _ := c.Kind()
		chat = chat || k.Chat
		scores = scores || writesScores(c)
		topK = max(topK, c.TopK)
	}
	// Only a chat model reports usage, and so cached prompt tokens.
	return results.Extra{RawScore: raw, Review: o.review(), Stage: prov.file != nil, CachedTokens: chat, Scores: scores, TopK: topK}
}

// reviewBelowText is --review-below as a sidecar keeps it ("" when off).
func (o *qualityOptions) reviewBelowText() string {
	if !o.review() {
		return ""
	}
	return strconv.FormatFloat(o.reviewBelow, 'g', -1, 64)
}

// qualityRun is what a run counted of its answers: the tally while it
// runs, the report after.
type qualityRun struct {
	o      *qualityOptions
	tally  quality.Tally
	file   *os.File
	buf    *bufio.Writer
	report *quality.Report
	err    error // the evaluation stopped (too many labels)
	// stages evaluate each stage of a cascade on the rows it answered
	// (nil without one); stageReports are their reports.
	stages       []*quality.Eval
	stageReports []quality.Report
}

// start opens what the run counts into: the evaluation (with gold
// labels; and of each of a cascade's stages, stages of them) and
// --review-out. nil when the run counts nothing.
func (o *qualityOptions) start(gold bool, rawCSV bool, stages int, multi bool) (*qualityRun, error) {
	if !gold && !o.review() {
		return nil, nil
	}
	q := &qualityRun{o: o}
	if gold {
		q.tally.Eval = &quality.Eval{}
		if multi {
			q.tally.Multi = &quality.MultiEval{}
		}
		for range stages {
			q.stages = append(q.stages, &quality.Eval{})
		}
	}
	if o.reviewOut != "" {
		f, err := os.Create(o.reviewOut)
		if err != nil {
			return nil, usageErrorf("--review-out %s cannot be written: %v", o.reviewOut, unwrapPathError(err))
		}
		q.file, q.buf = f, bufio.NewWriter(f)
		if q.tally.Review, err = quality.NewReviewWriter(q.buf, rawCSV); err != nil {
			f.Close()
			return nil, usageErrorf("--review-out %s: %v", o.reviewOut, err)
		}
	}
	return q, nil
}

// sink counts every row written to next.
func (q *qualityRun) sink(next engine.Sink) engine.Sink {
	if q == nil {
		return next
	}
	return qualitySink{Sink: next, q: q}
}

type qualitySink struct {
	engine.Sink
	q *qualityRun
}

func (s qualitySink) Write(rows []results.Row) error {
	err := s.Sink.Write(rows)
	for _, r := range rows {
		if r.Stage > 0 && r.Stage <= len(s.q.stages) {
			s.q.stages[r.Stage-1].Add(quality.ObsOf(r))
		}
	}
	if terr := s.q.tally.Add(rows); terr != nil && s.q.err == nil {
		s.q.err = fmt.Errorf("--review-out %s: %v", s.q.o.reviewOut, terr)
	}
	return err
}

// finish closes the review file and computes the report.
func (q *qualityRun) finish() {
	if q == nil {
		return
	}
	if q.file != nil {
		err := q.buf.Flush()
		if cerr := q.file.Close(); err == nil {
			err = cerr
		}
		if err != nil && q.err == nil {
			q.err = fmt.Errorf("--review-out %s: %v", q.o.reviewOut, err)
		}
	}
	if e := q.tally.Eval; e != nil {
		if err := e.Err(); err != nil && q.err == nil {
			q.err = fmt.Errorf("--gold-column %s: %v", q.o.goldColumn, err)
		}
		r := e.Report(q.o.targetAccuracy)
		if m := q.tally.Multi; m != nil {
			if err := m.Err(); err != nil && q.err == nil {
				q.err = fmt.Errorf("--gold-column %s: %v", q.o.goldColumn, err)
			}
			mr := m.Report()
			r.Multi = &mr
		}
		q.report = &r
	}
	for _, e := range q.stages {
		q.stageReports = append(q.stageReports, e.Report(0))
	}
}

// stageAccuracy is each stage's accuracy on the rows it answered (nil
// without gold labels or a cascade; a stage with none scored: nil).
func (q *qualityRun) stageAccuracy() []*float64 {
	if q == nil || q.stageReports == nil {
		return nil
	}
	out := make([]*float64, len(q.stageReports))
	for i, r := range q.stageReports {
		out[i] = r.Accuracy
	}
	return out
}

// quality is the report of the evaluation, nil without gold labels.
func (q *qualityRun) quality() *quality.Report {
	if q == nil {
		return nil
	}
	return q.report
}

// keys are the summary line's quality keys: accuracy=, macro_f1= (with
// gold labels), review= (with --review-below).
func (q *qualityRun) keys() string {
	if q == nil {
		return ""
	}
	var b strings.Builder
	if r := q.report; r != nil && r.Multi != nil {
		m := r.Multi
		fmt.Fprintf(&b, " micro_f1=%s macro_f1=%s subset_accuracy=%s hamming_loss=%s", fixed(m.MicroF1), fixed(m.MacroF1), fixed(m.SubsetAccuracy), fixed(m.HammingLoss))
	} else if r != nil {
		fmt.Fprintf(&b, " accuracy=%s macro_f1=%s", fixed(r.Accuracy), fixed(r.MacroF1))
	}
	if q.o.review() {
		fmt.Fprintf(&b, " review=%d", q.tally.Reviewed)
	}
	return b.String()
}

// fixed is a figure to 4 places, "none" when there is none.
func fixed(f *float64) string {
	if f == nil {
		return "none"
	}
	return strconv.FormatFloat(*f, 'f', 4, 64)
}

// print writes the quality block under the summary line: the counts, the
// ECE, the coverage table and the threshold for --target-accuracy.
func (q *qualityRun) print(w io.Writer) {
	if q == nil || q.report == nil {
		return
	}
	r := q.report
	if m := r.Multi; m != nil {
		fmt.Fprintf(w, "quality multi-label: scored=%d exact=%d micro_f1=%s macro_f1=%s subset_accuracy=%s hamming_loss=%s (labels compared as sets; the lines below compare them whole)\n",
			m.Scored, m.Exact, fixed(m.MicroF1), fixed(m.MacroF1), fixed(m.SubsetAccuracy), fixed(m.HammingLoss))
	}
	fmt.Fprintf(w, "quality: scored=%d correct=%d accuracy=%s macro_f1=%s ece=%s unscored: %s=%d %s=%d\n",
		r.Scored, r.Correct, fixed(r.Accuracy), fixed(r.MacroF1), fixed(r.ECE),
		quality.UnscoredBlankGold, r.Unscored[quality.UnscoredBlankGold], quality.UnscoredNotSuccess, r.Unscored[quality.UnscoredNotSuccess])
	fmt.Fprintln(w, "coverage: score>=  rows  share  accuracy")
	for _, k := range r.Coverage {
		fmt.Fprintf(w, "coverage: %8.2f %5d %6.1f%%  %s\n", k.Threshold, k.Rows, k.Share*100, fixed(k.Accuracy))
	}
	if t := r.Target; t != nil {
		if t.Reached {
			fmt.Fprintf(w, "target: accuracy %s reached by the rows with score>=%s: %d rows (%.1f%%) at accuracy %s (--review-below %s sends the rest to review)\n",
				strconv.FormatFloat(t.Accuracy, 'g', -1, 64), strconv.FormatFloat(t.Threshold, 'g', -1, 64), t.Kept.Rows, t.Kept.Share*100, fixed(t.Kept.Accuracy), strconv.FormatFloat(t.Threshold, 'g', -1, 64))
		} else {
			fmt.Fprintf(w, "target: no score threshold keeps rows at accuracy %s or more\n", strconv.FormatFloat(t.Accuracy, 'g', -1, 64))
		}
	}
}

// short reports the gates the run fell short of, "" when none: a gate
// with no figure (nothing scored) falls short.
func (q *qualityRun) short() string {
	if q == nil {
		return ""
	}
	o := q.o
	var why []string
	check := func(flag string, min float64, got *float64) {
		if o.changed(flag) && min > 0 && (got == nil || *got < min) {
			why = append(why, fmt.Sprintf("%s %s under --%s %s", strings.ReplaceAll(flag[4:], "-", "_"), fixed(got), flag, strconv.FormatFloat(min, 'g', -1, 64)))
		}
	}
	var acc, f1 *float64
	if q.report != nil && q.err == nil {
		acc, f1 = q.report.Accuracy, q.report.MacroF1
	}
	check("min-accuracy", o.minAccuracy, acc)
	check("min-macro-f1", o.minMacroF1, f1)
	return strings.Join(why, "; ")
}
