package queue

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// Cycle runs one round trip: a pipeline of statements in one transaction,
// each reply read beside the statement that produced it. It gives back
// reservations; makes running the reservations started in the place of
// finished rows; writes this worker's results; locks the batch row (the
// claims' lock); lowers the marks of the rows its results put back;
// reconciles after a lost round trip; reports this worker's backpressure;
// claims up to in.Want rows (and reserves up to in.Reserve), in a statement
// whose snapshot sees every result committed before the lock was granted,
// and this transaction's own; and, if asked, sees whether anything
// remains.
func (s *Session) Cycle(ctx context.Context, in CycleIn) (CycleOut, error) {
	var out CycleOut
	b := &pgx.Batch{}
	// One transaction, not one for the results and one for the claim: each
	// costs the server as much as a statement, and every statement of a
	// round trip is CPU the 20 ms calls wait behind. Its commit need not
	// wait for the disk (see enter_batch_async.sql).
	b.Queue("begin")
	sqlEnterBatchAsync.queue(b, pgx.StrictNamedArgs{"batch": s.batch.ID})
	if len(in.Release) > 0 {
		sqlRelease.queue(b, pgx.StrictNamedArgs{"batch": s.batch.ID, "seqs": in.Release, "owner": s.owner})
	}
	// Swaps before the results that make them: the row a reservation took
	// the place of must still be running.
	if swaps := s.swapArgs(in.Done); swaps != nil {
		sqlPromote.queue(b, swaps).Query(func(rows pgx.Rows) (err error) {
			out.Promoted, err = pgx.CollectRows(rows, pgx.RowTo[int64])
			return err
		})
	}
	if len(in.Done) > 0 {
		sqlComplete.queue(b, s.completionArgs(in.Done)).Query(func(rows pgx.Rows) error { return out.readWritten(rows, in.Done) })
	}
	sqlLockBatch.queue(b, pgx.StrictNamedArgs{"batch": s.batch.ID}).QueryRow(func(row pgx.Row) error {
		var pausedMs, openMs float64
		if err := row.Scan(&pausedMs, &openMs); errors.Is(err, pgx.ErrNoRows) {
			// Past the gate, the batch row is there or the batch was dropped.
			return ErrBatchGone
		} else if err != nil {
			return err
		}
		out.Paused, out.Open = msDuration(pausedMs), msDuration(openMs)
		return nil
	})
	var back []int64 // rows the results put back to pending
	for _, c := range in.Done {
		if c.Action != Finish {
			back = append(back, c.Seq)
		}
	}
	if len(back) > 0 {
		sqlLowerMarks.queue(b, pgx.StrictNamedArgs{"batch": s.batch.ID, "seqs": back})
	}
	if in.Reconcile {
		sqlReconcile.queue(b, pgx.StrictNamedArgs{"batch": s.batch.ID, "owner": s.owner, "held": in.Held})
	}
	if in.PauseFor > 0 || in.OpenFor > 0 {
		sqlReportBackpressure.queue(b, pgx.StrictNamedArgs{"batch": s.batch.ID, "pause_ms": ceilMs(in.PauseFor),
			"open_ms": ceilMs(in.OpenFor), "channel": channel(s.batch.ID)})
	}
	if in.Want > 0 || (in.Reserve > 0 && s.Reserves()) {
		args := pgx.StrictNamedArgs{"batch": s.batch.ID, "want": in.Want, "owner": s.owner,
			"lease_ms": s.lease.Milliseconds(), "fallback": in.Fallback}
		claim := sqlClaim
		if s.Reserves() {
			claim, args["reserve"], args["promote"] = sqlClaimOne, in.Reserve, in.Promote
		}
		claim.queue(b, args).Query(func(rows pgx.Rows) (err error) {
			out.Claimed, err = pgx.CollectRows(rows, scanClaimed)
			return err
		})
	}
	if in.AskRemaining {
		sqlRemaining.queue(b, pgx.StrictNamedArgs{"batch": s.batch.ID, "channel": channel(s.batch.ID)}).QueryRow(func(row pgx.Row) error {
			return row.Scan(&out.Remaining)
		})
	}
	b.Queue("commit")
	// Close reads every reply, in order, each through its statement's
	// function, and stops at the first error.
	return out, s.db.Pool.SendBatch(ctx, b).Close()
}

// readWritten reads complete.sql's reply, the rows written: the other
// completions sent were discarded by the fence.
func (out *CycleOut) readWritten(rows pgx.Rows, sent []Completion) error {
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return err
	}
	written := make(map[int64]bool, len(seqs))
	for _, seq := range seqs {
		written[seq] = true
	}
	out.Written = len(written)
	for _, c := range sent {
		if !written[c.Seq] {
			out.Discarded = append(out.Discarded, c)
		}
	}
	return nil
}

// scanClaimed reads a row of a claim's reply (claimed_rows in claim.sql
// and claim_one.sql).
func scanClaimed(r pgx.CollectableRow) (Claimed, error) {
	var c Claimed
	err := r.Scan(&c.Seq, &c.Attempt, &c.Reserved, &c.RequestID, &c.Text)
	return c, err
}

// swapArgs are promote.sql's arguments for the completions that started a
// reservation in their place; nil when none did.
func (s *Session) swapArgs(done []Completion) pgx.StrictNamedArgs {
	var fs, rs []int64
	var fa, ra []int32
	for _, c := range done {
		if c.Promote != nil {
			fs, fa = append(fs, c.Seq), append(fa, int32(c.Attempt))
			rs, ra = append(rs, c.Promote.Seq), append(ra, int32(c.Promote.Attempt))
		}
	}
	if fs == nil {
		return nil
	}
	return pgx.StrictNamedArgs{"batch": s.batch.ID, "owner": s.owner, "lease_ms": s.lease.Milliseconds(),
		"finished_seq": fs, "finished_attempt": fa, "reserved_seq": rs, "reserved_attempt": ra}
}

// completionArgs are complete.sql's arguments: one array per column.
func (s *Session) completionArgs(done []Completion) pgx.StrictNamedArgs {
	n := len(done)
	seq, delay := make([]int64, n), make([]int64, n)
	attempt, attempts := make([]int32, n), make([]int32, n)
	action, oc, label, model, errs := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	score := make([]float64, n)
	lat, wait, total := make([]int64, n), make([]int64, n), make([]int64, n)
	pt, ct := make([]*int32, n), make([]*int32, n)
	cost, cached := make([]*float64, n), make([]bool, n)
	raw, review, stage := make([]*float64, n), make([]*bool, n), make([]*int16, n)
	cpt, scores := make([]*int32, n), make([]*string, n)
	for i, c := range done {
		raw[i], review[i], stage[i] = c.RawScore, c.Review, c.Stage
		cpt[i], scores[i] = c.CachedPromptTokens, c.Scores
		pt[i], ct[i] = c.PromptTokens, c.CompletionTokens
		cost[i], cached[i] = c.CostUSD, c.Cached
		seq[i], attempt[i], action[i], oc[i], label[i] = c.Seq, int32(c.Attempt), string(c.Action), c.Outcome, c.Label
		score[i], model[i], attempts[i], lat[i], errs[i] = c.Score, c.Model, int32(c.Attempts), c.LatencyMs, c.Error
		wait[i], total[i], delay[i] = c.WaitMs, max(0, c.TotalMs), max(0, c.Delay.Milliseconds())
	}
	return pgx.StrictNamedArgs{"batch": s.batch.ID, "owner": s.owner,
		"seq": seq, "attempt": attempt, "action": action, "outcome": oc, "label": label, "score": score, "model": model,
		"attempts": attempts, "latency_ms": lat, "error": errs, "wait_ms": wait, "total_ms": total, "delay_ms": delay,
		"prompt_tokens": pt, "completion_tokens": ct, "cost_usd": cost, "cached": cached, "raw_score": raw, "review": review, "stage": stage,
		"cached_prompt_tokens": cpt, "scores": scores}
}

// ceilMs is d in whole milliseconds, rounded up (0 stays 0).
func ceilMs(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func msDuration(ms float64) time.Duration {
	if ms <= 0 || math.IsNaN(ms) {
		return 0
	}
	return time.Duration(ms * float64(time.Millisecond))
}
