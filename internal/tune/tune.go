// Package tune picks a cascade's escalate-below thresholds from each
// stage's answers to gold rows (hfsent tune): it fits the calibrations the
// stages lack and chooses the thresholds on one half of the rows, and
// reports what they give on the other half, which neither saw.
package tune

import (
	"errors"
	"math"
	"slices"

	"github.com/hfsent/hfsent/internal/calibration"
	"github.com/hfsent/hfsent/internal/quality"
)

// Obs is one stage's answer to one gold row.
type Obs struct {
	// OK: the call ended success with a label (a row that failed goes on
	// to the next stage, as the engine sends it).
	OK    bool
	Label string
	// Score is the stage's calibrated score, when the stage had its own
	// calibration; Raw the model's own (NaN: none).
	Score, Raw float64
	LatencyMs  float64
}

// Stage is what a stage answered to every gold row, in the rows' order.
type Stage struct {
	Name string
	Rows []Obs
	// Calibrated: Score holds the stage's own calibration; otherwise Fit
	// fits one on the fitting half (Cal).
	Calibrated bool
	For        calibration.For
	// CostPerRow is what a row sent to the stage costs, USD, on average
	// (0: free, or unpriced).
	CostPerRow float64
	Cal        *calibration.File
}

// Row is one gold row: its gold label.
type Row struct{ Gold string }

// Held reports whether row i is held out from the fitting: every second
// row, so that both halves see the data's order alike.
func Held(i int) bool { return i%2 == 1 }

// Fit fits, on the rows not held out, the calibration of each stage but
// the last that has none, and sets every stage's Score from it.
func Fit(stages []*Stage, gold []Row) error {
	for k, s := range stages {
		if s.Calibrated || k == len(stages)-1 {
			continue
		}
		var samples []calibration.Sample
		for i, o := range s.Rows {
			if Held(i) || !o.OK || math.IsNaN(o.Raw) || quality.Key(gold[i].Gold) == "" {
				continue
			}
			samples = append(samples, calibration.Sample{Label: o.Label, Score: o.Raw, Correct: quality.Same(o.Label, gold[i].Gold)})
		}
		f, err := calibration.Fit(samples, s.For)
		if err != nil {
			return errors.New(s.Name + ": " + err.Error() + " (a stage without a calibration is fitted on the gold rows' first half)")
		}
		s.Cal = f
		for i := range s.Rows {
			o := &s.Rows[i]
			o.Score = f.Calibrate(o.Label, o.Raw)
		}
	}
	return nil
}

// Figures are what a cascade (or a stage alone) gives on a set of rows.
type Figures struct {
	Rows     int
	Accuracy float64
	// CostPer1k is the expected cost of 1,000 rows, USD.
	CostPer1k float64
	// Answers is the share of rows each stage answered (the last stage's
	// includes the rows that no stage answered).
	Answers []float64
	// Reach is the share of rows each stage was asked for.
	Reach []float64
	// P50Ms is the median of a row's latency summed over its stages.
	P50Ms float64
}

// Eval is the cascade with thresholds (escalate-below, one per stage but
// the last) over the rows of gold that part selects.
func Eval(stages []*Stage, gold []Row, th []float64, part func(int) bool) Figures {
	f := Figures{Answers: make([]float64, len(stages)), Reach: make([]float64, len(stages))}
	var right int
	var cost float64
	var lat []float64
	for i := range gold {
		if !part(i) {
			continue
		}
		f.Rows++
		ms := 0.0
		for k, s := range stages {
			o := s.Rows[i]
			f.Reach[k]++
			cost += s.CostPerRow
			ms += o.LatencyMs
			last := k == len(stages)-1
			if !last && (!o.OK || math.IsNaN(o.Score) || o.Score < th[k]) {
				continue
			}
			f.Answers[k]++
			if o.OK && quality.Key(gold[i].Gold) != "" && quality.Same(o.Label, gold[i].Gold) {
				right++
			}
			break
		}
		lat = append(lat, ms)
	}
	if f.Rows == 0 {
		return f
	}
	n := float64(f.Rows)
	for k := range stages {
		f.Answers[k] /= n
		f.Reach[k] /= n
	}
	f.Accuracy = float64(right) / n
	f.CostPer1k = cost / n * 1000
	slices.Sort(lat)
	f.P50Ms = lat[(len(lat)-1)/2]
	return f
}

// Alone is stage k by itself over the rows part selects.
func Alone(s *Stage, gold []Row, part func(int) bool) Figures {
	return Eval([]*Stage{s}, gold, nil, part)
}

// Goal is what to tune for: the least cost reaching Target, or, with
// MaxCostPer1k above 0, the best accuracy at no more than that cost.
type Goal struct {
	Target       float64
	MaxCostPer1k float64
}

// Result is the thresholds chosen and what they give.
type Result struct {
	Thresholds []float64
	// Fitting is on the rows the choice was made on; HeldOut on the
	// others: the figure to believe.
	Fitting, HeldOut Figures
	// Reached: the held-out accuracy reaches the target.
	Reached bool
	// Possible is false when no thresholds reached the target even on the
	// fitting rows (under the cost cap): Thresholds are the best reachable.
	Possible bool
}

// maxCombos bounds the thresholds tried (a grid per stage, fewer steps
// with more stages).
const maxCombos = 20000

// Choose picks the thresholds on the fitting rows (not Held) for g, and
// measures them on the held-out ones.
func Choose(stages []*Stage, gold []Row, g Goal) Result {
	fitting := func(i int) bool { return !Held(i) }
	grid := gridFor(len(stages) - 1)
	var best, bestAny []float64
	var bestF, bestAnyF Figures
	th := make([]float64, len(stages)-1)
	var walk func(k int)
	walk = func(k int) {
		if k == len(th) {
			f := Eval(stages, gold, th, fitting)
			capped := g.MaxCostPer1k > 0 && f.CostPer1k > g.MaxCostPer1k+1e-12
			if capped {
				return
			}
			if bestAny == nil || f.Accuracy > bestAnyF.Accuracy || f.Accuracy == bestAnyF.Accuracy && f.CostPer1k < bestAnyF.CostPer1k {
				bestAny, bestAnyF = slices.Clone(th), f
			}
			if f.Accuracy+1e-12 < g.Target {
				return
			}
			better := best == nil || f.CostPer1k < bestF.CostPer1k-1e-12 ||
				math.Abs(f.CostPer1k-bestF.CostPer1k) <= 1e-12 && f.Accuracy > bestF.Accuracy
			if g.MaxCostPer1k > 0 {
				better = best == nil || f.Accuracy > bestF.Accuracy || f.Accuracy == bestF.Accuracy && f.CostPer1k < bestF.CostPer1k
			}
			if better {
				best, bestF = slices.Clone(th), f
			}
			return
		}
		for _, t := range grid {
			th[k] = t
			walk(k + 1)
		}
	}
	walk(0)
	r := Result{Thresholds: best, Fitting: bestF, Possible: best != nil}
	if best == nil {
		r.Thresholds, r.Fitting = bestAny, bestAnyF
	}
	if r.Thresholds == nil { // every choice over the cap: the cheapest, escalating nothing
		r.Thresholds = make([]float64, len(stages)-1)
		r.Fitting = Eval(stages, gold, r.Thresholds, fitting)
	}
	r.HeldOut = Eval(stages, gold, r.Thresholds, Held)
	r.Reached = r.HeldOut.Accuracy+1e-12 >= g.Target
	return r
}

// gridFor is the thresholds tried at each of n stages: 0 (only failures
// escalate) to 1 (every row escalates) in even steps, as many as
// maxCombos allows over n stages (at most 101: steps of 0.01).
func gridFor(n int) []float64 {
	if n <= 0 {
		return nil
	}
	steps := int(math.Floor(math.Pow(maxCombos, 1/float64(n))))
	steps = max(3, min(101, steps))
	out := make([]float64, steps)
	for i := range out {
		out[i] = math.Round(float64(i)/float64(steps-1)*1000) / 1000
	}
	return out
}
