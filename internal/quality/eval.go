package quality

import (
	"fmt"
	"math"
	"slices"
)

// MaxLabels bounds the distinct labels (gold and predicted together) one
// evaluation counts, so that memory stays bounded whatever a column holds:
// a gold column of free text (the wrong --gold-column) stops the
// evaluation, rather than growing a matrix without end.
const MaxLabels = 1000

// Why a row was not scored, as the summaries name it. A row that did not
// end in success (it has no label of the primary model's: failed, or
// answered by the fallback model) is counted as that even when its gold
// label is blank too.
const (
	UnscoredNotSuccess = "not_success"
	UnscoredBlankGold  = "blank_gold"
)

// Obs is one row as the evaluation sees it: its gold label, its outcome,
// the label and score written for it.
type Obs struct {
	Gold    string
	Success bool    // the row ended success (not fallback, not a failure)
	Label   string  // as written (after --label-map)
	Score   float64 // as written: rounded to 4 places; NaN when blank
}

// Eval counts rows against their gold labels, in bounded memory: the
// confusion counts of at most MaxLabels labels and a histogram of the
// scores at the 4 places results are written with. The zero value is
// ready; it is not safe for concurrent use.
type Eval struct {
	index    map[string]int // Key → position in names
	names    []string       // Keys, in the order first met
	conf     map[[2]int]int64
	scored   int64
	correct  int64
	unscored map[string]int64
	// hist counts scored rows by score (round(score×10^4), 0..10^4) and
	// the correct ones among them; rows without a score are noScore.
	hist              *scoreHist
	noScore, noScore1 int64
	tooMany           bool
}

// scoreHist holds the rows by score at the resolution results are written.
type scoreHist struct{ n, ok [scoreSteps + 1]int64 }

// scoreSteps is how many steps of 10^-4 there are between 0 and 1.
const scoreSteps = 10000

// Add counts one row.
func (e *Eval) Add(o Obs) {
	switch {
	case !o.Success || o.Label == "":
		e.unscore(UnscoredNotSuccess)
		return
	case Key(o.Gold) == "":
		e.unscore(UnscoredBlankGold)
		return
	}
	if e.tooMany {
		return
	}
	g, p := e.label(o.Gold), e.label(o.Label)
	if g < 0 || p < 0 {
		e.tooMany = true
		return
	}
	if e.conf == nil {
		e.conf = map[[2]int]int64{}
	}
	e.conf[[2]int{g, p}]++
	e.scored++
	ok := g == p
	if ok {
		e.correct++
	}
	step, has := Step(o.Score)
	if !has {
		e.noScore++
		if ok {
			e.noScore1++
		}
		return
	}
	if e.hist == nil {
		e.hist = &scoreHist{}
	}
	e.hist.n[step]++
	if ok {
		e.hist.ok[step]++
	}
}

// Step is a score at the resolution results are written, in steps of
// 10^-4 (0..10^4); has is false for a blank (NaN) score. A score outside
// [0, 1] is held to it.
func Step(score float64) (step int, has bool) {
	if math.IsNaN(score) {
		return 0, false
	}
	return int(math.Round(min(max(score, 0), 1) * scoreSteps)), true
}

func (e *Eval) unscore(why string) {
	if e.unscored == nil {
		e.unscored = map[string]int64{}
	}
	e.unscored[why]++
}

// label numbers a label's Key; -1 once MaxLabels are taken.
func (e *Eval) label(s string) int {
	k := Key(s)
	if i, ok := e.index[k]; ok {
		return i
	}
	if len(e.names) >= MaxLabels {
		return -1
	}
	if e.index == nil {
		e.index = map[string]int{}
	}
	e.index[k] = len(e.names)
	e.names = append(e.names, k)
	return len(e.names) - 1
}

// Err is set when the evaluation stopped: more than MaxLabels labels.
func (e *Eval) Err() error {
	if e.tooMany {
		return fmt.Errorf("the gold labels and the answers hold more than %d distinct labels: is the gold column the right one?", MaxLabels)
	}
	return nil
}

// Scored is the number of rows compared with a gold label so far.
func (e *Eval) Scored() int64 { return e.scored }

// sortedLabels are the labels met, in sorted order, with each one's
// position in names.
func (e *Eval) sortedLabels() ([]string, []int) {
	labels := slices.Clone(e.names)
	slices.Sort(labels)
	at := make([]int, len(labels))
	for i, l := range labels {
		at[i] = e.index[l]
	}
	return labels, at
}
