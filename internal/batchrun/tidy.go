package batchrun

import (
	"context"
	"errors"

	"github.com/hfsent/hfsent/internal/batchapi"
)

// The files a run leaves at the provider. A provider caps an account's
// file storage (OpenAI's organisation limit), and a run's input files are
// up to --batch-max-bytes each: left there, a nightly job fills it. Each
// file is deleted at the first point no run can need it again, unless
// KeepFiles:
//
//   - a batch's input file, once the batch has ended: a resubmission
//     uploads a new file of the rows left, --resume asks a recorded batch
//     by its id, and only a batch refused for the token limit (not ended:
//     held) is created again from its file;
//   - its output and error files, once the results are written and the
//     journal removed (Finished): until then a run stopped or killed is
//     collected again by --resume from those files, as the answers are
//     kept nowhere else.
//
// A file already gone (an earlier run deleted it, or the provider expired
// it) is not an error, and a delete that fails is a warning: the results
// are written either way.

// dropInput deletes b's input file, b having ended.
func (r *Runner) dropInput(ctx context.Context, b *batch) {
	if r.cfg.KeepFiles || b.dropped || b.file == "" {
		return
	}
	b.dropped = true
	r.deleteFile(ctx, b, "input", b.file)
}

// tidy deletes every batch's files still at the provider, once the
// results are written and the journal is gone. A batch this run did not
// ask (--resume: its rows were all in the earlier results) is asked for
// its files' ids first.
func (r *Runner) tidy(ctx context.Context) {
	if r.cfg.KeepFiles {
		return
	}
	for _, b := range r.batches {
		if b.outputs == nil && b.id != "" {
			got, err := r.cfg.API.Get(ctx, b.id)
			if err != nil {
				r.cfg.Logger.Warn("cannot ask a batch for its files to delete them; they stay at the provider", "batch", b.id, "err", err)
				continue
			}
			b.outputs = []string{got.OutputFileID, got.ErrorFileID}
		}
		r.dropInput(ctx, b)
		for i, id := range b.outputs {
			if id != "" {
				r.deleteFile(ctx, b, [...]string{"output", "error"}[i], id)
			}
		}
	}
	if r.stats.Deleted > 0 {
		r.cfg.Logger.Info("deleted the batches' files at the provider (--batch-keep-files keeps them)", "files", r.stats.Deleted)
	}
}

// deleteFile deletes one file of b's; what says which.
func (r *Runner) deleteFile(ctx context.Context, b *batch, what, id string) {
	err := r.cfg.API.DeleteFile(ctx, id)
	var ae *batchapi.Error
	switch {
	case err == nil:
		r.stats.Deleted++
	case errors.As(err, &ae) && ae.Status == 404:
		// Gone already: an earlier run of this --resume deleted it.
	default:
		r.cfg.Logger.Warn("cannot delete a batch's "+what+" file at the provider; it stays there (delete it by hand, or ignore it)",
			"batch", b.id, "file", id, "err", err)
	}
}
