package queue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/input"
	"github.com/hfsent/hfsent/internal/outcome"
)

// Source yields input rows in order; io.EOF ends it.
type Source interface {
	Next() (input.Row, error)
}

// PushRequest is one push.
type PushRequest struct {
	Spec Spec
	// Given reports whether a setting of Spec was given on the command line
	// (by flag name); a given setting that differs from an existing batch's
	// is refused.
	Given func(flag string) bool
	// Source names the input in messages and in the push record.
	Source string
	// Digest is the input's SHA-256 when known before reading (a regular
	// file), else "", and DigestAfter is asked once the source is read.
	Digest      string
	DigestAfter func() string
	// Progress, when set, is told the rows copied so far, now and then.
	Progress func(rows int64)
	// Gold: the source's rows carry gold labels (--gold-column), stored
	// for queue export to compare the results with.
	Gold bool
}

// PushResult says what a push did.
type PushResult struct {
	Batch   *Batch
	Created bool  // the batch was created by this push
	Already bool  // the same file was pushed before: nothing was added
	Rows    int64 // rows added
	Invalid int64 // of them, stored as invalid_input
}

// seqBlock is the room a push reserves in a batch's seq space: seqs order
// rows in push order, and reserving a block lets a push copy its rows
// without holding the batch row, which claims lock.
const seqBlock = int64(1) << 32

// Push migrates the schema if needed, creates the batch (or checks it
// against req.Spec), and copies src into it in one transaction: every row
// is stored, a row that breaks the rules already finished as invalid_input.
// Pushing the same file again adds nothing; a file with ids already in the
// batch (from another file) is refused.
//
// A batch created by a push that then fails or is stopped is removed again
// (unless another push filled it meanwhile): it leaves no empty batch.
func (db *DB) Push(ctx context.Context, req PushRequest, src Source) (_ PushResult, err error) {
	if _, _, err := db.Migrate(ctx); err != nil {
		return PushResult{}, err
	}
	b, created, err := db.ensureBatch(ctx, req)
	if err != nil {
		return PushResult{}, err
	}
	if created {
		defer func() {
			if err != nil {
				db.forget(b)
			}
		}()
	}
	res := PushResult{Batch: b, Created: created}

	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("%w at %s: %s", ErrConnect, db.url, summarise(err))
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := lockForPush(ctx, tx, b); err != nil {
		return res, err
	}
	if req.Digest != "" {
		if already, err := pushed(ctx, tx, b.ID, req.Digest); err != nil || already {
			res.Already = already
			if err == nil {
				err = batchRows(ctx, tx, b)
			}
			return res, err
		}
	}
	var hadRows bool
	if err := tx.QueryRow(ctx, sqlHadRows.sql, sqlHadRows.with(pgx.StrictNamedArgs{"batch": b.ID})).Scan(&hadRows); err != nil {
		return res, fmt.Errorf("reading batch %q: %s", b.Name, summarise(err))
	}
	var base int64
	if err := tx.QueryRow(ctx, sqlReserveSeqs.sql, sqlReserveSeqs.with(pgx.StrictNamedArgs{"batch": b.ID, "block": seqBlock})).Scan(&base); err != nil {
		return res, fmt.Errorf("reserving rows in batch %q: %s", b.Name, summarise(err))
	}

	// A file on a pipe may block a read for good (an idle writer): the
	// COPY must still end with ctx, so rows are read where a stop need
	// not wait for them.
	cs := &copySource{src: engine.Abandonable(ctx, src), base: base, batch: b.ID, rules: engine.Rules{MaxChars: b.MaxChars},
		ids: engine.NewIDs(0), progress: req.Progress, gold: req.Gold}
	defer cs.ids.Release()
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"hfsent", "input"}, []string{"batch_id", "seq", "request_id", "text", "gold"}, cs); err != nil {
		if cs.readErr != nil {
			return res, cs.readErr
		}
		return res, fmt.Errorf("copying rows into batch %q: %s", b.Name, summarise(err))
	}
	digest := req.Digest
	if digest == "" && req.DigestAfter != nil {
		digest = req.DigestAfter()
		if already, err := pushed(ctx, tx, b.ID, digest); err != nil || already {
			res.Already = already
			if err == nil {
				err = batchRows(ctx, tx, b)
			}
			return res, err
		}
	}
	if hadRows {
		if err := checkOverlap(ctx, tx, b, base, req.Source); err != nil {
			return res, err
		}
	}
	if err := queueRows(ctx, tx, b, base, cs); err != nil {
		return res, err
	}
	if err := recordPush(ctx, tx, b, req.Source, digest, base, cs); err != nil {
		return res, err
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("committing the push into batch %q: %s", b.Name, summarise(err))
	}
	res.Rows, res.Invalid = int64(len(cs.items)), int64(len(cs.invalid))
	return res, nil
}

// lockForPush takes batch b's push lock in tx: pushes into a batch take
// turns. A batch gone meanwhile is refused.
func lockForPush(ctx context.Context, tx pgx.Tx, b *Batch) error {
	if tag, err := tx.Exec(ctx, sqlLockPush.sql, sqlLockPush.with(pgx.StrictNamedArgs{"batch": b.ID})); err != nil {
		return fmt.Errorf("locking batch %q for a push: %s", b.Name, summarise(err))
	} else if tag.RowsAffected() == 0 {
		// queue drop deleted it while this push waited for its turn, or
		// the push that created it failed and removed it (forget).
		return fmt.Errorf("%w: batch %q was dropped (queue drop, or the failed push that created it) while this push waited for it; push again to create it anew", ErrRefused, b.Name)
	}
	return nil
}

// queueRows queues the rows cs copied into b's input from base: a row that
// broke the rules is done at once, with its invalid_input result.
func queueRows(ctx context.Context, tx pgx.Tx, b *Batch, base int64, cs *copySource) error {
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"hfsent", "item"}, []string{"batch_id", "seq", "client", "state"},
		pgx.CopyFromSlice(len(cs.items), func(i int) ([]any, error) {
			it := cs.items[i]
			state := "pending"
			if it.problem != "" {
				state = "done"
			}
			return []any{b.ID, base + int64(i), it.client, state}, nil
		})); err != nil {
		return fmt.Errorf("queueing rows of batch %q: %s", b.Name, summarise(err))
	}
	if len(cs.invalid) > 0 {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"hfsent", "result"}, []string{"batch_id", "seq", "outcome", "error", "started_ms"},
			pgx.CopyFromSlice(len(cs.invalid), func(i int) ([]any, error) {
				k := cs.invalid[i]
				return []any{b.ID, base + int64(k), string(outcome.InvalidInput), cs.items[k].problem, nil}, nil
			})); err != nil {
			return fmt.Errorf("storing invalid rows of batch %q: %s", b.Name, summarise(err))
		}
	}
	return nil
}

// recordPush records the push (its clients, its source and digest, the
// rows from base), reopens a batch that has new rows to run, and tells the
// workers.
func recordPush(ctx context.Context, tx pgx.Tx, b *Batch, source, digest string, base int64, cs *copySource) error {
	if _, err := tx.Exec(ctx, sqlAddClients.sql, sqlAddClients.with(pgx.StrictNamedArgs{"batch": b.ID, "clients": cs.clientList()})); err != nil {
		return fmt.Errorf("storing the clients of batch %q: %s", b.Name, summarise(err))
	}
	if _, err := tx.Exec(ctx, sqlRecordPush.sql, sqlRecordPush.with(pgx.StrictNamedArgs{"batch": b.ID, "digest": digest, "source": source,
		"first_seq": base, "rows": int64(len(cs.items))})); err != nil {
		return fmt.Errorf("recording the push into batch %q: %s", b.Name, summarise(err))
	}
	if err := batchRows(ctx, tx, b); err != nil {
		return err
	}
	if len(cs.items) > len(cs.invalid) {
		if _, err := tx.Exec(ctx, sqlReopenBatch.sql, sqlReopenBatch.with(pgx.StrictNamedArgs{"batch": b.ID})); err != nil {
			return fmt.Errorf("updating batch %q: %s", b.Name, summarise(err))
		}
	}
	if _, err := tx.Exec(ctx, sqlNotify.sql, sqlNotify.with(pgx.StrictNamedArgs{"channel": channel(b.ID), "what": "push"})); err != nil {
		return fmt.Errorf("notifying workers: %s", summarise(err))
	}
	return nil
}

// forget removes batch b, which this push created and then could not fill,
// unless another push into it has committed meanwhile, as queue drop does
// (dropTx: its locks, in its order, so workers already on the batch see it
// gone and a push waiting for it finds it dropped rather than writes into
// it). It is best effort: the push has failed already, and its own error is
// the one to report.
func (db *DB) forget(b *Batch) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		_, _, err := dropTx(ctx, tx, b, true)
		return err
	})
}

// batchRows sets b.Rows to the rows of the batch as tx sees them holding the
// push lock: every push before this one, and this one's, whatever pushes
// ran beside it (b.Rows, read before the lock, may miss them).
func batchRows(ctx context.Context, tx pgx.Tx, b *Batch) error {
	if err := tx.QueryRow(ctx, sqlBatchRows.sql, sqlBatchRows.with(pgx.StrictNamedArgs{"batch": b.ID})).Scan(&b.Rows); err != nil {
		return fmt.Errorf("counting the rows of batch %q: %s", b.Name, summarise(err))
	}
	return nil
}

// channel is the LISTEN/NOTIFY channel of a batch.
func channel(batchID int64) string { return fmt.Sprintf("hfsent_batch_%d", batchID) }

func pushed(ctx context.Context, tx pgx.Tx, batchID int64, digest string) (bool, error) {
	var n int
	err := tx.QueryRow(ctx, sqlPushed.sql, sqlPushed.with(pgx.StrictNamedArgs{"batch": batchID, "digest": digest})).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("reading the pushes: %s", summarise(err))
	}
	return n > 0, nil
}

// listNewIDs lists the ids a push brings (batch batchID, from seq base)
// for overlapCheck, in a table of the push's transaction: trimmed, as
// written, and a hash of the trimmed id, indexed (so an id of any length
// fits).
func listNewIDs(ctx context.Context, tx pgx.Tx, batchID, base int64) error {
	for _, q := range []struct {
		s    *statement
		args pgx.StrictNamedArgs
	}{
		{sqlNewIDsTable, nil},
		{sqlNewIDsFill, pgx.StrictNamedArgs{"batch": batchID, "base": base}},
		{sqlNewIDsIndex, nil},
		{sqlNewIDsAnalyze, nil},
	} {
		if _, err := tx.Exec(ctx, q.s.sql, q.s.with(q.args)); err != nil {
			return err
		}
	}
	return nil
}

// overlapCheck finds up to 3 ids of listNewIDs' table that rows of batch $1
// before seq $2 already have (compared trimmed), with the file each came
// from ($3: seqBlock). Each of those rows is looked up on its own in the
// index of the new ids (a LATERAL probe with LIMIT: never a join the
// planner could turn into a nested loop over every pair, as it did when it
// knew nothing of the rows just copied: 20,000 against 20,000 took 43 s).
const overlapCheck = `
select n.raw, p.source
from hfsent.input o
cross join lateral (
	select t.raw from pg_temp.hfsent_push_ids t
	where t.h = hashtextextended(btrim(o.request_id), 0) and t.id = btrim(o.request_id)
	limit 1
) n
join hfsent.push p on p.batch_id = $1 and o.seq >= p.first_seq and o.seq < p.first_seq + $3
where o.batch_id = $1 and o.seq < $2
limit 3`

// checkOverlap refuses a push whose ids are already in the batch (from
// another file: the same file is recognised before). It costs a pass over
// the batch's rows and a probe of the new ids for each: linear, whatever
// the plan, and nothing for a batch's first push (no index on the batch's
// ids to keep up on every push).
func checkOverlap(ctx context.Context, tx pgx.Tx, b *Batch, base int64, source string) error {
	if err := listNewIDs(ctx, tx, b.ID, base); err != nil {
		return fmt.Errorf("checking ids against batch %q: %s", b.Name, summarise(err))
	}
	rows, err := tx.Query(ctx, overlapCheck, b.ID, base, seqBlock)
	if err != nil {
		return fmt.Errorf("checking ids against batch %q: %s", b.Name, summarise(err))
	}
	defer rows.Close()
	var ids []string
	var from string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id, &from); err != nil {
			return fmt.Errorf("checking ids against batch %q: %s", b.Name, summarise(err))
		}
		ids = append(ids, fmt.Sprintf("%q", id))
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("checking ids against batch %q: %s", b.Name, summarise(err))
	}
	if len(ids) > 0 {
		return fmt.Errorf("%w: %s has ids already in batch %q (pushed from %s), e.g. %s; push it into another batch (--batch), or give the rows new ids",
			ErrRefused, source, b.Name, Printable(from), strings.Join(ids, ", "))
	}
	return nil
}

// ensureBatch creates the batch, or checks that the settings given agree
// with the existing one's.
func (db *DB) ensureBatch(ctx context.Context, req PushRequest) (*Batch, bool, error) {
	s := req.Spec
	if err := CheckName(s.Name); err != nil {
		return nil, false, err
	}
	var cc, cl any
	if s.ClientColumn != "" {
		cc = s.ClientColumn
	}
	if s.ClientCap > 0 {
		cl = s.ClientCap
	}
	var rps any
	if s.GlobalRPS > 0 {
		rps = s.GlobalRPS
	}
	var id int64
	err := db.Pool.QueryRow(ctx, sqlCreateBatch.sql, sqlCreateBatch.with(pgx.StrictNamedArgs{"name": s.Name, "model": s.Model,
		"global_cap": s.GlobalCap, "client_column": cc, "client_cap": cl, "global_rps": rps, "lease_ms": s.Lease.Milliseconds(),
		"max_attempts": s.MaxAttempts, "max_chars": s.MaxChars, "provider": s.Provider, "labels": s.Labels})).Scan(&id)
	created := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, false, fmt.Errorf("creating batch %q: %s", s.Name, summarise(err))
	}
	b, err := db.Batch(ctx, s.Name)
	if err != nil || created {
		return b, created, err
	}
	given := req.Given
	if given == nil {
		given = func(string) bool { return false }
	}
	for _, c := range []struct {
		flag       string
		have, want any
	}{
		{"model", b.Model, s.Model},
		{"provider", b.Provider, s.Provider},
		{"labels", strings.Join(b.Labels, ","), strings.Join(s.Labels, ",")},
		{"global-cap", b.GlobalCap, s.GlobalCap},
		{"client-column", b.ClientColumn, s.ClientColumn},
		{"client-cap", b.ClientCap, s.ClientCap},
		{"global-rps", b.GlobalRPS, s.GlobalRPS},
		{"lease", b.Lease, s.Lease},
		{"max-attempts", b.MaxAttempts, s.MaxAttempts},
		{"max-chars", b.MaxChars, s.MaxChars},
	} {
		if given(c.flag) && c.have != c.want {
			have := fmt.Sprint(c.have)
			if c.flag == "provider" && have == "" {
				have = "hf"
			}
			return nil, false, fmt.Errorf("%w: batch %q was created with --%s %s; a push cannot change it (drop the batch, or push into a new one)",
				ErrRefused, b.Name, c.flag, Printable(have))
		}
	}
	return b, false, nil
}

// copySource feeds CopyFrom the input rows, checking each as classify does
// and remembering what the item and result tables need.
type copySource struct {
	src      Source
	base     int64
	batch    int64
	rules    engine.Rules
	ids      *engine.IDs // the ids of this file, for duplicates
	progress func(int64)
	gold     bool // store each row's gold label

	row     input.Row
	items   []pushItem
	invalid []int // indexes into items
	clients map[string]struct{}
	readErr error
}

type pushItem struct {
	client  string
	problem string
}

func (c *copySource) Next() bool {
	row, err := c.src.Next()
	if errors.Is(err, io.EOF) {
		return false
	}
	if err != nil {
		c.readErr = err
		return false
	}
	problem := c.rules.Check(row, c.ids.Seen)
	if problem == "" && (strings.ContainsRune(row.ID, 0) || strings.ContainsRune(row.Text, 0)) {
		// PostgreSQL text cannot hold a NUL byte.
		problem = "id or text holds a NUL byte"
	}
	row.ID, row.Text = strings.ReplaceAll(row.ID, "\x00", ""), strings.ReplaceAll(row.Text, "\x00", "")
	row.Client = strings.ReplaceAll(row.Client, "\x00", "")
	c.row = row
	c.items = append(c.items, pushItem{client: row.Client, problem: problem})
	if problem != "" {
		c.invalid = append(c.invalid, len(c.items)-1)
	} else {
		if c.clients == nil {
			c.clients = map[string]struct{}{}
		}
		c.clients[row.Client] = struct{}{}
	}
	if c.progress != nil && len(c.items)%4096 == 0 {
		c.progress(int64(len(c.items)))
	}
	return true
}

// Values is the input row as stored. An invalid_input row's text is not
// stored: it is never sent, and it may be what made the row invalid (a
// text of a gigabyte, cut as it was read).
func (c *copySource) Values() ([]any, error) {
	text := c.row.Text
	if c.items[len(c.items)-1].problem != "" {
		text = ""
	}
	var gold any
	if c.gold {
		gold = strings.ReplaceAll(c.row.Gold, "\x00", "")
	}
	return []any{c.batch, c.base + int64(len(c.items)-1), c.row.ID, text, gold}, nil
}

func (c *copySource) Err() error { return c.readErr }

func (c *copySource) clientList() []string {
	out := make([]string, 0, len(c.clients))
	for k := range c.clients {
		out = append(out, k)
	}
	return out
}
