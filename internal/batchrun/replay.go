package batchrun

import (
	"context"
	"fmt"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/results"
)

// Replay is the classifier the engine asks after the batches have ended:
// it answers each text with what its batch answered, so that every row is
// written, cached, priced and counted the way a live call's is. A text no
// batch answered is upstream_timeout (not final: --resume submits it
// again), or, with Live, a live call through the usual guard.
type Replay struct {
	r *Runner
	// Live, when set (--batch-fallback live), answers the rows no batch
	// answered with a live call.
	Live func(ctx context.Context, text string) (provider.Prediction, error)
}

// Replay is the run's answers as a classifier.
func (r *Runner) Replay() *Replay { return &Replay{r: r} }

func (p *Replay) Model() string { return p.r.cfg.Chat.Model() }

// CheckText refuses what the live client would.
func (p *Replay) CheckText(text string) error { return p.r.cfg.Chat.CheckText(text) }

// Classify answers each text from its batch.
func (p *Replay) Classify(ctx context.Context, call provider.Call) (provider.Answer, error) {
	ans := provider.Answer{Model: p.Model()}
	for _, t := range call.Texts {
		pr, err := p.one(ctx, t)
		if err != nil {
			return provider.Answer{}, err
		}
		ans.Predictions = append(ans.Predictions, pr)
	}
	return ans, nil
}

func (p *Replay) one(ctx context.Context, text string) (provider.Prediction, error) {
	var s *slot
	if seq, ok := p.r.byText[keyOf(text)]; ok {
		s = p.r.at(int64(seq))
	}
	switch {
	case s == nil && p.r.cfg.CancelRunning:
		return provider.Prediction{}, &provider.Error{Outcome: outcome.NotAttempted, NoRetry: true,
			Msg: "not submitted: --batch-cancel submits nothing; --resume without it submits it"}
	case s == nil:
		return provider.Prediction{}, &provider.Error{Outcome: outcome.NotAttempted, NoRetry: true,
			Msg: "not submitted in any batch; --resume submits it"}
	case s.state == answered:
		pr := p.r.prediction(s)
		if err := p.r.cfg.Chat.Truncated(text, pr.Usage); err != nil {
			return provider.Prediction{}, err
		}
		return pr, nil
	case s.state == failed:
		return provider.Prediction{}, p.r.errs[s.err].Clone()
	case p.Live != nil && s.state == missing:
		return p.Live(ctx, text)
	}
	return provider.Prediction{}, &provider.Error{Outcome: outcome.UpstreamTimeout, NoRetry: true,
		Msg: fmt.Sprintf("no batch answered it in %d submissions (expired or cancelled); --resume submits it again, or --batch-fallback live asks it live", s.subs)}
}

// Attempts is the number of batches row seq was submitted in (0: none).
func (r *Runner) Attempts(seq int64) int {
	if s := r.at(seq); s != nil {
		return int(s.subs)
	}
	return 0
}

// Sink wraps the results sink so that a row answered from a batch counts
// its submissions as its attempts.
func (r *Runner) Sink(inner interface{ Write([]results.Row) error }) *Sink {
	return &Sink{r: r, inner: inner}
}

// Sink is the engine's sink in front of the results file.
type Sink struct {
	r     *Runner
	inner interface{ Write([]results.Row) error }
}

func (s *Sink) Write(rows []results.Row) error {
	for i := range rows {
		if n := s.r.Attempts(rows[i].Seq); n > 0 && rows[i].Attempts > 0 && !rows[i].Cached {
			rows[i].Attempts = n
		}
	}
	return s.inner.Write(rows)
}
