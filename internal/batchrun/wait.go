package batchrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hfsent/hfsent/internal/batchapi"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// tokenLimit is the code of a batch refused because the model's enqueued
// tokens are full.
const tokenLimit = "token_limit_exceeded"

// maxPollErrors is how many polls in a row may fail (the network, the
// provider) before the run stops; the batches go on and --resume picks
// them up.
const maxPollErrors = 10

// wait polls every batch not ended until all are, backing off while
// nothing changes, and reads each one's files as it ends.
func (r *Runner) wait(ctx context.Context) error {
	interval := r.cfg.Poll
	errs := 0
	for {
		if err := r.recreateHeld(ctx); err != nil {
			return err
		}
		live := r.running()
		if len(live) == 0 {
			return nil
		}
		changed, err, fatal := r.pollAll(ctx, live)
		switch {
		case fatal != nil:
			return fatal
		case err != nil && ctx.Err() != nil:
			return err
		case err != nil:
			errs++
			if errs >= maxPollErrors {
				return fmt.Errorf("polling the batches failed %d times in a row: %w", errs, err)
			}
			r.cfg.Logger.Warn("cannot poll a batch; trying again", "err", err)
		default:
			errs = 0
		}
		r.progress()
		if len(r.running()) == 0 && !r.anyHeld() {
			return nil
		}
		if changed {
			interval = r.cfg.Poll
		} else {
			interval = min(interval*2, r.cfg.MaxPoll)
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// running are the batches created and not ended (held ones wait apart).
func (r *Runner) running() []*batch {
	var out []*batch
	for _, b := range r.batches {
		if !b.ended && !b.held {
			out = append(out, b)
		}
	}
	return out
}

func (r *Runner) anyHeld() bool {
	for _, b := range r.batches {
		if b.held {
			return true
		}
	}
	return false
}

// pollAll asks each running batch's status; changed: a status or a count
// moved. err is a poll that failed (tried again later); fatal, a batch's
// files that cannot be read as results (the run stops).
func (r *Runner) pollAll(ctx context.Context, live []*batch) (changed bool, err, fatal error) {
	for _, b := range live {
		got, gerr := r.cfg.API.Get(ctx, b.id)
		if gerr != nil {
			err = gerr
			continue
		}
		if got.Status != b.status || got.Counts != b.counts {
			changed = true
		}
		b.status, b.counts = got.Status, got.Counts
		if got.Ended() {
			if e := r.ended(ctx, b, got); e != nil {
				return true, err, e
			}
		}
	}
	return changed, err, nil
}

// ended handles a batch that has ended: its files are read; a refusal
// for the enqueued-token limit waits to be created again; rows an expired
// or provider-cancelled batch left unanswered are sent again.
func (r *Runner) ended(ctx context.Context, b *batch, got batchapi.Batch) error {
	if got.Status == "failed" {
		return r.failed(ctx, b, got)
	}
	b.ended = true
	b.outputs = []string{got.OutputFileID, got.ErrorFileID}
	if err := r.readFiles(ctx, b, got); err != nil {
		return err
	}
	r.dropInput(ctx, b)
	return r.leftOver(ctx, b, got.Status)
}

// failed is a batch the provider refused as a whole. A refusal for the
// enqueued-token limit counts against nothing: the batch is created again
// from the same file once the batches before it have ended. Any other
// refusal is every row's error.
func (r *Runner) failed(ctx context.Context, b *batch, got batchapi.Batch) error {
	code, msg := "", ""
	if len(got.Errors) > 0 {
		code, msg = got.Errors[0].Code, got.Errors[0].Message
	}
	if code == tokenLimit && (b.refused == 0 || r.othersRunning(b)) {
		b.held, b.refused = true, b.refused+1
		wait := r.before(b)
		r.cfg.Logger.Warn(fmt.Sprintf("batch %s was refused: the model's enqueued-token limit is full; it is created again from the same file once %s", b.id, waitWords(wait)),
			"batch", b.id, "rows", b.n)
		return nil
	}
	b.ended, b.read = true, true
	b.outputs = []string{got.OutputFileID, got.ErrorFileID}
	r.dropInput(ctx, b)
	e := &provider.Error{Outcome: outcome.UpstreamFailed, NoRetry: true,
		Msg: fmt.Sprintf("the batch %s failed: %s", b.id, clip(strings.TrimSpace(code+" "+msg), 200))}
	if code == tokenLimit {
		e.Msg += "; its rows alone are over the enqueued-token limit: lower --batch-max-requests"
	}
	at := int32(len(r.errs))
	r.errs = append(r.errs, e) // one error for every row of the batch
	for _, s := range r.owned(b) {
		if s.state == pending {
			s.state, s.err = failed, at
		}
	}
	return nil
}

// before are the ids of batches created before b and not ended.
func (r *Runner) before(b *batch) []string {
	var ids []string
	for _, o := range r.batches[:b.idx] {
		if !o.ended && !o.held {
			ids = append(ids, o.id)
		}
	}
	return ids
}

func (r *Runner) othersRunning(b *batch) bool {
	for _, o := range r.batches {
		if o != b && !o.ended && !o.held {
			return true
		}
	}
	return false
}

func waitWords(ids []string) string {
	switch len(ids) {
	case 0:
		return "the batches now running at the provider have ended"
	case 1:
		return "batch " + ids[0] + " has ended"
	}
	return fmt.Sprintf("the %d batches before it have ended (%s, ...)", len(ids), ids[0])
}

// recreateHeld creates again each held batch whose earlier batches have
// all ended.
func (r *Runner) recreateHeld(ctx context.Context) error {
	for _, b := range r.batches {
		if !b.held || len(r.before(b)) > 0 {
			continue
		}
		got, err := r.cfg.API.Create(ctx, b.file)
		if err != nil {
			return fmt.Errorf("creating again the batch refused for the token limit: %w", err)
		}
		if err := r.j.add(record{Batch: got.ID, Replace: b.id}); err != nil {
			return err
		}
		r.cfg.Logger.Info("batch created again after the token limit freed", "batch", got.ID, "replaces", b.id, "rows", b.n)
		b.id, b.status, b.counts, b.held = got.ID, got.Status, got.Counts, false
		r.stats.Batches++
	}
	return nil
}

// owned are the slots whose batch is b now.
func (r *Runner) owned(b *batch) []*slot {
	var out []*slot
	b.rows.Each(func(seq int64) bool {
		if s := r.at(seq); s != nil && int(s.batch) == b.idx {
			out = append(out, s)
		}
		return true
	})
	return out
}

// leftOver sends again, in a new batch, the rows b left unanswered (an
// expiry, a cancel by the provider, a completed batch short of answers),
// each up to --batch-max-submissions; the rest are missing. The rows of a
// batch the user cancelled are not sent again.
func (r *Runner) leftOver(ctx context.Context, b *batch, status string) error {
	var again Rows
	var left int64
	b.rows.Each(func(seq int64) bool {
		s := r.at(seq)
		if s == nil || int(s.batch) != b.idx || s.state != pending {
			return true
		}
		left++
		if b.mine || int(s.subs) >= r.cfg.MaxSubmissions || r.cfg.CancelRunning {
			s.state = missing
			return true
		}
		again.Add(seq)
		return true
	})
	if left == 0 {
		return nil
	}
	r.cfg.Logger.Warn(fmt.Sprintf("batch %s ended %s with %d of its %d rows unanswered; %d are sent again in a new batch",
		b.id, status, left, b.n, again.Len()), "batch", b.id)
	if again.Len() == 0 {
		return nil
	}
	return r.resubmit(ctx, &again)
}

// resubmit reads INPUT again and sends the rows of set in new batches.
func (r *Runner) resubmit(ctx context.Context, set *Rows) error {
	src, closeSrc, err := r.cfg.Open()
	if err != nil {
		return err
	}
	defer closeSrc()
	up := &uploader{r: r}
	defer up.abandon() // a run stopped mid-file leaves no spool
	last := set.Last()
	for {
		row, err := src.Next()
		if errors.Is(err, io.EOF) || (err == nil && row.Seq > last) {
			break
		}
		if err != nil {
			return err
		}
		if !set.Has(row.Seq) {
			continue
		}
		s := r.at(row.Seq)
		c := candidate{seq: row.Seq, text: row.Text, key: keyOf(row.Text)}
		if err := up.add(ctx, c, s.subs+1); err != nil {
			return err
		}
		r.stats.Resubmitted++
	}
	return up.finish(ctx)
}

// cancelAll cancels every recorded batch still running (--batch-cancel).
func (r *Runner) cancelAll(ctx context.Context) error {
	for _, b := range r.batches {
		got, err := r.cfg.API.Get(ctx, b.id)
		if err != nil {
			return fmt.Errorf("batch %s: %w", b.id, err)
		}
		if got.Ended() {
			continue
		}
		if _, err := r.cfg.API.Cancel(ctx, b.id); err != nil {
			return fmt.Errorf("cancelling batch %s: %w", b.id, err)
		}
		if err := r.j.add(record{Batch: b.id, Cancel: true}); err != nil {
			return err
		}
		b.mine = true
		r.stats.Cancelled++
		r.cfg.Logger.Info("batch cancelled; the rows it completed are kept", "batch", b.id)
	}
	return nil
}

// progress reports the batches' request counts.
func (r *Runner) progress() {
	if r.cfg.Progress == nil {
		return
	}
	var p Progress
	for _, b := range r.batches {
		p.Batches++
		p.Total += b.n
		if b.ended {
			p.Completed += int64(b.counts.Completed)
			p.Failed += int64(b.counts.Failed)
			continue
		}
		p.Running++
		p.Completed += int64(b.counts.Completed)
		p.Failed += int64(b.counts.Failed)
		if p.Status == "" || rank(b.status) < rank(p.Status) {
			p.Status = b.status
		}
	}
	r.cfg.Progress(p)
}

func rank(status string) int {
	switch status {
	case "validating":
		return 0
	case "in_progress":
		return 1
	case "finalizing":
		return 2
	}
	return 3
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
