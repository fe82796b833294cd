package engine

import (
	"testing"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/results"
)

// The dedupe window keeps an answer's label scores only when the run
// writes them (KeepScores: --top-k, --multi-label): kept for every run,
// they grew a 300,000-row fill's peak memory by some 8 MiB (issue 31).
func TestRememberKeepsScoresOnlyWhenAsked(t *testing.T) {
	res := results.Row{Outcome: outcome.Success, Label: "joy", Model: "m", Score: 0.7,
		Scores: []results.LabelScore{{Label: "joy", Score: 0.7}, {Label: "anger", Score: 0.3}}}
	for _, keep := range []bool{false, true} {
		p := &Pipeline{cfg: Config{KeepScores: keep}}
		a, ok := p.remember(res)
		if !ok {
			t.Fatal("a success is not remembered")
		}
		if got := len(a.scores); (got > 0) != keep {
			t.Fatalf("KeepScores=%t: the remembered answer keeps %d scores", keep, got)
		}
	}
}
