package batchrun

import (
	"context"
	"fmt"

	"github.com/hfsent/hfsent/internal/batchapi"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// readFiles reads an ended batch's output and error files, as streams,
// into its rows' slots. A line that is not a result, or that names a row
// the batch never held, stops the run with an error naming the file and
// the line: no answer is given to a row it may not be the answer of.
func (r *Runner) readFiles(ctx context.Context, b *batch, got batchapi.Batch) error {
	for _, f := range []struct{ what, id string }{{"output", got.OutputFileID}, {"error", got.ErrorFileID}} {
		if f.id == "" {
			continue
		}
		if err := r.readFile(ctx, b, f.what, f.id); err != nil {
			return err
		}
	}
	b.read = true
	return nil
}

func (r *Runner) readFile(ctx context.Context, b *batch, what, id string) error {
	rc, err := r.cfg.API.Content(ctx, id)
	if err != nil {
		return fmt.Errorf("downloading the %s file %s of batch %s: %w", what, id, b.id, err)
	}
	defer rc.Close()
	err = batchapi.ReadResults(rc, MaxResultLine, func(line int, res batchapi.Result) error {
		return r.assign(b, res, line)
	})
	if err != nil {
		return fmt.Errorf("the %s file %s of batch %s: %w; nothing of it was taken from the line named on (the batch is still recorded: fix or remove %s and --resume)",
			what, id, b.id, err, r.cfg.Journal)
	}
	return nil
}

// assign gives one result line to its row.
func (r *Runner) assign(b *batch, res batchapi.Result, line int) error {
	seq, err := batchapi.ParseCustomID(res.CustomID)
	if err != nil || !b.rows.Has(int64(seq)) {
		return fmt.Errorf("line %d: custom_id %q is not a row this batch was sent", line, clip(res.CustomID, 40))
	}
	s := r.at(int64(seq))
	if s == nil || int(s.batch) != b.idx {
		return nil // kept from earlier results, or answered in its own later batch
	}
	if s.state != pending {
		return fmt.Errorf("line %d: custom_id %q is answered twice", line, res.CustomID)
	}
	switch {
	case res.StatusCode == 200:
		p, err := r.cfg.Chat.ReadAnswer(res.Body)
		if err != nil {
			r.setError(s, asError(err))
			return nil
		}
		r.setAnswer(s, p)
	case res.StatusCode != 0:
		r.setError(s, r.cfg.Chat.ReadError(res.StatusCode, res.Body))
	case res.ErrCode == "batch_expired" || res.ErrCode == "batch_cancelled":
		// Never run: as absent from the output, it is sent again.
	default:
		r.setError(s, &provider.Error{Outcome: outcome.UpstreamFailed, NoRetry: true,
			Msg: "the batch did not run it: " + clip(res.ErrCode+": "+res.ErrMessage, 200)})
	}
	return nil
}

func asError(err error) *provider.Error {
	if pe, ok := provider.AsError(err); ok {
		return pe
	}
	return &provider.Error{Outcome: outcome.UpstreamPayload, Msg: err.Error(), NoRetry: true}
}
