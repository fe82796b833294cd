package quality

import (
	"encoding/csv"
	"io"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/results"
)

// Tally is what a run counts of its rows as they are written, in order:
// the evaluation against the gold labels, the rows marked for review, and
// the review file. It is not safe for concurrent use (a run writes from
// one goroutine).
type Tally struct {
	// Eval, when set, compares every row with its gold label (Row.Gold).
	Eval *Eval
	// Multi, when set, compares every row's labels with its gold cell's
	// as sets (--multi-label).
	Multi *MultiEval
	// Reviewed counts the rows marked for review.
	Reviewed int64
	// Review, when set, receives every row marked for review.
	Review *ReviewWriter
}

// Add counts rows as they are written.
func (t *Tally) Add(rows []results.Row) error {
	for i := range rows {
		r := &rows[i]
		if t.Eval != nil {
			t.Eval.Add(ObsOf(*r))
		}
		if t.Multi != nil {
			t.Multi.Add(ObsOf(*r))
		}
		if !r.Review {
			continue
		}
		t.Reviewed++
		if t.Review != nil {
			if err := t.Review.Write(*r); err != nil {
				return err
			}
		}
	}
	if t.Review != nil {
		return t.Review.Flush()
	}
	return nil
}

// ObsOf is a results row as the evaluation sees it: the label and score
// as written.
func ObsOf(r results.Row) Obs {
	o := Obs{Gold: r.Gold, Success: r.Outcome == outcome.Success, Label: r.Label, Score: r.Score}
	if _, has := Step(r.Score); has {
		o.Score = results.RoundScore(r.Score)
	}
	return o
}

// ReviewColumns is the header of a review file: gold is left empty for a
// person to fill in, and calibrate and --gold-column read it back.
var ReviewColumns = []string{"request_id", "label", "score", "gold", "text"}

// ReviewWriter writes the rows to review, with their text, to a CSV a
// person works through. text and label are written with the results'
// formula guard unless raw.
type ReviewWriter struct {
	cw  *csv.Writer
	raw bool
	rec []string
}

// NewReviewWriter writes the header to w.
func NewReviewWriter(w io.Writer, raw bool) (*ReviewWriter, error) {
	rw := &ReviewWriter{cw: csv.NewWriter(w), raw: raw}
	if err := rw.cw.Write(ReviewColumns); err != nil {
		return nil, err
	}
	return rw, nil
}

// Write adds one row.
func (w *ReviewWriter) Write(r results.Row) error {
	guard := results.Guard
	if w.raw {
		guard = func(s string) string { return s }
	}
	score := ""
	if _, has := Step(r.Score); has && r.Label != "" {
		score = results.FormatScore(r.Score)
	}
	w.rec = append(w.rec[:0], r.RequestID, guard(r.Label), score, "", guard(r.Text))
	return w.cw.Write(w.rec)
}

// Flush writes what is buffered.
func (w *ReviewWriter) Flush() error {
	w.cw.Flush()
	return w.cw.Error()
}
