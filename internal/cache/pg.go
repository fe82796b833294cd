package cache

import (
	"context"
	"embed"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hfsent/hfsent/internal/sqlfile"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// load reads sql/<name>.sql: a statement sent with named parameters.
func load(name string) string { return sqlfile.Read(sqlFiles, name) }

var (
	sqlGet    = load("get")
	sqlPut    = load("put")
	sqlEvict  = load("evict")
	sqlDelete = load("delete")
	sqlTotals = load("totals")
	sqlStats  = load("stats")
	sqlClear  = load("clear")
)

// PGEntryBytes is about what an entry takes in PostgreSQL, its two
// indexes included: the size bound there counts entries at this size
// (the table's size on disk does not shrink as entries go).
const PGEntryBytes = 200

// PG is a fleet's cache: the table hfsent.cache in the queue's database
// (migrated with the queue's schema), shared by every member. Entries
// carry the file cache's checksum, checked on every read.
type PG struct {
	pool     *pgxpool.Pool
	name     string
	maxBytes int64
}

// NewPG is the cache in the database of pool, named name in messages
// (its host, port, database and user: never its credentials), bounded to
// maxBytes (0: unbounded). The schema must be migrated.
func NewPG(pool *pgxpool.Pool, name string, maxBytes int64) *PG {
	return &PG{pool: pool, name: name, maxBytes: maxBytes}
}

// Name implements Store.
func (p *PG) Name() string { return "hfsent.cache at " + p.name }

// Get implements Store.
func (p *PG) Get(ctx context.Context, keys []Key) ([]Stored, error) {
	bs := make([][]byte, len(keys))
	for i := range keys {
		bs[i] = keys[i][:]
	}
	rows, err := p.pool.Query(ctx, sqlGet, pgx.NamedArgs{"keys": bs})
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Stored
	for rows.Next() {
		var s Stored
		var key []byte
		if err := rows.Scan(&key, &s.AtMs, &s.Val, &s.Sum); err != nil {
			return nil, err
		}
		if len(key) == len(s.Key) {
			copy(s.Key[:], key)
			out = append(out, s)
		}
	}
	return out, rows.Err()
}

// Put implements Store: one statement; past the bound the oldest go, down
// to nine tenths of it.
func (p *PG) Put(ctx context.Context, entries []Stored) error {
	keys, ats, vals, sums := make([][]byte, len(entries)), make([]int64, len(entries)), make([][]byte, len(entries)), make([][]byte, len(entries))
	for i := range entries {
		keys[i], ats[i], vals[i], sums[i] = entries[i].Key[:], entries[i].AtMs, entries[i].Val, entries[i].Sum
	}
	var n int64
	if err := p.pool.QueryRow(ctx, sqlPut, pgx.NamedArgs{"keys": keys, "at_ms": ats, "vals": vals, "sums": sums}).Scan(&n); err != nil {
		return err
	}
	if limit := p.maxBytes / PGEntryBytes; p.maxBytes > 0 && n > limit {
		_, err := p.pool.Exec(ctx, sqlEvict, pgx.NamedArgs{"n": n - limit*9/10})
		return err
	}
	return nil
}

// Delete implements Store.
func (p *PG) Delete(ctx context.Context, keys []Key) error {
	bs := make([][]byte, len(keys))
	for i := range keys {
		bs[i] = keys[i][:]
	}
	_, err := p.pool.Exec(ctx, sqlDelete, pgx.NamedArgs{"keys": bs})
	return err
}

// AddTotals implements Store.
func (p *PG) AddTotals(ctx context.Context, t Totals) error {
	_, err := p.pool.Exec(ctx, sqlTotals, pgx.NamedArgs{"hits": t.Hits, "saved_prompt": t.SavedPrompt,
		"saved_completion": t.SavedCompletion, "saved_usd": t.SavedUSD, "costed": t.Costed})
	return err
}

// Stats implements Store.
func (p *PG) Stats(ctx context.Context) (Stats, error) {
	s := Stats{Name: p.Name(), MaxBytes: p.maxBytes}
	var lo, hi *int64
	err := p.pool.QueryRow(ctx, sqlStats).Scan(&s.Entries, &lo, &hi, &s.Bytes, &s.Hits, &s.SavedPrompt, &s.SavedCompletion, &s.SavedUSD, &s.Costed)
	if lo != nil && hi != nil {
		s.Oldest, s.Newest = time.UnixMilli(*lo), time.UnixMilli(*hi)
	}
	return s, err
}

// Clear implements Store.
func (p *PG) Clear(ctx context.Context, before time.Time) (int64, error) {
	ms := int64(-1)
	if !before.IsZero() {
		ms = before.UnixMilli()
	}
	var n int64
	err := p.pool.QueryRow(ctx, sqlClear, pgx.NamedArgs{"before_ms": ms}).Scan(&n)
	return n, err
}

// Close implements Store: the pool is the caller's.
func (p *PG) Close() error { return nil }
