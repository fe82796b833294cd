package queue

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Heartbeat renews the leases of the rows this worker holds, running or
// reserved (held: a claim whose answer was lost is not renewed, so it
// expires and is redone), records that the worker is alive, and rescues
// rows whose lease expired under any worker: back to pending after a
// backoff, or, once their attempts are used up, done with their last
// failure (or upstream_failed when they never got one). renewed are the
// rows whose renewal committed (nil when it did not, even if err is nil
// for nothing held): a row whose lease had already expired is not renewed
// (renew.sql).
func (s *Session) Heartbeat(ctx context.Context, host string, pid int, held []int64) (renewed []int64, rescued, exhausted int64, err error) {
	b := &pgx.Batch{}
	// The renewal first, in a transaction of its own, so that this worker's
	// own rows are renewed, not rescued; then, in another, the worker seen
	// and the rows to rescue. Both pass the batch's gate first
	// (enter_batch.sql), as every worker transaction does.
	b.Queue("begin")
	sqlEnterBatch.queue(b, pgx.StrictNamedArgs{"batch": s.batch.ID})
	var seqs []int64
	sqlRenew.queue(b, pgx.StrictNamedArgs{"batch": s.batch.ID, "owner": s.owner, "lease_ms": s.lease.Milliseconds(), "held": held}).
		Query(func(rows pgx.Rows) (err error) {
			seqs, err = pgx.CollectRows(rows, pgx.RowTo[int64])
			return err
		})
	// The renewal counts once committed, whatever follows.
	b.Queue("commit").Exec(func(pgconn.CommandTag) error {
		renewed = seqs
		if renewed == nil {
			renewed = []int64{}
		}
		return nil
	})
	b.Queue("begin")
	sqlEnterBatch.queue(b, pgx.StrictNamedArgs{"batch": s.batch.ID})
	sqlWorkerSeen.queue(b, pgx.StrictNamedArgs{"batch": s.batch.ID, "owner": s.owner, "host": host, "pid": pid}).
		Exec(func(tag pgconn.CommandTag) error {
			if tag.RowsAffected() == 0 {
				return ErrBatchGone // the batch row, past the gate
			}
			return nil
		})
	var lost lostRows
	sqlExpired.queue(b, pgx.StrictNamedArgs{"batch": s.batch.ID}).Query(func(rows pgx.Rows) error {
		var seq int64
		var attempt int32
		_, err := pgx.ForEachRow(rows, []any{&seq, &attempt}, func() error {
			lost.seq, lost.attempt = append(lost.seq, seq), append(lost.attempt, attempt)
			return nil
		})
		return err
	})
	b.Queue("commit")
	if err := s.db.Pool.SendBatch(ctx, b).Close(); err != nil {
		return renewed, 0, 0, err
	}
	if len(lost.seq) == 0 {
		return renewed, 0, 0, nil
	}
	rescued, exhausted, err = s.rescue(ctx, lost)
	return renewed, rescued, exhausted, err
}

// lostRows are rows running under an expired lease, as expired.sql found
// them.
type lostRows struct {
	seq     []int64
	attempt []int32
}

// rescue takes back the lost rows, each due after its row backoff
// (rowBackoff, the rule a failed row's retry follows), in a transaction
// that holds the batch row, as everything that makes rows pending does
// (see lower_marks.sql). Rows whose worker wrote or renewed them since they
// were found are passed over.
func (s *Session) rescue(ctx context.Context, lost lostRows) (rescued, exhausted int64, err error) {
	delay := make([]int64, len(lost.seq))
	for i, a := range lost.attempt {
		delay[i] = rowBackoff(int(a)).Milliseconds()
	}
	b := &pgx.Batch{}
	b.Queue("begin")
	sqlEnterBatch.queue(b, pgx.StrictNamedArgs{"batch": s.batch.ID})
	sqlLockBatch.queue(b, pgx.StrictNamedArgs{"batch": s.batch.ID}).Exec(func(tag pgconn.CommandTag) error {
		if tag.RowsAffected() == 0 {
			return ErrBatchGone // the batch row, past the gate
		}
		return nil
	})
	sqlRescue.queue(b, pgx.StrictNamedArgs{"batch": s.batch.ID, "channel": channel(s.batch.ID),
		"seq": lost.seq, "attempt": lost.attempt, "delay_ms": delay}).QueryRow(func(row pgx.Row) error {
		return row.Scan(&rescued, &exhausted)
	})
	b.Queue("commit")
	if err := s.db.Pool.SendBatch(ctx, b).Close(); err != nil {
		return 0, 0, err
	}
	return rescued, exhausted, nil
}
