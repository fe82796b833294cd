package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
)

// zeroShotPayload is a zero-shot request: {"inputs": TEXT or [TEXTS],
// "parameters": {"candidate_labels": [...]}}, with hypothesis_template
// when template is not "".
func zeroShotPayload(texts, labels []string, template string, multi bool) ([]byte, error) {
	var inputs any = texts
	if len(texts) == 1 {
		inputs = texts[0]
	}
	params := map[string]any{"candidate_labels": labels}
	if template != "" {
		params["hypothesis_template"] = template
	}
	if multi {
		// Each label scored on its own (entailment against contradiction),
		// not shared out among them.
		params["multi_label"] = true
	}
	return json.Marshal(map[string]any{"inputs": inputs, "parameters": params})
}

// zeroShotAnswer is the older zero-shot answer: the labels sorted by score.
type zeroShotAnswer struct {
	Sequence *string   `json:"sequence"`
	Labels   []string  `json:"labels"`
	Scores   []float64 `json:"scores"`
}

// ParseZeroShot reads a zero-shot answer for n inputs in either shape the
// API has sent: a list of {label, score} per input (the router's; nested
// for a batch), or {sequence, labels, scores} (a list of them for a
// batch). The best label must be one of labels.
func ParseZeroShot(body []byte, n int, labels []string) ([]Prediction, error) {
	body = bytes.TrimSpace(body)
	var preds []Prediction
	switch {
	case len(body) > 0 && body[0] == '{':
		var a zeroShotAnswer
		if err := json.Unmarshal(body, &a); err != nil {
			return nil, errors.New("answer is not a zero-shot classification")
		}
		p, err := a.best()
		if err != nil {
			return nil, err
		}
		preds = []Prediction{p}
	default:
		var list []zeroShotAnswer
		if json.Unmarshal(body, &list) == nil && len(list) > 0 && list[0].Labels != nil {
			for i, a := range list {
				p, err := a.best()
				if err != nil {
					return nil, fmt.Errorf("result %d: %w", i+1, err)
				}
				preds = append(preds, p)
			}
			break
		}
		var err error
		if preds, err = ParseAnswer(body, n); err != nil {
			return nil, err
		}
	}
	if len(preds) != n {
		return nil, fmt.Errorf("answer has %d results for %d inputs", len(preds), n)
	}
	for _, p := range preds {
		if !slices.Contains(labels, p.Label) {
			return nil, fmt.Errorf("label %q is not one of --labels", summarise(p.Label))
		}
	}
	return preds, nil
}

func (a zeroShotAnswer) best() (Prediction, error) {
	if len(a.Labels) == 0 || len(a.Labels) != len(a.Scores) {
		return Prediction{}, errors.New("labels and scores missing or of different lengths")
	}
	top := -1
	for i, s := range a.Scores {
		if math.IsNaN(s) || s < 0 || s > 1.000001 {
			return Prediction{}, errors.New("score outside [0,1]")
		}
		if top < 0 || s > a.Scores[top] {
			top = i
		}
	}
	scores := make([]LabelScore, len(a.Labels))
	for i, l := range a.Labels {
		scores[i] = LabelScore{Label: l, Score: math.Min(a.Scores[i], 1)}
	}
	SortScores(scores)
	return Prediction{Label: a.Labels[top], Score: math.Min(a.Scores[top], 1), Scores: scores}, nil
}
