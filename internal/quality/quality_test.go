package quality

import (
	"math"
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/results"
)

// row is one scored row: gold, answered, score (NaN: blank).
type row struct {
	gold, label string
	score       float64
}

func eval(t *testing.T, rows []row) Report {
	t.Helper()
	var e Eval
	for _, r := range rows {
		e.Add(Obs{Gold: r.gold, Success: true, Label: r.label, Score: r.score})
	}
	if err := e.Err(); err != nil {
		t.Fatal(err)
	}
	return e.Report(0)
}

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-12 {
		t.Errorf("%s = %.15g, want %.15g", what, got, want)
	}
}

func nearPtr(t *testing.T, what string, got *float64, want float64) {
	t.Helper()
	if got == nil {
		t.Fatalf("%s is null, want %g", what, want)
	}
	near(t, what, *got, want)
}

func label(t *testing.T, r Report, l string, p, rec, f1 float64, support int64) {
	t.Helper()
	s, ok := r.PerLabel[l]
	if !ok {
		t.Fatalf("no per_label entry for %q: %v", l, r.PerLabel)
	}
	near(t, l+" precision", s.Precision, p)
	near(t, l+" recall", s.Recall, rec)
	near(t, l+" f1", s.F1, f1)
	if s.Support != support {
		t.Errorf("%s support = %d, want %d", l, s.Support, support)
	}
}

// Every figure below is worked out by hand in the comment beside it.
func TestEveryLabelRight(t *testing.T) {
	r := eval(t, []row{{"pos", "pos", 0.9}, {"neg", "neg", 0.8}, {"pos", "POS", 0.7}})
	nearPtr(t, "accuracy", r.Accuracy, 1)
	nearPtr(t, "macro_f1", r.MacroF1, 1)
	label(t, r, "pos", 1, 1, 1, 2)
	label(t, r, "neg", 1, 1, 1, 1)
	if r.Confusion["pos"]["pos"] != 2 || r.Confusion["neg"]["neg"] != 1 || len(r.Confusion["pos"]) != 1 {
		t.Errorf("confusion = %v", r.Confusion)
	}
}

func TestEveryLabelWrong(t *testing.T) {
	r := eval(t, []row{{"pos", "neg", 0.9}, {"neg", "pos", 0.8}})
	nearPtr(t, "accuracy", r.Accuracy, 0)
	nearPtr(t, "macro_f1", r.MacroF1, 0)
	label(t, r, "pos", 0, 0, 0, 1)
	label(t, r, "neg", 0, 0, 0, 1)
	if r.Confusion["pos"]["neg"] != 1 || r.Confusion["neg"]["pos"] != 1 {
		t.Errorf("confusion = %v", r.Confusion)
	}
}

// A gold label the model never answered (neu): precision 0 (nothing
// answered), recall 0 of 1, F1 0, and it counts in macro-F1.
func TestLabelNeverPredicted(t *testing.T) {
	r := eval(t, []row{{"pos", "pos", 0.9}, {"pos", "neg", 0.9}, {"neg", "neg", 0.9}, {"neu", "pos", 0.9}})
	nearPtr(t, "accuracy", r.Accuracy, 2.0/4)
	label(t, r, "pos", 1.0/2, 1.0/2, 0.5, 2)           // TP 1, answered 2, gold 2
	label(t, r, "neg", 1.0/2, 1, 2*0.5*1/(0.5+1), 1)   // TP 1, answered 2, gold 1
	label(t, r, "neu", 0, 0, 0, 1)                     // never answered
	nearPtr(t, "macro_f1", r.MacroF1, (0.5+2.0/3+0)/3) // over pos, neg, neu
}

// A label the model answered that no gold row holds (other): support 0,
// precision 0, and it too counts in macro-F1, as scikit-learn counts it.
func TestAnswerNeverInGold(t *testing.T) {
	r := eval(t, []row{{"pos", "pos", 0.9}, {"neg", "other", 0.9}})
	nearPtr(t, "accuracy", r.Accuracy, 0.5)
	label(t, r, "pos", 1, 1, 1, 1)
	label(t, r, "neg", 0, 0, 0, 1)
	label(t, r, "other", 0, 0, 0, 0)
	nearPtr(t, "macro_f1", r.MacroF1, 1.0/3)
	if got := strings.Join(r.Labels, ","); got != "neg,other,pos" {
		t.Errorf("labels = %s", got)
	}
}

func TestBlankGoldAndFailedRowsAreNotScored(t *testing.T) {
	var e Eval
	e.Add(Obs{Gold: "", Success: true, Label: "pos", Score: 0.9})
	e.Add(Obs{Gold: "  ", Success: true, Label: "pos", Score: 0.9})
	e.Add(Obs{Gold: "pos", Success: false, Label: "", Score: math.NaN()})     // failed
	e.Add(Obs{Gold: "", Success: false, Label: "pos", Score: 0.9})            // fallback, blank gold: not_success first
	e.Add(Obs{Gold: " Pos ", Success: true, Label: "pos", Score: math.NaN()}) // scored, no score
	r := e.Report(0)
	if r.Scored != 1 || r.Unscored[UnscoredBlankGold] != 2 || r.Unscored[UnscoredNotSuccess] != 2 {
		t.Errorf("scored %d, unscored %v", r.Scored, r.Unscored)
	}
	nearPtr(t, "accuracy", r.Accuracy, 1)
	if r.ECE != nil {
		t.Errorf("ECE = %v with no scored row that has a score", *r.ECE)
	}
}

func TestNothingScored(t *testing.T) {
	var e Eval
	e.Add(Obs{Gold: "", Success: true, Label: "pos", Score: 0.9})
	r := e.Report(0.9)
	if r.Accuracy != nil || r.MacroF1 != nil || r.ECE != nil || r.Target.Reached {
		t.Errorf("figures of nothing: %+v", r)
	}
}

// Mapped labels: the map turns the model's names into the gold ones, in
// any case; what is not mapped stays as it is.
func TestMappedLabels(t *testing.T) {
	m, err := ParseLabelMap(" LABEL_0 = negative, label_1=positive ")
	if err != nil {
		t.Fatal(err)
	}
	a := &Answers{Map: m}
	var e Eval
	for _, c := range []struct{ gold, label string }{{"Negative", "LABEL_0"}, {"positive", "Label_1"}, {"positive", "LABEL_0"}, {"neutral", "LABEL_2"}} {
		r := results.Row{Outcome: outcome.Success, Label: c.label, Score: 0.9, Gold: c.gold}
		a.Apply(&r)
		e.Add(ObsOf(r))
	}
	r := e.Report(0)
	nearPtr(t, "accuracy", r.Accuracy, 2.0/4)
	if r.Confusion["positive"]["negative"] != 1 || r.Confusion["neutral"]["label_2"] != 1 {
		t.Errorf("confusion = %v", r.Confusion)
	}
	if m.String() != "LABEL_0=negative,label_1=positive" {
		t.Errorf("String() = %q", m.String())
	}
}

// ECE over ten bins: bin [0.9,1] holds 0.95 right and 0.95 wrong (mean
// 0.95, accuracy 0.5: gap 0.45); bin [0.1,0.2) holds 0.15 wrong twice (gap
// 0.15). ECE = 2/4×0.45 + 2/4×0.15 = 0.3.
func TestECE(t *testing.T) {
	r := eval(t, []row{{"a", "a", 0.95}, {"a", "b", 0.95}, {"a", "b", 0.15}, {"b", "a", 0.15}})
	nearPtr(t, "ece", r.ECE, 0.3)
	b := r.Reliability[9]
	if b.Rows != 2 {
		t.Fatalf("bin 9 = %+v", b)
	}
	near(t, "bin 9 confidence", b.Confidence, 0.95)
	near(t, "bin 9 accuracy", b.Accuracy, 0.5)
	if r.Reliability[1].Rows != 2 || r.Reliability[0].Rows != 0 {
		t.Errorf("bins = %+v", r.Reliability)
	}
}

// Bin edges: 0.1 is in [0.1, 0.2), 1 in the last bin.
func TestBinEdges(t *testing.T) {
	r := eval(t, []row{{"a", "a", 0.1}, {"a", "a", 1}, {"a", "a", 0.0999}})
	if r.Reliability[1].Rows != 1 || r.Reliability[9].Rows != 1 || r.Reliability[0].Rows != 1 {
		t.Errorf("bins = %+v", r.Reliability)
	}
}

// Coverage: scores 0.9 right, 0.8 right, 0.7 wrong, 0.6 right. Kept at
// 0.6: 3 of 4 right (0.75), at 0.7: 2 of 3, at 0.8: 2 of 2.
func TestCoverageAndTarget(t *testing.T) {
	var e Eval
	for _, r := range []row{{"a", "a", 0.9}, {"a", "a", 0.8}, {"a", "b", 0.7}, {"a", "a", 0.6}, {"a", "a", math.NaN()}} {
		e.Add(Obs{Gold: r.gold, Success: true, Label: r.label, Score: r.score})
	}
	k := e.Coverage(0.7)
	if k.Rows != 3 {
		t.Fatalf("kept at 0.7: %+v", k)
	}
	near(t, "share at 0.7", k.Share, 3.0/5) // the row without a score is scored, never kept
	nearPtr(t, "accuracy at 0.7", k.Accuracy, 2.0/3)
	tg := e.ThresholdFor(0.75)
	if !tg.Reached || tg.Threshold != 0.6 || tg.Kept.Rows != 4 {
		t.Errorf("target 0.75: %+v", tg)
	}
	tg = e.ThresholdFor(0.8)
	if !tg.Reached || tg.Threshold != 0.8 || tg.Kept.Rows != 2 {
		t.Errorf("target 0.8: %+v", tg)
	}
	if tg := (&Eval{}).ThresholdFor(0.5); tg.Reached {
		t.Errorf("target reached with no rows: %+v", tg)
	}
	var wrong Eval
	wrong.Add(Obs{Gold: "a", Success: true, Label: "b", Score: 0.9})
	if tg := wrong.ThresholdFor(0.5); tg.Reached {
		t.Errorf("target reached by wrong rows: %+v", tg)
	}
}

func TestTooManyLabels(t *testing.T) {
	var e Eval
	for i := range MaxLabels + 10 {
		e.Add(Obs{Gold: strings.Repeat("x", i+1), Success: true, Label: "a", Score: 0.5})
	}
	if e.Err() == nil {
		t.Fatal("no error past MaxLabels")
	}
	if len(e.names) > MaxLabels {
		t.Errorf("%d labels kept", len(e.names))
	}
}

func TestParseLabelMapRefuses(t *testing.T) {
	for _, in := range []string{"a", "a=", "=b", "a=b,A=c", "a=b,,c=d", "a\x00=b", "a=b\u202e", "a=\xff"} {
		if _, err := ParseLabelMap(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
	if _, err := ParseLabelMap(strings.Repeat("a=b,", MaxLabelMapPairs) + "z=y"); err == nil {
		t.Error("too many pairs accepted")
	}
	if m, err := ParseLabelMap(""); err != nil || !m.Empty() {
		t.Errorf("empty: %v %v", m, err)
	}
}

func TestKey(t *testing.T) {
	for _, c := range [][2]string{{" POSITIVE ", "positive"}, {"Straße", "strasse"}, {"neg", "neg"}} {
		if got := Key(c[0]); got != c[1] {
			t.Errorf("Key(%q) = %q, want %q", c[0], got, c[1])
		}
	}
}

type halve struct{}

func (halve) Calibrate(_ string, raw float64) float64 { return raw / 2 }

// Calibration: an answer's score is calibrated and its raw kept (a
// fallback's too: the Answers are the answering stage's); a stage without
// a calibration in a calibrated run (Uncalibrated) has its score blanked;
// a row without a score keeps none. Review: under P, or no score.
func TestAnswersApply(t *testing.T) {
	a := &Answers{Calibration: halve{}, Review: true, ReviewBelow: 0.4}
	cases := []struct {
		in         results.Row
		score, raw float64
		review     bool
	}{
		{results.Row{Outcome: outcome.Success, Label: "a", Score: 0.9}, 0.45, 0.9, false},
		{results.Row{Outcome: outcome.Success, Label: "a", Score: 0.7}, 0.35, 0.7, true},
		{results.Row{Outcome: outcome.Fallback, Label: "a", Score: 0.9}, 0.45, 0.9, false},
		{results.Row{Outcome: outcome.Success, Label: "a", Score: math.NaN()}, math.NaN(), math.NaN(), true},
		{results.Row{Outcome: outcome.UpstreamFailed}, 0, math.NaN(), true},
	}
	for i, c := range cases {
		r := c.in
		a.Apply(&r)
		if !same(r.Score, c.score) || !same(r.RawScore, c.raw) || r.Review != c.review {
			t.Errorf("case %d: score %v raw %v review %v, want %v %v %v", i, r.Score, r.RawScore, r.Review, c.score, c.raw, c.review)
		}
	}
	u := &Answers{Uncalibrated: true, Review: true, ReviewBelow: 0.4}
	r := results.Row{Outcome: outcome.Fallback, Label: "a", Score: 0.9}
	if u.Apply(&r); !math.IsNaN(r.Score) || r.RawScore != 0.9 || !r.Review {
		t.Errorf("uncalibrated stage: score %v raw %v review %v, want blank, 0.9, true", r.Score, r.RawScore, r.Review)
	}
	// The threshold is compared with the score as written (4 places).
	if NeedsReview(results.Row{Label: "a", Score: 0.39996}, 0.4) {
		t.Error("0.39996 is written 0.4, not under 0.4")
	}
}

func same(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }

func FuzzParseLabelMap(f *testing.F) {
	for _, s := range []string{"LABEL_0=negative,LABEL_1=positive", "a=b", "", ",", "=", "a=b=c", " x = y "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseLabelMap(s)
		if err != nil {
			return
		}
		// What parses prints back as a map that parses to the same.
		m2, err := ParseLabelMap(m.String())
		if err != nil || m2.String() != m.String() {
			t.Fatalf("%q: String %q does not parse back: %v", s, m.String(), err)
		}
		_ = m.Apply(s)
	})
}
