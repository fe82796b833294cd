package quality

import (
	"math"
	"testing"

	"github.com/hfsent/hfsent/internal/results"
)

// Multi-label figures against a hand-computed example. Rows (gold → got):
// billing;late → billing, late → late;praise, praise → praise,
// Billing → billing. Labels met: billing, late, praise.
//
//	billing: TP 2, FP 0, FN 0: F1 1
//	late:    TP 1, FP 0, FN 1: F1 2/3
//	praise:  TP 1, FP 1, FN 0: F1 2/3
//
// micro F1 = 2·4 / (2·4 + 1 + 1) = 0.8; macro F1 = (1 + 2/3 + 2/3) / 3
// = 7/9; subset accuracy = 2/4; Hamming loss = 2 wrong pairs / (4 rows ×
// 3 labels) = 1/6.
func TestMultiEvalHandComputed(t *testing.T) {
	var m MultiEval
	for _, o := range []Obs{
		{Gold: "billing;late", Label: "billing", Success: true},
		{Gold: "late", Label: "late;praise", Success: true},
		{Gold: "praise", Label: "praise", Success: true},
		{Gold: " Billing ", Label: "billing", Success: true},
		{Gold: "late", Label: "", Success: false},
		{Gold: "", Label: "late", Success: true},
	} {
		m.Add(o)
	}
	r := m.Report()
	near := func(name string, got *float64, want float64) {
		t.Helper()
		if got == nil || math.Abs(*got-want) > 1e-12 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("micro F1", r.MicroF1, 0.8)
	near("macro F1", r.MacroF1, 7.0/9)
	near("subset accuracy", r.SubsetAccuracy, 0.5)
	near("Hamming loss", r.HammingLoss, 1.0/6)
	if r.Scored != 4 || r.Exact != 2 || r.Unscored[UnscoredNotSuccess] != 1 || r.Unscored[UnscoredBlankGold] != 1 {
		t.Errorf("counts: %+v", r)
	}
	if l := r.PerLabel["late"]; l.Support != 2 || l.Predicted != 1 || l.Precision != 1 || l.Recall != 0.5 {
		t.Errorf("late: %+v", l)
	}
	// Order within a cell does not matter.
	var o MultiEval
	o.Add(Obs{Gold: "late;billing", Label: "billing;late", Success: true})
	near("order", o.Report().SubsetAccuracy, 1)
	if (&MultiEval{}).Report().MicroF1 != nil {
		t.Error("a figure with no row scored")
	}
}

// The label map applies to each of a multi-label row's labels, and to the
// labels of its scores, on a copy.
func TestAnswersMapMultiLabelsAndScores(t *testing.T) {
	m, err := ParseLabelMap("LABEL_0=billing,LABEL_1=late")
	if err != nil {
		t.Fatal(err)
	}
	scores := []results.LabelScore{{Label: "LABEL_1", Score: 0.8}, {Label: "LABEL_0", Score: 0.7}}
	r := results.Row{Label: "LABEL_0;LABEL_1", Score: 0.7, Scores: scores}
	(&Answers{Map: m, Multi: true}).Apply(&r)
	if r.Label != "billing;late" || r.Scores[0].Label != "late" || scores[0].Label != "LABEL_1" {
		t.Fatalf("%+v (the model's scores: %+v)", r, scores)
	}
}
