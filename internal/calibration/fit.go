// Package calibration turns a model's score into the probability that its
// label is right, fitted on rows whose gold label is known, and keeps the
// fit in a small JSON file that says what it was fitted for (File).
//
// The method is isotonic regression (pool adjacent violators) with each
// block's rate shrunk toward a prior, then made monotone again, and read
// by linear interpolation between the blocks' centres:
//
//   - isotonic regression assumes only that a higher score is not less
//     likely right: it fits any monotone shape (the local model's neutral
//     proportion and its (1+|compound|)/2 are nothing like a logistic
//     curve, which Platt scaling would force on them);
//   - plain isotonic regression (scikit-learn's IsotonicRegression, as
//     CalibratedClassifierCV uses it) gives a block of five rows all right
//     the value 1: certainty from five rows. Each block's rate k/n is
//     taken as (k + m·p)/(n + m) instead, a Beta prior of m rows at the
//     fit's overall rate p (itself (K+1)/(N+2)), so a small block stays
//     near p and a large one keeps its own rate, and no value is ever 0 or
//     1;
//   - shrinking can reorder two blocks of different sizes, so the shrunk
//     values pass through pool adjacent violators once more: the map
//     never reverses two scores' order;
//   - between the centres of two blocks the value is interpolated
//     linearly (as scikit-learn's isotonic regression predicts), so
//     scores that differ keep their order within the fitted range rather
//     than collapsing onto steps; below the first centre and above the
//     last it is the end value.
package calibration

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/quality"
	"github.com/hfsent/hfsent/internal/results"
)

// Method names the method in the file.
const Method = "isotonic-shrunk"

// PriorRows is m, the prior's weight in rows: a block of n rows is pulled
// toward the overall rate by m/(n+m).
const PriorRows = 10

// MinLabelRows is the fewest scored rows of a label for it to have a map
// of its own; a label with fewer uses the pooled map (and calibrate warns).
const MinLabelRows = 100

// MinRows is the fewest scored rows for a fit at all.
const MinRows = 2

// Sample is one row of the fit: its label, the model's score, and whether
// the label was right.
type Sample struct {
	Label   string
	Score   float64
	Correct bool
}

// Point is one block of the fitted map: its centre (the mean score of its
// rows) and its calibrated value. It is written as [x, y].
type Point [2]float64

// UnmarshalJSON reads [x, y], exactly two numbers (encoding/json would
// fill a shorter array with zeros and drop the rest of a longer one).
func (p *Point) UnmarshalJSON(b []byte) error {
	var v []float64
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if len(v) != 2 {
		return fmt.Errorf("a point is [score, value], got %d numbers", len(v))
	}
	*p = Point{v[0], v[1]}
	return nil
}

// Curve is a fitted map: points with increasing x and y, and the rows it
// was fitted on.
type Curve struct {
	Rows    int64   `json:"rows"`
	Correct int64   `json:"correct"`
	Points  []Point `json:"points"`
}

// fitCurve fits one map to samples (every score a number in [0, 1]).
func fitCurve(samples []Sample) Curve {
	s := slices.Clone(samples)
	slices.SortFunc(s, func(a, b Sample) int { return cmp.Compare(a.Score, b.Score) })
	c := Curve{Rows: int64(len(s))}
	// One block per distinct score: rows with the same score must get the
	// same value.
	var blocks []block
	for _, x := range s {
		if x.Correct {
			c.Correct++
		}
		if n := len(blocks); n > 0 && blocks[n-1].hi == x.Score {
			blocks[n-1].add(x)
			continue
		}
		blocks = append(blocks, block{lo: x.Score, hi: x.Score})
		blocks[len(blocks)-1].add(x)
	}
	for i := range blocks {
		blocks[i].y = blocks[i].rate()
	}
	blocks = pool(blocks)
	p := (float64(c.Correct) + 1) / (float64(c.Rows) + 2)
	for i := range blocks {
		b := &blocks[i]
		b.y = (b.k + PriorRows*p) / (b.n + PriorRows)
	}
	for _, b := range pool(blocks) {
		c.Points = append(c.Points, Point{b.sum / b.n, b.y})
	}
	return c
}

// block is a run of rows pooled together: their count n, right ones k,
// score range and sum, and value y.
type block struct {
	n, k, sum, y float64
	lo, hi       float64
}

func (b *block) add(s Sample) {
	b.n++
	b.sum += s.Score
	if s.Correct {
		b.k++
	}
}

func (b block) rate() float64 { return b.k / b.n }

// pool is pool adjacent violators: neighbours whose values are not
// increasing are merged, their value the mean weighted by rows, until
// every value is above the one before.
func pool(in []block) []block {
	out := make([]block, 0, len(in))
	for _, b := range in {
		out = append(out, b)
		for n := len(out); n > 1 && out[n-2].y >= out[n-1].y; n = len(out) {
			a, c := out[n-2], out[n-1]
			m := block{n: a.n + c.n, k: a.k + c.k, sum: a.sum + c.sum, lo: a.lo, hi: c.hi}
			m.y = (a.y*a.n + c.y*c.n) / m.n
			out = append(out[:n-2], m)
		}
	}
	return out
}

// at is the curve's value at score x: linear between the points' centres,
// the end value beyond them.
func (c Curve) at(x float64) float64 {
	p := c.Points
	i, _ := slices.BinarySearchFunc(p, x, func(pt Point, x float64) int { return cmp.Compare(pt[0], x) })
	switch {
	case i == 0:
		return p[0][1]
	case i == len(p):
		return p[len(p)-1][1]
	}
	a, b := p[i-1], p[i]
	return a[1] + (b[1]-a[1])*(x-a[0])/(b[0]-a[0])
}

// ErrTooFew is Fit's error when there are not MinRows rows with a score.
var ErrTooFew = errors.New("too few rows to fit a calibration")

// Fit fits a calibration on samples for the run f describes: a map per
// label with MinLabelRows rows or more, and a pooled map for the others
// (and for labels the fit never met). Samples without a score (NaN) are
// not used.
func Fit(samples []Sample, f For) (*File, error) {
	byLabel := map[string][]Sample{}
	var all []Sample
	for _, s := range samples {
		if math.IsNaN(s.Score) || s.Score < 0 || s.Score > 1 {
			continue
		}
		k := quality.Key(s.Label)
		byLabel[k] = append(byLabel[k], s)
		all = append(all, s)
	}
	if len(all) < MinRows {
		return nil, ErrTooFew
	}
	out := &File{Format: Format, For: f, Method: Method, PriorRows: PriorRows, MinLabelRows: MinLabelRows,
		Rows: int64(len(all)), Pooled: fitCurve(all), Labels: map[string]Curve{}, Counts: map[string]int64{}}
	for k, s := range byLabel {
		out.Counts[k] = int64(len(s))
		if len(s) >= MinLabelRows {
			out.Labels[k] = fitCurve(s)
		}
	}
	return out, nil
}

// Calibrate is the calibrated probability that label, given with score
// raw, is right: the label's map, else the pooled one. A NaN stays NaN.
func (f *File) Calibrate(label string, raw float64) float64 {
	if math.IsNaN(raw) {
		return raw
	}
	c, ok := f.Labels[quality.Key(label)]
	if !ok {
		c = f.Pooled
	}
	return c.at(raw)
}

// SampleOf is a results row as a fit takes it, with its gold label: a
// success with a label, a non-blank gold label and a score, the model's
// own (raw_score) when the row was written calibrated (raw). ok is false
// for a row the fit cannot use.
func SampleOf(r results.Row, gold string, raw bool) (Sample, bool) {
	score := r.Score
	if raw {
		score = r.RawScore
	}
	if r.Outcome != outcome.Success || r.Label == "" || quality.Key(gold) == "" || math.IsNaN(score) {
		return Sample{}, false
	}
	return Sample{Label: r.Label, Score: score, Correct: quality.Same(r.Label, gold)}, true
}
