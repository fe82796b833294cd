package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/results"
)

// ClientCount is one client's rows running (under an unexpired lease) and
// pending.
type ClientCount struct {
	Client           string
	Running, Pending int64
}

// WorkerSeen is a worker whose heartbeat came in the last minute.
type WorkerSeen struct {
	ID, Host string
	PID      int
	Seen     time.Duration // ago
}

// Status is a snapshot of a batch, every count from one snapshot so that
// they add up.
type Status struct {
	Batch    *Batch
	Pending  int64 // waiting, due or not
	Reserved int64 // of them, reserved by a worker (lease unexpired)
	Running  int64 // leased, lease unexpired
	Expired  int64 // leased, lease expired: rescued at the next heartbeat
	Done     int64
	Outcomes map[outcome.Code]int64 // of the rows done
	Clients  []ClientCount          // the busiest, at most 10
	NClients int64
	Workers  []WorkerSeen
	// PerMinute is the rows finished in the last minute; ETA the time the
	// rest take at that rate (0 when unknown).
	PerMinute int64
	ETA       time.Duration
	Paused    time.Duration
	Open      time.Duration
	// CostUSD is what the rows' calls cost so far, at the workers' prices;
	// Priced the rows with a known cost (0: no worker had prices).
	// CacheHits the rows the response cache answered; PromptTokens and
	// CompletionTokens the usage reported.
	CostUSD                        float64
	Priced, CacheHits              int64
	PromptTokens, CompletionTokens int64
}

// Total is every row of the batch.
func (s *Status) Total() int64 { return s.Left() + s.Done }

// Left is the rows not yet done: pending, running, or running past their
// lease.
func (s *Status) Left() int64 { return s.Pending + s.Running + s.Expired }

// Status reads the batch's state.
func (db *DB) Status(ctx context.Context, name string) (*Status, error) {
	b, err := db.Batch(ctx, name)
	if err != nil {
		return nil, err
	}
	st := &Status{Batch: b, Outcomes: map[outcome.Code]int64{}}
	err = pgx.BeginTxFunc(ctx, db.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		batch := pgx.StrictNamedArgs{"batch": b.ID}
		if err := tx.QueryRow(ctx, sqlStatusCounts.sql, sqlStatusCounts.with(batch)).Scan(&st.Pending, &st.Reserved, &st.Running, &st.Expired, &st.Done); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, sqlStatusOutcomes.sql, sqlStatusOutcomes.with(batch))
		if err != nil {
			return err
		}
		for rows.Next() {
			var oc string
			var n int64
			if err := rows.Scan(&oc, &n); err != nil {
				return err
			}
			st.Outcomes[outcome.Code(oc)] = n
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, sqlStatusClients.sql, sqlStatusClients.with(batch))
		if err != nil {
			return err
		}
		for rows.Next() {
			var c ClientCount
			if err := rows.Scan(&c.Client, &c.Running, &c.Pending, &st.NClients); err != nil {
				return err
			}
			st.Clients = append(st.Clients, c)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, sqlStatusWorkers.sql, sqlStatusWorkers.with(batch))
		if err != nil {
			return err
		}
		for rows.Next() {
			var w WorkerSeen
			var ms float64
			if err := rows.Scan(&w.ID, &w.Host, &w.PID, &ms); err != nil {
				return err
			}
			w.Seen = msDuration(ms)
			st.Workers = append(st.Workers, w)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		var paused, open float64
		if err := tx.QueryRow(ctx, sqlStatusRate.sql, sqlStatusRate.with(batch)).Scan(&st.PerMinute, &paused, &open); err != nil {
			return err
		}
		st.Paused, st.Open = msDuration(paused), msDuration(open)
		return tx.QueryRow(ctx, sqlStatusSpend.sql, sqlStatusSpend.with(batch)).Scan(&st.CostUSD, &st.Priced, &st.CacheHits,
			&st.PromptTokens, &st.CompletionTokens)
	})
	if err != nil {
		return nil, fmt.Errorf("reading the status of batch %q: %s", name, summarise(err))
	}
	if left := st.Left(); left > 0 && st.PerMinute > 0 {
		st.ETA = time.Duration(float64(left) / float64(st.PerMinute) * float64(time.Minute))
	}
	return st, nil
}

// ExportStats counts what an export wrote.
type ExportStats struct {
	Rows       int64
	Unfinished int64 // written not_attempted: still pending or running
	OK         int64
}

// Export writes every row of batch b (as db.Batch read it), in push order,
// to w: exactly the results classify writes. A row not finished yet is
// written not_attempted, its error saying where it is. Rows are streamed
// from one query, so memory stays flat.
func (db *DB) Export(ctx context.Context, b *Batch, w RowWriter, includeText bool) (ExportStats, error) {
	var st ExportStats
	// One read-only transaction: the rows come from one snapshot, read
	// with a cursor so that a million rows are not held in memory.
	err := pgx.BeginTxFunc(ctx, db.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sqlExport.sql, sqlExport.with(pgx.StrictNamedArgs{"batch": b.ID, "include_text": includeText}))
		if err != nil {
			return err
		}
		defer rows.Close()
		buf := make([]results.Row, 0, 512)
		for rows.Next() {
			r, state, err := scanExport(rows)
			if err != nil {
				return err
			}
			if state != "done" {
				st.Unfinished++
				r = results.Row{RequestID: r.RequestID, Outcome: outcome.NotAttempted, Attempts: r.Attempts, StartedMs: -1,
					Error: "not finished: " + state + " in the queue", Text: r.Text, CostUSD: r.CostUSD, Costed: r.Costed,
					RawScore: math.NaN(), Review: true, Gold: r.Gold}
			}
			if r.Outcome.OK() {
				st.OK++
			}
			buf = append(buf, r)
			if len(buf) == cap(buf) {
				if err := w.Write(buf); err != nil {
					return writeError{err}
				}
				st.Rows += int64(len(buf))
				buf = buf[:0]
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if err := w.Write(buf); err != nil {
			return writeError{err}
		}
		st.Rows += int64(len(buf))
		return nil
	})
	if we, ok := err.(writeError); ok {
		return st, we
	}
	if err != nil {
		return st, fmt.Errorf("reading the results of batch %q: %s", b.Name, summarise(err))
	}
	return st, nil
}

// scanExport reads one row of export.sql into a result and its state.
func scanExport(rows pgx.Rows) (r results.Row, state string, err error) {
	var oc string
	var pt, ct, cpt *int32
	var cost, raw *float64
	var review *bool
	var gold, scores *string
	var stage *int16
	if err := rows.Scan(&r.RequestID, &state, &oc, &r.Label, &r.Score, &r.Model, &r.Attempts, &r.LatencyMs,
		&r.Error, &r.QueuedMs, &r.StartedMs, &r.FinishedMs, &r.Text, &pt, &ct, &cost, &r.Cached, &raw, &review, &gold, &stage,
		&cpt, &scores); err != nil {
		return r, "", err
	}
	r.Outcome = outcome.Code(oc)
	if stage != nil {
		r.Stage = int(*stage)
	}
	r.RawScore, r.Review, r.Gold = math.NaN(), review != nil && *review, ""
	if raw != nil {
		r.RawScore = *raw
	}
	if gold != nil {
		r.Gold = *gold
	}
	if cost != nil {
		r.CostUSD, r.Costed = *cost, true
	}
	if pt != nil || ct != nil {
		r.Tokens = true
		if pt != nil {
			r.PromptTokens = int(*pt)
		}
		if ct != nil {
			r.CompletionTokens = int(*ct)
		}
		if cpt != nil {
			r.CachedPromptTokens = int(*cpt)
		}
	}
	if scores != nil {
		var js []results.JSONScore
		if err := json.Unmarshal([]byte(*scores), &js); err != nil {
			return r, "", fmt.Errorf("request id %q: its scores: %v", r.RequestID, err)
		}
		r.Scores = results.FromJSONScores(js)
	}
	return r, state, nil
}

// RowWriter takes the rows an export writes: a results.Writer, or one
// that also counts them.
type RowWriter interface {
	Write(rows []results.Row) error
}

// ExportColumns says what a batch's export holds beyond classify's
// columns: raw_score, review, stage, cached_prompt_tokens and scores
// (when a worker wrote them), and gold labels (when a push named a gold
// column). The scores are written as the worker kept them (its first
// --top-k).
func (db *DB) ExportColumns(ctx context.Context, b *Batch) (extra results.Extra, gold bool, err error) {
	err = db.Pool.QueryRow(ctx, sqlExportColumns.sql, sqlExportColumns.with(pgx.StrictNamedArgs{"batch": b.ID})).Scan(&extra.RawScore, &extra.Review, &gold, &extra.Stage,
		&extra.CachedTokens, &extra.Scores)
	if err != nil {
		return extra, false, fmt.Errorf("reading batch %q: %s", b.Name, summarise(err))
	}
	return extra, gold, nil
}

// writeError is an error writing the output, not reading the database.
type writeError struct{ err error }

func (e writeError) Error() string { return e.err.Error() }
func (e writeError) Unwrap() error { return e.err }
