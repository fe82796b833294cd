package quality

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hfsent/hfsent/internal/provider"
)

// MultiEval counts multi-label rows (--multi-label) against their gold
// labels: a gold cell and a written label each hold labels joined by
// provider.MultiSeparator, compared as sets (order, case and spaces
// aside, as Key compares labels). Memory holds the counts of at most
// MaxLabels labels. The zero value is ready; it is not safe for
// concurrent use.
type MultiEval struct {
	index    map[string]int
	names    []string
	tp       []int64
	fp       []int64
	fn       []int64
	scored   int64
	exact    int64
	wrong    int64 // labels in one set and not the other, over every row
	unscored map[string]int64
	tooMany  bool
}

// MultiReport is what a multi-label evaluation found. The figures are
// null when no row was scored.
type MultiReport struct {
	// MicroF1 is F1 over every (row, label) pair: 2TP / (2TP + FP + FN).
	MicroF1 *float64 `json:"micro_f1"`
	// MacroF1 is the mean of each label's F1 over the labels met (in the
	// gold cells or the answers), 0 for a label never answered or never
	// in a gold cell.
	MacroF1 *float64 `json:"macro_f1"`
	// SubsetAccuracy is the share of rows whose labels are exactly the
	// gold ones.
	SubsetAccuracy *float64 `json:"subset_accuracy"`
	// HammingLoss is the share of (row, label) pairs got wrong, over the
	// labels met: the labels in one set and not the other, divided by rows
	// × labels met.
	HammingLoss *float64              `json:"hamming_loss"`
	PerLabel    map[string]LabelScore `json:"per_label"`
	Scored      int64                 `json:"scored"`
	Exact       int64                 `json:"exact"`
	Unscored    map[string]int64      `json:"unscored"`
	Labels      []string              `json:"labels"`
}

// Add counts one row.
func (m *MultiEval) Add(o Obs) {
	switch {
	case !o.Success || o.Label == "":
		m.unscore(UnscoredNotSuccess)
		return
	case Key(o.Gold) == "":
		m.unscore(UnscoredBlankGold)
		return
	}
	if m.tooMany {
		return
	}
	gold, got := m.set(o.Gold), m.set(o.Label)
	if gold == nil || got == nil {
		m.tooMany = true
		return
	}
	m.scored++
	diff := 0
	for _, i := range got {
		if slices.Contains(gold, i) {
			m.tp[i]++
		} else {
			m.fp[i]++
			diff++
		}
	}
	for _, i := range gold {
		if !slices.Contains(got, i) {
			m.fn[i]++
			diff++
		}
	}
	m.wrong += int64(diff)
	if diff == 0 {
		m.exact++
	}
}

func (m *MultiEval) unscore(why string) {
	if m.unscored == nil {
		m.unscored = map[string]int64{}
	}
	m.unscored[why]++
}

// set is a cell's labels by index, each once; nil past MaxLabels.
func (m *MultiEval) set(cell string) []int {
	var out []int
	for _, p := range strings.Split(cell, provider.MultiSeparator) {
		k := Key(p)
		if k == "" {
			continue
		}
		i, ok := m.index[k]
		if !ok {
			if len(m.names) >= MaxLabels {
				return nil
			}
			if m.index == nil {
				m.index = map[string]int{}
			}
			i = len(m.names)
			m.index[k] = i
			m.names = append(m.names, strings.TrimSpace(p))
			m.tp, m.fp, m.fn = append(m.tp, 0), append(m.fp, 0), append(m.fn, 0)
		}
		if !slices.Contains(out, i) {
			out = append(out, i)
		}
	}
	if out == nil {
		out = []int{}
	}
	return out
}

// Err is why the evaluation stopped: more than MaxLabels labels.
func (m *MultiEval) Err() error {
	if m.tooMany {
		return fmt.Errorf("the gold labels and the answers hold more than %d distinct labels: is the gold column the right one?", MaxLabels)
	}
	return nil
}

// Report is the evaluation's figures.
func (m *MultiEval) Report() MultiReport {
	r := MultiReport{Scored: m.scored, Exact: m.exact, PerLabel: map[string]LabelScore{},
		Unscored: map[string]int64{UnscoredNotSuccess: m.unscored[UnscoredNotSuccess], UnscoredBlankGold: m.unscored[UnscoredBlankGold]}}
	r.Labels = slices.Clone(m.names)
	slices.Sort(r.Labels)
	if m.scored == 0 {
		return r
	}
	var tp, fp, fn int64
	macro := 0.0
	for i, name := range m.names {
		ls := LabelScore{Support: m.tp[i] + m.fn[i], Predicted: m.tp[i] + m.fp[i]}
		ls.Precision, ls.Recall = ratio(m.tp[i], ls.Predicted), ratio(m.tp[i], ls.Support)
		ls.F1 = ratio(2*m.tp[i], 2*m.tp[i]+m.fp[i]+m.fn[i])
		r.PerLabel[name] = ls
		macro += ls.F1
		tp, fp, fn = tp+m.tp[i], fp+m.fp[i], fn+m.fn[i]
	}
	r.MicroF1 = ptr(ratio(2*tp, 2*tp+fp+fn))
	r.MacroF1 = ptr(macro / float64(len(m.names)))
	r.SubsetAccuracy = ptr(ratio(m.exact, m.scored))
	r.HammingLoss = ptr(ratio(m.wrong, m.scored*int64(len(m.names))))
	return r
}
