package tune

import (
	"math"
	"testing"
)

// Stage 1 is right on rows whose score is high (0.9) and wrong on those
// it scores low (0.1); stage 2 is right everywhere and costs 1 a row.
func twoStages(n int) ([]*Stage, []Row) {
	s1 := &Stage{Name: "cheap", Calibrated: true}
	s2 := &Stage{Name: "strong", Calibrated: true, CostPerRow: 1}
	var gold []Row
	for i := 0; i < n; i++ {
		gold = append(gold, Row{Gold: "pos"})
		if i%4 == 0 || i%4 == 1 { // a quarter of each half wrong and unsure
			if i%8 < 2 {
				s1.Rows = append(s1.Rows, Obs{OK: true, Label: "neg", Score: 0.1, Raw: math.NaN()})
				s2.Rows = append(s2.Rows, Obs{OK: true, Label: "pos", Score: math.NaN()})
				continue
			}
		}
		s1.Rows = append(s1.Rows, Obs{OK: true, Label: "pos", Score: 0.9, Raw: math.NaN()})
		s2.Rows = append(s2.Rows, Obs{OK: true, Label: "pos", Score: math.NaN()})
	}
	return []*Stage{s1, s2}, gold
}

func TestChooseLeastCostReachingTheTarget(t *testing.T) {
	stages, gold := twoStages(800)
	r := Choose(stages, gold, Goal{Target: 0.99})
	if !r.Reached || !r.Possible || r.HeldOut.Accuracy != 1 {
		t.Fatalf("%+v", r)
	}
	// The least cost: the unsure quarter goes on, not the sure rows.
	if th := r.Thresholds[0]; th <= 0.1 || th > 0.9 {
		t.Fatalf("threshold %v: want above 0.1 and at most 0.9", th)
	}
	if math.Abs(r.HeldOut.Answers[1]-0.25) > 0.01 || math.Abs(r.HeldOut.CostPer1k-250) > 10 {
		t.Fatalf("held out: %+v", r.HeldOut)
	}
}

func TestChooseSaysUnreachableUnderTheCap(t *testing.T) {
	stages, gold := twoStages(800)
	r := Choose(stages, gold, Goal{Target: 0.99, MaxCostPer1k: 100})
	if r.Reached || r.Possible {
		t.Fatalf("reached under a cap below what the target costs: %+v", r)
	}
	if r.HeldOut.CostPer1k > 100 || r.HeldOut.Accuracy != 0.75 {
		t.Fatalf("best under the cap: %+v", r.HeldOut)
	}
}

func TestGridBounded(t *testing.T) {
	for n := 1; n <= 7; n++ {
		g := gridFor(n)
		if math.Pow(float64(len(g)), float64(n)) > maxCombos && len(g) > 3 || g[0] != 0 || g[len(g)-1] != 1 {
			t.Fatalf("%d stages: grid %v", n, g)
		}
	}
}
