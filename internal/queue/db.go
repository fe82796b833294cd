// Package queue keeps batches of rows in PostgreSQL for many workers on
// many machines: the schema and its migrations, push (COPY in), the claim
// under the batch's global and per-client caps (counted in the database, by
// the database clock), leases renewed by a heartbeat, fenced completions,
// the rescue of expired leases, the backpressure workers share (a pause
// after a 429, an open breaker), status and export. The worker loop feeds
// claimed rows through engine.Pipeline, the one path classify and serve use.
//
// There is no coordinator: the batch row is the lock every claim takes, and
// every limit is a count the claim makes after taking it.
package queue

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/tern/v2/migrate"

	"github.com/hfsent/hfsent/internal/redact"
)

//go:embed migrations/*.sql
var migrations embed.FS

// versionTable is where tern keeps the schema version.
const versionTable = "hfsent.schema_version"

// DB is a connection pool to the queue's database.
type DB struct {
	Pool *pgxpool.Pool
	url  string // redacted, for messages
}

// Error kinds a command turns into exit 2 (usage or set-up errors, found
// before any provider call).
var (
	ErrURL       = errors.New("bad --db URL")
	ErrConnect   = errors.New("cannot connect to the database")
	ErrNoSchema  = errors.New("the database has no hfsent queue")
	ErrNewer     = errors.New("the database's queue schema is newer than this hfsent")
	ErrNoBatch   = errors.New("no such batch")
	ErrRefused   = errors.New("refused")
	ErrMigration = errors.New("cannot migrate the queue schema")
)

// Open connects to url (a postgres:// URL or a key=value string) and checks
// that the database answers. Any credential in url is kept out of messages.
func Open(ctx context.Context, url string) (*DB, error) {
	shown := redactDSN(url)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %s", ErrURL, shown, summarise(err))
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "hfsent"
	// The claim is one complex statement run thousands of times a second:
	// planning it each time would cost more than running it.
	if _, ok := cfg.ConnConfig.RuntimeParams["plan_cache_mode"]; !ok {
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	}
	// A worker holds one connection for its cycle, one for its heartbeat
	// and one for LISTEN; push and export hold one.
	if cfg.MaxConns < 4 {
		cfg.MaxConns = 4
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %s", ErrURL, shown, summarise(err))
	}
	pctx, cancel := context.WithTimeout(ctx, cfg.ConnConfig.ConnectTimeout+time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("%w at %s: %s", ErrConnect, shown, summarise(err))
	}
	return &DB{Pool: pool, url: shown}, nil
}

// Close closes the pool.
func (db *DB) Close() { db.Pool.Close() }

// URL is the database URL as it may be shown (credentials redacted).
func (db *DB) URL() string { return db.url }

// redactDSN shows a URL without its password or query values; a key=value
// string without its password.
func redactDSN(s string) string {
	if strings.Contains(s, "://") {
		return redact.URL(s)
	}
	f := strings.Fields(s)
	for i, kv := range f {
		if k, _, ok := strings.Cut(kv, "="); ok && strings.EqualFold(k, "password") {
			f[i] = k + "=REDACTED"
		}
	}
	return strings.Join(f, " ")
}

// summarise turns a driver error into a short message without the
// connection string (which may hold a password).
func summarise(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return fmt.Sprintf("%s (SQLSTATE %s)", pe.Message, pe.Code)
	}
	var ne net.Error
	if errors.As(err, &ne) {
		var oe *net.OpError
		if errors.As(err, &oe) && oe.Err != nil {
			return oe.Op + ": " + oe.Err.Error()
		}
		return ne.Error()
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return summarise(ce.Unwrap())
	}
	var pce *pgconn.ParseConfigError
	if errors.As(err, &pce) {
		if u := pce.Unwrap(); u != nil {
			return "cannot parse it: " + strings.TrimPrefix(redactInner(u.Error()), "parse ")
		}
		return "cannot parse it"
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "no answer in time"
	}
	return redactInner(err.Error())
}

// redactInner strips anything that looks like a URL with credentials from a
// message.
func redactInner(s string) string {
	words := strings.Fields(s)
	for i, w := range words {
		if strings.Contains(w, "://") {
			words[i] = redact.URL(strings.Trim(w, `"'`))
		} else if strings.HasPrefix(strings.ToLower(w), "password=") {
			words[i] = "password=REDACTED"
		}
	}
	return strings.Join(words, " ")
}

// migrator loads the embedded migrations onto conn.
func migrator(ctx context.Context, conn *pgx.Conn) (*migrate.Migrator, error) {
	if _, err := conn.Exec(ctx, "create schema if not exists hfsent"); err != nil {
		return nil, err
	}
	m, err := migrate.NewMigrator(ctx, conn, versionTable)
	if err != nil {
		return nil, err
	}
	if err := m.LoadMigrations(mustSub()); err != nil {
		return nil, err
	}
	return m, nil
}

// Latest is the schema version this binary brings.
func Latest() int32 {
	names, _ := migrate.FindMigrations(mustSub())
	return int32(len(names))
}

// Version reads the schema version of the database: 0 when it has no queue.
func (db *DB) Version(ctx context.Context) (int32, error) {
	var exists bool
	if err := db.Pool.QueryRow(ctx, "select to_regclass($1) is not null", versionTable).Scan(&exists); err != nil {
		return 0, fmt.Errorf("%w at %s: %s", ErrConnect, db.url, summarise(err))
	}
	if !exists {
		return 0, nil
	}
	var v int32
	if err := db.Pool.QueryRow(ctx, "select version from "+versionTable).Scan(&v); err != nil {
		return 0, fmt.Errorf("reading the schema version at %s: %s", db.url, summarise(err))
	}
	return v, nil
}

// Migrate brings the schema up to this binary's version (a no-op when it is
// there) and returns the versions before and after. A database whose schema
// is newer is refused: an older hfsent must not write to it.
func (db *DB) Migrate(ctx context.Context) (from, to int32, err error) {
	if from, err = db.Version(ctx); err != nil {
		return 0, 0, err
	}
	if from > Latest() {
		return from, from, db.newer(from)
	}
	if from == Latest() {
		return from, from, nil
	}
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		return from, from, fmt.Errorf("%w at %s: %s", ErrConnect, db.url, summarise(err))
	}
	defer conn.Release()
	m, err := migrator(ctx, conn.Conn())
	if err != nil {
		return from, from, fmt.Errorf("%w: %s", ErrMigration, summarise(err))
	}
	if err := m.Migrate(ctx); err != nil {
		return from, from, fmt.Errorf("%w: %s", ErrMigration, summarise(err))
	}
	to, err = db.Version(ctx)
	return from, to, err
}

// Check refuses a database without the queue, or with a newer schema.
func (db *DB) Check(ctx context.Context) error {
	v, err := db.Version(ctx)
	switch {
	case err != nil:
		return err
	case v == 0:
		return fmt.Errorf("%w at %s: push a batch first (hfsent queue push), or run hfsent queue migrate", ErrNoSchema, db.url)
	case v > Latest():
		return db.newer(v)
	case v < Latest():
		return fmt.Errorf("%w: the queue schema at %s is at version %d, this hfsent needs %d: run hfsent queue migrate", ErrRefused, db.url, v, Latest())
	}
	return nil
}

func (db *DB) newer(v int32) error {
	return fmt.Errorf("%w (version %d, this hfsent knows up to %d): upgrade hfsent on this machine rather than let an older one write to it", ErrNewer, v, Latest())
}
