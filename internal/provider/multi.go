package provider

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/hfsent/hfsent/internal/outcome"
)

// MultiSeparator joins a row's labels under --multi-label, in the label
// set's order: "billing;late".
const MultiSeparator = ";"

// ChooseMulti is a multi-label answer from every label's own score: the
// labels whose scores reach threshold, in order's order (then, for labels
// order does not hold, in the order of their names), joined by
// MultiSeparator, and the lowest of their scores. A text gets at least one
// label: when none reaches the threshold, the best one, with its score
// (under the threshold, so a review or a reader sees it is unsure).
func ChooseMulti(scores []LabelScore, order []string, threshold float64) (label string, score float64) {
	var chosen []LabelScore
	for _, s := range scores {
		if s.Score >= threshold {
			chosen = append(chosen, s)
		}
	}
	if len(chosen) == 0 && len(scores) > 0 {
		best := scores[0]
		for _, s := range scores[1:] {
			if s.Score > best.Score {
				best = s
			}
		}
		chosen = []LabelScore{best}
	}
	rank := func(l string) int {
		if i := slices.Index(order, l); i >= 0 {
			return i
		}
		return len(order)
	}
	slices.SortStableFunc(chosen, func(a, b LabelScore) int {
		if ra, rb := rank(a.Label), rank(b.Label); ra != rb {
			return ra - rb
		}
		return strings.Compare(a.Label, b.Label)
	})
	names := make([]string, len(chosen))
	score = math.Inf(1)
	for i, c := range chosen {
		names[i] = c.Label
		score = math.Min(score, c.Score)
	}
	if len(chosen) == 0 {
		score = math.NaN()
	}
	return strings.Join(names, MultiSeparator), score
}

// chooseMulti makes each prediction a multi-label one (ChooseMulti) from
// its scores.
func chooseMulti(preds []Prediction, order []string, threshold float64) {
	for i := range preds {
		if len(preds[i].Scores) > 0 {
			preds[i].Label, preds[i].Score = ChooseMulti(preds[i].Scores, order, threshold)
		}
	}
}

// multiSchema is the structured output of a multi-label chat answer: an
// object whose labels are an array of the labels' enum, at least one
// unless none may be.
func multiSchema(labels []string, allowNone bool) json.RawMessage {
	enum, _ := json.Marshal(labels)
	minItems := 1
	if allowNone {
		minItems = 0
	}
	b, _ := json.Marshal(map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "labels", "strict": true,
		"schema": map[string]any{"type": "object", "required": []string{"labels"}, "additionalProperties": false,
			"properties": map[string]any{"labels": map[string]any{"type": "array", "minItems": minItems,
				"items": map[string]any{"type": "string", "enum": json.RawMessage(enum)}}}}}})
	return b
}

// multiLabels reads a multi-label chat answer: {"labels": [...]}, or
// plain text naming labels separated by commas, semicolons or lines. ok
// is false when a part names no label, or (unless allowNone) none is
// named. The labels are returned by their index, in the set's order.
func (c *Chat) multiLabels(content string) (idx []int, form answerForm, ok bool) {
	t := strings.TrimSpace(stripThink(content))
	var parts []string
	form = formText
	if strings.HasPrefix(t, "{") {
		form = formJSON
		var doc struct {
			Labels []string `json:"labels"`
			Label  *string  `json:"label"` // a server that answered one
		}
		if json.Unmarshal([]byte(t), &doc) != nil {
			return nil, form, false
		}
		parts = doc.Labels
		if doc.Labels == nil && doc.Label != nil {
			parts = []string{*doc.Label}
		}
	} else {
		parts = strings.FieldsFunc(t, func(r rune) bool { return r == ',' || r == ';' || r == '\n' })
	}
	seen := make([]bool, len(c.labels))
	for _, p := range parts {
		i, _ := c.match(p)
		if i < 0 {
			return nil, form, false
		}
		seen[i] = true
	}
	for i, s := range seen {
		if s {
			idx = append(idx, i)
		}
	}
	return idx, form, len(idx) > 0 || c.cfg.AllowNone
}

// parseMulti reads a multi-label answer: its labels joined in the set's
// order, with no score (the logprobs of an array's items are not one
// label's probability).
func (c *Chat) parseMulti(a chatAnswer, o sendOpts) (Prediction, error) {
	idx, form, ok := c.multiLabels(a.content)
	ignored := o.constraint == ConstrainJSONSchema && form == formText ||
		o.constraint != ConstrainOff && o.constraint != ConstrainJSONSchema && !ok
	if ignored {
		c.ignoredOnce.Do(func() {
			c.logWarn(fmt.Sprintf("%s answered without the constraint asked for (--constrain %s, %s): it seems to ignore it; answers are read as plain text",
				c.base.host, o.constraint, o.constraint.Field()))
		})
	}
	if !ok {
		return Prediction{}, &Error{Outcome: outcome.UpstreamUnlabelled, Status: 200, Usage: a.usage,
			Answer: clip(a.content, maxAnswer), NoRetry: o.constraint != ConstrainOff && !ignored,
			Msg: fmt.Sprintf("the answer names no list of --labels: %q", summarise(a.content, c.cfg.Token))}
	}
	names := make([]string, len(idx))
	for i, j := range idx {
		names[i] = c.labels[j]
	}
	return Prediction{Label: strings.Join(names, MultiSeparator), Score: math.NaN(), Usage: a.usage}, nil
}
