package quality

import (
	"math"
	"strings"

	"github.com/hfsent/hfsent/internal/provider"

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
	// Calibration, when set, makes an answer's score (success or
	// fallback) the calibrated probability and keeps the model's in
	// RawScore. Each stage of a cascade has its own Answers, with its own
	// calibration: a row is applied the Answers of the stage that
	// answered it.
	Calibration Calibrator
	// Uncalibrated: the run writes calibrated scores, but this stage has
	// no calibration (a --fallback-model behind a calibrated primary): its
	// score would not mean what the others' do, so it is left blank
	// (RawScore keeps it), and such a row goes to review.
	Uncalibrated bool
	// Review sets Row.Review on every row whose score (calibrated, when
	// there is a calibration) is under ReviewBelow, or that has none.
	Review      bool
	ReviewBelow float64
	// Multi: a row's label is several joined by provider.MultiSeparator
	// (--multi-label), each mapped on its own.
	Multi bool
}

// Active reports whether a changes anything.
func (a *Answers) Active() bool {
	return a != nil && (!a.Map.Empty() || a.Calibration != nil || a.Uncalibrated || a.Review)
}

// Apply changes r as the run writes it.
func (a *Answers) Apply(r *results.Row) {
	if r.Label != "" {
		r.Label = a.mapLabel(r.Label)
	}
	if len(r.Scores) > 0 && !a.Map.Empty() {
		// A copy: the response cache and dedupe keep the model's answer.
		s := make([]results.LabelScore, len(r.Scores))
		for i, ls := range r.Scores {
			s[i] = results.LabelScore{Label: a.Map.Apply(ls.Label), Score: ls.Score}
		}
		r.Scores = s
	}
	if a.Calibration != nil || a.Uncalibrated {
		r.RawScore = r.Score
		switch {
		case r.Label == "" || math.IsNaN(r.Score):
			r.RawScore = math.NaN()
		case a.Calibration != nil && r.Outcome.OK():
			r.Score = a.Calibration.Calibrate(r.Label, r.Score)
		default:
			r.Score = math.NaN()
		}
	}
	if a.Review {
		r.Review = NeedsReview(*r, a.ReviewBelow)
	}
}

// mapLabel is a row's label under the map: each of a multi-label row's
// labels on its own.
func (a *Answers) mapLabel(label string) string {
	if !a.Multi || a.Map.Empty() {
		return a.Map.Apply(label)
	}
	parts := strings.Split(label, provider.MultiSeparator)
	for i, p := range parts {
		parts[i] = a.Map.Apply(p)
	}
	return strings.Join(parts, provider.MultiSeparator)
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
