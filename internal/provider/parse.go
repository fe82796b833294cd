package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

type labelScore struct {
	Label *string  `json:"label"`
	Score *float64 `json:"score"`
}

// ErrFlatBatch is ParseAnswer's error for a flat list answering more than
// one input.
var ErrFlatBatch = errors.New("a flat list of labels answers one text, not a batch")

// ParseAnswer reads a text-classification answer for n inputs. It accepts the
// nested form the HF API sends ([[{label,score},...], ...], one inner list per
// input) and the flat form other servers send for a single input
// ([{label,score},...]: its candidate labels). For each input the
// highest-scoring label wins.
//
// A flat list is never mapped onto more than one input: it cannot be told
// apart from the candidate labels of one input. text-embeddings-inference
// reads {"inputs": ["a", "b"]} as ONE pair of texts and answers the pair's
// labels, sorted by score, flat; for a two-label model that list has as
// many entries as inputs, and reading it as one label per input would give
// the second text the least likely label. Such an answer is ErrFlatBatch
// (the batch is split and each text asked alone).
func ParseAnswer(body []byte, n int) ([]Prediction, error) {
	if n < 1 {
		return nil, errors.New("no inputs")
	}
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '[' {
		return nil, errors.New("answer is not a JSON list")
	}
	var nested [][]labelScore
	if err := json.Unmarshal(body, &nested); err == nil {
		if len(nested) != n {
			return nil, fmt.Errorf("answer has %d results for %d inputs", len(nested), n)
		}
		out := make([]Prediction, n)
		for i, cands := range nested {
			p, err := best(cands)
			if err != nil {
				return nil, fmt.Errorf("result %d: %w", i+1, err)
			}
			out[i] = p
		}
		return out, nil
	}
	var flat []labelScore
	if err := json.Unmarshal(body, &flat); err != nil {
		return nil, errors.New("answer is neither [[{label,score}]] nor [{label,score}]")
	}
	if n > 1 {
		return nil, fmt.Errorf("%w (%d inputs)", ErrFlatBatch, n)
	}
	p, err := best(flat)
	if err != nil {
		return nil, err
	}
	return []Prediction{p}, nil
}

func best(cands []labelScore) (Prediction, error) {
	if len(cands) == 0 {
		return Prediction{}, errors.New("empty list of labels")
	}
	var top Prediction
	found := false
	scores := make([]LabelScore, 0, len(cands))
	for _, c := range cands {
		if c.Label == nil || c.Score == nil {
			return Prediction{}, errors.New("label or score missing")
		}
		label := strings.TrimSpace(*c.Label)
		s := *c.Score
		if label == "" {
			return Prediction{}, errors.New("blank label")
		}
		// A little slack above 1 for float rounding on the server side.
		if math.IsNaN(s) || s < 0 || s > 1.000001 {
			return Prediction{}, errors.New("score outside [0,1]")
		}
		if !found || s > top.Score {
			top = Prediction{Label: label, Score: math.Min(s, 1)}
			found = true
		}
		scores = append(scores, LabelScore{Label: label, Score: math.Min(s, 1)})
	}
	SortScores(scores)
	top.Scores = scores
	return top, nil
}

// errorBody is the JSON error object the HF API answers with on failure.
type errorBody struct {
	Error         json.RawMessage `json:"error"`
	EstimatedTime *float64        `json:"estimated_time"`
}

// parseLoading reports whether a 503 body says the model is loading, and the
// estimated time it gave.
func parseLoading(body []byte) (bool, time.Duration) {
	var eb errorBody
	if json.Unmarshal(body, &eb) != nil {
		return false, 0
	}
	var msg string
	_ = json.Unmarshal(eb.Error, &msg)
	loading := strings.Contains(strings.ToLower(msg), "is currently loading")
	var est time.Duration
	if eb.EstimatedTime != nil && *eb.EstimatedTime > 0 && *eb.EstimatedTime < 86400 {
		est = time.Duration(*eb.EstimatedTime * float64(time.Second))
		loading = true
	}
	return loading, est
}

// ParseRetryAfter reads a Retry-After value: delta-seconds (decimals
// accepted) or an HTTP-date. It returns 0 when the value is absent or
// unusable.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if math.IsNaN(secs) || secs <= 0 || secs > 86400 {
			return 0
		}
		return time.Duration(secs * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		return clampDelay(t.Sub(now))
	}
	return 0
}

func clampDelay(d time.Duration) time.Duration {
	if d <= 0 || d > 24*time.Hour {
		return 0
	}
	return d
}

// ParseRateLimit reads the Hub's IETF-draft RateLimit header, e.g.
// `"api";r=0;t=55`: when the remaining quota r is 0, the answer is t seconds.
func ParseRateLimit(v string) time.Duration {
	if v == "" {
		return 0
	}
	remaining, reset := -1.0, -1.0
	for _, part := range strings.Split(v, ";") {
		k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil || math.IsNaN(f) {
			continue
		}
		switch strings.TrimSpace(k) {
		case "r":
			remaining = f
		case "t":
			reset = f
		}
	}
	if remaining != 0 || reset <= 0 || reset > 86400 {
		return 0
	}
	return time.Duration(reset * float64(time.Second))
}
