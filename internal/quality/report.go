package quality

import "math"

// Report is what an evaluation found, as --summary-json's quality object
// holds it. Accuracy, MacroF1 and ECE are null when no row was scored (ECE:
// when no scored row had a score).
type Report struct {
	Accuracy *float64 `json:"accuracy"`
	// MacroF1 is the mean of F1 over every label in the gold labels or
	// the answers of the scored rows (scikit-learn's classification_report
	// averages over the same set): a label the model answered but that
	// no gold row holds counts, with F1 0.
	MacroF1  *float64              `json:"macro_f1"`
	PerLabel map[string]LabelScore `json:"per_label"`
	// Confusion counts the scored rows by gold label, then by the label
	// answered: confusion[gold][answered]. Pairs never met are left out.
	Confusion map[string]map[string]int64 `json:"confusion"`
	Scored    int64                       `json:"scored"`
	Correct   int64                       `json:"correct"`
	// Unscored counts the rows not compared, by why: not_success (the
	// row did not end in success) and blank_gold.
	Unscored map[string]int64 `json:"unscored"`
	// ECE is the expected calibration error of the scores written: over
	// ten bins of equal width, the mean of |accuracy - mean score|,
	// weighted by the rows in each bin (Reliability). Rows without a score
	// are left out of it.
	ECE         *float64 `json:"ece"`
	Reliability []Bin    `json:"reliability"`
	// Coverage is, for each threshold, the rows whose score is at least
	// it (rows without a score are never kept), their share of the scored
	// rows and their accuracy.
	Coverage []Kept `json:"coverage"`
	// Target is the lowest threshold whose kept rows reach the target
	// accuracy (--target-accuracy), when one was asked.
	Target *Target `json:"target,omitempty"`
	// Labels are the labels met, sorted: the order of the matrix.
	Labels []string `json:"labels"`
	// Multi is the multi-label evaluation (--multi-label): each row's
	// labels compared with its gold cell's as sets. The figures above
	// compare them as written, whole.
	Multi *MultiReport `json:"multi_label,omitempty"`
}

// LabelScore is one label's figures. Precision is 0 when the label was
// never answered, recall 0 when no gold row holds it, F1 0 when both are
// 0 (scikit-learn's zero_division=0).
type LabelScore struct {
	Precision float64 `json:"precision"`
	Recall    float64 `json:"recall"`
	F1        float64 `json:"f1"`
	Support   int64   `json:"support"`   // scored rows with this gold label
	Predicted int64   `json:"predicted"` // scored rows answered with it
}

// Bin is one bin of the reliability diagram: the rows whose score is in
// [Lo, Hi) ([0.9, 1] for the last), their mean score and their accuracy.
type Bin struct {
	Lo         float64 `json:"lo"`
	Hi         float64 `json:"hi"`
	Rows       int64   `json:"rows"`
	Confidence float64 `json:"confidence"`
	Accuracy   float64 `json:"accuracy"`
}

// Kept is one line of the coverage table.
type Kept struct {
	Threshold float64  `json:"threshold"`
	Rows      int64    `json:"rows"`
	Share     float64  `json:"share"`
	Accuracy  *float64 `json:"accuracy"` // null when no row is kept
}

// Target is the threshold that reaches a target accuracy on the rows
// kept. Reached is false when none does (then the other fields are 0).
type Target struct {
	Accuracy  float64 `json:"target_accuracy"`
	Reached   bool    `json:"reached"`
	Threshold float64 `json:"threshold"`
	Kept      Kept    `json:"kept"`
}

// Thresholds are the coverage table's rows.
var Thresholds = []float64{0, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99}

// bins is the number of reliability bins (equal width on [0, 1]).
const bins = 10

// Report computes the figures; target, when in (0, 1], also finds the
// threshold that reaches it (Target).
func (e *Eval) Report(target float64) Report {
	r := Report{Scored: e.scored, Correct: e.correct, PerLabel: map[string]LabelScore{}, Confusion: map[string]map[string]int64{},
		Unscored: map[string]int64{UnscoredNotSuccess: e.unscored[UnscoredNotSuccess], UnscoredBlankGold: e.unscored[UnscoredBlankGold]}}
	r.Labels, _ = e.sortedLabels()
	if e.scored > 0 {
		r.Accuracy = ptr(ratio(e.correct, e.scored))
	}
	e.perLabel(&r)
	r.Reliability, r.ECE = e.reliability()
	for _, t := range Thresholds {
		r.Coverage = append(r.Coverage, e.Coverage(t))
	}
	if target > 0 && target <= 1 {
		t := e.ThresholdFor(target)
		r.Target = &t
	}
	return r
}

// perLabel fills the confusion matrix, the per-label figures and macro-F1.
func (e *Eval) perLabel(r *Report) {
	n := len(e.names)
	tp, pred, gold := make([]int64, n), make([]int64, n), make([]int64, n)
	for gp, c := range e.conf {
		g, p := gp[0], gp[1]
		row := r.Confusion[e.names[g]]
		if row == nil {
			row = map[string]int64{}
			r.Confusion[e.names[g]] = row
		}
		row[e.names[p]] = c
		gold[g] += c
		pred[p] += c
		if g == p {
			tp[g] += c
		}
	}
	sum := 0.0
	for i, l := range e.names {
		s := LabelScore{Support: gold[i], Predicted: pred[i], Precision: ratio(tp[i], pred[i]), Recall: ratio(tp[i], gold[i])}
		if s.Precision+s.Recall > 0 {
			s.F1 = 2 * s.Precision * s.Recall / (s.Precision + s.Recall)
		}
		r.PerLabel[l] = s
		sum += s.F1
	}
	if n > 0 && e.scored > 0 {
		r.MacroF1 = ptr(sum / float64(n))
	}
}

// reliability is the reliability diagram's bins and the ECE.
func (e *Eval) reliability() ([]Bin, *float64) {
	out := make([]Bin, bins)
	var sums [bins]int64 // sum of score steps in each bin
	var oks [bins]int64
	var total int64
	for i := range out {
		out[i].Lo, out[i].Hi = float64(i)/bins, float64(i+1)/bins
	}
	if e.hist != nil {
		for step := range scoreSteps + 1 {
			b := min(step*bins/scoreSteps, bins-1)
			out[b].Rows += e.hist.n[step]
			sums[b] += int64(step) * e.hist.n[step]
			oks[b] += e.hist.ok[step]
			total += e.hist.n[step]
		}
	}
	if total == 0 {
		return out, nil
	}
	ece := 0.0
	for i := range out {
		if out[i].Rows == 0 {
			continue
		}
		out[i].Confidence = float64(sums[i]) / scoreSteps / float64(out[i].Rows)
		out[i].Accuracy = ratio(oks[i], out[i].Rows)
		ece += float64(out[i].Rows) / float64(total) * math.Abs(out[i].Accuracy-out[i].Confidence)
	}
	return out, &ece
}

// Coverage is the rows whose score is at least threshold: how many, their
// share of the scored rows, their accuracy.
func (e *Eval) Coverage(threshold float64) Kept {
	k := Kept{Threshold: threshold}
	from, _ := Step(threshold)
	if math.IsNaN(threshold) {
		from = 0
	}
	var ok int64
	if e.hist != nil {
		for step := from; step <= scoreSteps; step++ {
			k.Rows += e.hist.n[step]
			ok += e.hist.ok[step]
		}
	}
	k.Share = ratio(k.Rows, e.scored)
	if k.Rows > 0 {
		k.Accuracy = ptr(ratio(ok, k.Rows))
	}
	return k
}

// ThresholdFor finds the lowest threshold (a score as written) whose kept
// rows reach the target accuracy: it keeps the most rows of any threshold
// that does. Scores below it are the rows to review (--review-below).
func (e *Eval) ThresholdFor(target float64) Target {
	t := Target{Accuracy: target}
	if e.hist == nil {
		return t
	}
	var rows, ok int64
	best := -1
	for step := scoreSteps; step >= 0; step-- {
		rows += e.hist.n[step]
		ok += e.hist.ok[step]
		// Compared as a reader would: the kept rows' accuracy, then the target.
		if e.hist.n[step] > 0 && ratio(ok, rows) >= target {
			best = step
		}
	}
	if best < 0 {
		return t
	}
	t.Reached, t.Threshold = true, float64(best)/scoreSteps
	t.Kept = e.Coverage(t.Threshold)
	return t
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func ptr(f float64) *float64 { return &f }
