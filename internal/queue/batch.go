package queue

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/hfsent/hfsent/internal/visible"
)

func mustSub() fs.FS {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err) // the embedded directory is fixed at build time
	}
	return sub
}

// MaxNameChars bounds a batch name, in characters.
const MaxNameChars = 200

// CheckName refuses a batch name that could not be shown as it is: one
// with a control or formatting character (a newline, an ANSI escape, a
// bidirectional override: forged lines in an operator's table, escapes run
// by a terminal), bytes that are not UTF-8, or more than MaxNameChars
// characters. A name already in the database is shown through Printable.
func CheckName(name string) error {
	if !utf8.ValidString(name) {
		return fmt.Errorf("%w: the batch name %s is not UTF-8", ErrName, Printable(name))
	}
	if n := utf8.RuneCountInString(name); n > MaxNameChars {
		return fmt.Errorf("%w: the batch name has %d characters, over %d", ErrName, n, MaxNameChars)
	}
	if r, i := visible.Hidden(name); i >= 0 {
		return fmt.Errorf("%w: the batch name %s holds %U at character %d: a name may hold letters, digits, punctuation, symbols and spaces",
			ErrName, Printable(name), r, i+1)
	}
	return nil
}

// ErrName is a batch name CheckName refuses.
var ErrName = errors.New("bad --batch name")

// Printable is s as it may reach a terminal or a table: as is when every
// character of it prints (letters, marks, digits, punctuation, symbols,
// spaces), else quoted with Go's escapes (\n, \x1b, \u202e), so that text
// from the database (batch, client, model and host names) never forges a
// line or runs an escape. A value that begins with a double quote is
// quoted too, so that a quoted value is never mistaken for a plain one.
func Printable(s string) string {
	if strings.HasPrefix(s, `"`) || !utf8.ValidString(s) || strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

// Spec is what a batch is created with.
type Spec struct {
	Name         string
	Model        string
	GlobalCap    int     // rows running at once, over all workers
	ClientColumn string  // "": one client
	ClientCap    int     // rows running at once per client; 0: none
	GlobalRPS    float64 // claims per second over all workers; 0: none
	Lease        time.Duration
	MaxAttempts  int
	MaxChars     int
	// Provider is the kind of model the batch is for: "" a
	// text-classification model (hf, tei, local), "chat" a chat model;
	// Labels the labels its answers are chosen from (chat, or zero-shot).
	Provider string
	Labels   []string
}

// Batch is a batch as the database holds it.
type Batch struct {
	ID int64
	Spec
	PausedUntil      *time.Time
	BreakerOpenUntil *time.Time
	CreatedAt        time.Time
	StartedAt        *time.Time
	FinishedAt       *time.Time
	Rows             int64
}

func scanBatch(row pgx.Row) (*Batch, error) {
	var b Batch
	var leaseMs int64
	err := row.Scan(&b.ID, &b.Name, &b.Model, &b.GlobalCap, &b.ClientColumn, &b.ClientCap, &b.GlobalRPS,
		&leaseMs, &b.MaxAttempts, &b.MaxChars, &b.PausedUntil, &b.BreakerOpenUntil,
		&b.CreatedAt, &b.StartedAt, &b.FinishedAt, &b.Rows, &b.Provider, &b.Labels)
	b.Lease = time.Duration(leaseMs) * time.Millisecond
	return &b, err
}

// Batch loads the batch called name.
func (db *DB) Batch(ctx context.Context, name string) (*Batch, error) {
	b, err := scanBatch(db.Pool.QueryRow(ctx, sqlBatch.sql, sqlBatch.with(pgx.StrictNamedArgs{"name": name})))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w %q at %s (hfsent queue list shows the batches there)", ErrNoBatch, name, db.url)
	}
	if err != nil {
		return nil, fmt.Errorf("reading batch %q: %s", name, summarise(err))
	}
	return b, nil
}

// Batches lists every batch, oldest first.
func (db *DB) Batches(ctx context.Context) ([]*Batch, error) {
	rows, err := db.Pool.Query(ctx, sqlBatches.sql, sqlBatches.with(nil))
	if err != nil {
		return nil, fmt.Errorf("listing batches: %s", summarise(err))
	}
	defer rows.Close()
	var out []*Batch
	for rows.Next() {
		b, err := scanBatch(rows)
		if err != nil {
			return nil, fmt.Errorf("listing batches: %s", summarise(err))
		}
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing batches: %s", summarise(err))
	}
	return out, nil
}

// Drop deletes a batch with its rows and results, and reports how many rows
// it had. It runs while workers do: it takes the locks in the order every
// other writer does. First the push lock (a push holds it for its whole
// transaction, then locks the batch row), then the batch's gate, exclusive
// (every worker transaction takes it shared before any row: see
// enter_batch.sql), then the batch row. So it waits for a push and for the
// workers' transactions under way, never while holding anything one of
// them waits for, and the workers that come after it find the batch gone.
// The notification wakes the idle ones to find it.
func (db *DB) Drop(ctx context.Context, name string) (int64, error) {
	b, err := db.Batch(ctx, name)
	if err != nil {
		return 0, err
	}
	var gone bool
	var rows int64
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		var err error
		gone, rows, err = dropTx(ctx, tx, b, false)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("dropping batch %q: %s", name, summarise(err))
	}
	if gone {
		return 0, fmt.Errorf("%w %q at %s: it was dropped meanwhile", ErrNoBatch, name, db.url)
	}
	return rows, nil
}

// dropTx deletes batch b in tx, taking the locks in Drop's order, and
// reports whether it was gone already, and the rows it had. With ifEmpty
// it deletes b only when no push has filled it (rows is then 0).
func dropTx(ctx context.Context, tx pgx.Tx, b *Batch, ifEmpty bool) (gone bool, rows int64, err error) {
	batch := pgx.StrictNamedArgs{"batch": b.ID}
	tag, err := tx.Exec(ctx, sqlLockPush.sql, sqlLockPush.with(batch))
	if err != nil {
		return false, 0, err
	}
	if tag.RowsAffected() == 0 {
		return true, 0, nil // dropped meanwhile
	}
	if _, err := tx.Exec(ctx, sqlDropGate.sql, sqlDropGate.with(batch)); err != nil {
		return false, 0, err
	}
	if _, err := tx.Exec(ctx, sqlLockBatch.sql, sqlLockBatch.with(batch)); err != nil {
		return false, 0, err
	}
	// The rows as of now, pushes since b was read included.
	if err := tx.QueryRow(ctx, sqlBatchRows.sql, sqlBatchRows.with(batch)).Scan(&rows); err != nil {
		return false, 0, err
	}
	if ifEmpty {
		var pushes bool
		if err := tx.QueryRow(ctx, sqlHadRows.sql, sqlHadRows.with(batch)).Scan(&pushes); err != nil || pushes {
			return false, rows, err
		}
	}
	if _, err := tx.Exec(ctx, sqlDrop.sql, sqlDrop.with(batch)); err != nil {
		return false, 0, err
	}
	_, err = tx.Exec(ctx, sqlNotify.sql, sqlNotify.with(pgx.StrictNamedArgs{"channel": channel(b.ID), "what": "dropped"}))
	return false, rows, err
}
