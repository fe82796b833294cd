package batchrun

import (
	"context"
	"fmt"
)

// maxListPages bounds the provider's list of batches read to find the
// batch of a pending record (100 a page, newest first).
const maxListPages = 50

// adoptPending gives each batch recorded as pending (a run killed
// between asking for it and its id coming back) its id: the provider's
// batch made from its file, found in the list of batches, or, when there
// is none, a batch created now from the same file. Either way no row of
// it is submitted twice.
func (r *Runner) adoptPending(ctx context.Context) error {
	want := map[string]*batch{}
	for _, b := range r.batches {
		if b.id == "" {
			want[b.file] = b
		}
	}
	if len(want) == 0 {
		return nil
	}
	after := ""
	for page := 0; page < maxListPages && len(want) > 0; page++ {
		got, more, err := r.cfg.API.List(ctx, after, 100)
		if err != nil {
			return fmt.Errorf("listing the batches, to find the ones a stopped run was creating: %w", err)
		}
		for _, g := range got {
			if b := want[g.InputFileID]; b != nil {
				delete(want, g.InputFileID)
				b.id, b.status, b.counts = g.ID, g.Status, g.Counts
				if err := r.j.add(record{Batch: g.ID, File: b.file}); err != nil {
					return err
				}
				r.cfg.Logger.Info("found the batch a stopped run was creating", "batch", g.ID, "file", b.file, "rows", b.n)
			}
		}
		if !more || len(got) == 0 {
			break
		}
		after = got[len(got)-1].ID
	}
	for _, b := range r.batches {
		if b.id != "" || want[b.file] == nil {
			continue
		}
		got, err := r.cfg.API.Create(ctx, b.file)
		if err != nil {
			return fmt.Errorf("creating the batch a stopped run had uploaded: %w", err)
		}
		if err := r.j.add(record{Batch: got.ID, File: b.file}); err != nil {
			return err
		}
		b.id, b.status, b.counts = got.ID, got.Status, got.Counts
		r.stats.Batches++
		r.cfg.Logger.Info("created the batch a stopped run had uploaded, from its file", "batch", got.ID, "file", b.file, "rows", b.n)
	}
	return nil
}
