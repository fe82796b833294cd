package quality

import (
	"math"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/results"
)

// Calibrator turns a model's raw score for a label into the probability
// that the label is right (internal/calibration fits one).
type Calibrator interface {
	Calibrate(label string, raw float64) float64
}

// Answers is what a run does to every answer, live or from a cache, before
// it is written or returned: the label map, then the calibration, then the
// review flag. The response cache and dedupe keep the answer as the model
// gave it; only what is written changes. The zero value changes nothing.
type Answers struct {
	Map LabelMap
	// Calibration, when set, makes a success's score the calibrated
	// probability and keeps the model's in RawScore. A fallback's score
	// is the fallback model's, which the calibration was not fitted for:
	// it is left blank (RawScore keeps it), so such a row goes to review.
	Calibration Calibrator
	// Review sets Row.Review on every row whose score (calibrated, when
	// there is a calibration) is under ReviewBelow, or that has none.
	Review      bool
	ReviewBelow float64
}

// Active reports whether a changes anything.
func (a *Answers) Active() bool {
	return a != nil && (!a.Map.Empty() || a.Calibration != nil || a.Review)
}

// Apply changes r as the run writes it.
func (a *Answers) Apply(r *results.Row) {
	if r.Label != "" {
		r.Label = a.Map.Apply(r.Label)
	}
	if a.Calibration != nil {
		r.RawScore = r.Score
		switch {
		case r.Label == "" || math.IsNaN(r.Score):
			r.RawScore = math.NaN()
		case r.Outcome == outcome.Success:
			r.Score = a.Calibration.Calibrate(r.Label, r.Score)
		default:
			r.Score = math.NaN()
		}
	}
	if a.Review {
		r.Review = NeedsReview(*r, a.ReviewBelow)
	}
}

// NeedsReview reports whether a row, as written, is under the review
// threshold: its score (rounded as written) is under below, or it has
// none (no label, or a label without a score).
func NeedsReview(r results.Row, below float64) bool {
	if r.Label == "" || math.IsNaN(r.Score) {
		return true
	}
	return results.RoundScore(r.Score) < below
}
