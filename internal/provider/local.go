package provider

import (
	"context"
	"math"
	"strings"
	"unicode"

	"github.com/jonreiter/govader"
)

// LocalModel is the model column value for rows the embedded model answers.
const LocalModel = "local/vader"

// Local is the embedded offline model: VADER, a lexicon and rule-based
// sentiment model that needs no network, no token and no weights download.
type Local struct {
	sia *govader.SentimentIntensityAnalyzer
}

// NewLocal builds the offline model (it loads its lexicon from the binary).
func NewLocal() *Local {
	return &Local{sia: govader.NewSentimentIntensityAnalyzer()}
}

// Model implements Classifier.
func (l *Local) Model() string { return LocalModel }

// Classify implements Classifier.
func (l *Local) Classify(ctx context.Context, call Call) (Answer, error) {
	texts := call.Texts
	out := make([]Prediction, len(texts))
	for i, t := range texts {
		if err := ctx.Err(); err != nil {
			return Answer{}, err
		}
		s := l.score(t)
		out[i] = vaderLabel(s)
		// The three: VADER's shares of the text that read positive,
		// negative and neutral.
		out[i].Scores = []LabelScore{{"POSITIVE", s.Positive}, {"NEGATIVE", s.Negative}, {"NEUTRAL", s.Neutral}}
		SortScores(out[i].Scores)
	}
	return Answer{Predictions: out, Model: LocalModel}, nil
}

// score rates a text sentence by sentence and averages, as VADER's authors
// advise for paragraphs: VADER's negation looks three words back across
// sentence ends, so "...never came. Very disappointed." would read positive.
func (l *Local) score(text string) govader.Sentiment {
	var sum govader.Sentiment
	n := 0
	for _, s := range sentences(text) {
		p := l.sia.PolarityScores(s)
		sum.Compound += p.Compound
		sum.Neutral += p.Neutral
		sum.Positive += p.Positive
		sum.Negative += p.Negative
		n++
	}
	if n == 0 {
		return govader.Sentiment{Neutral: 1}
	}
	sum.Compound /= float64(n)
	sum.Neutral /= float64(n)
	sum.Positive /= float64(n)
	sum.Negative /= float64(n)
	return sum
}

// sentences splits after runs of . ! ? followed by a space, and at line
// ends, keeping the punctuation (VADER reads "!" as emphasis).
func sentences(text string) []string {
	var out []string
	start := 0
	rs := []rune(text)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		end := -1
		switch {
		case r == '\n':
			end = i
		case (r == '.' || r == '!' || r == '?') && (i+1 == len(rs) || unicode.IsSpace(rs[i+1])):
			end = i + 1
		}
		if end < 0 {
			continue
		}
		if s := strings.TrimSpace(string(rs[start:end])); s != "" {
			out = append(out, s)
		}
		start = end
	}
	if s := strings.TrimSpace(string(rs[start:])); s != "" {
		out = append(out, s)
	}
	return out
}

// vaderLabel turns VADER's compound score in [-1,1] into a label with a
// score in [0,1], using VADER's customary ±0.05 thresholds. For POSITIVE and
// NEGATIVE the score is how far the compound leans that way, mapped to
// [0.5,1]; for NEUTRAL it is the neutral share of the text.
func vaderLabel(s govader.Sentiment) Prediction {
	c := s.Compound
	switch {
	case math.IsNaN(c):
		return Prediction{Label: "NEUTRAL", Score: 0}
	case c >= 0.05:
		return Prediction{Label: "POSITIVE", Score: (1 + c) / 2}
	case c <= -0.05:
		return Prediction{Label: "NEGATIVE", Score: (1 - c) / 2}
	}
	return Prediction{Label: "NEUTRAL", Score: math.Max(0, math.Min(1, s.Neutral))}
}
