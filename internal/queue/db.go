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
	"net/url"
	"strconv"
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

// Open connects to dsn (a postgres:// URL or a key=value string) and checks
// that the database answers. Messages name the database by what pgx parsed
// out of dsn (host, port, database, user: see describe), never by dsn
// itself, which may hold a password in more ways than a redaction can
// foresee (spaces around "=", quotes, backslash escapes, sslpassword).
func Open(ctx context.Context, dsn string) (*DB, error) { return open(ctx, dsn, false) }

// OpenLazy is Open without the first connection: for a fleet budget's
// member that starts while its database cannot be reached (it connects
// when the database answers). A bad URL is still an error.
func OpenLazy(ctx context.Context, dsn string) (*DB, error) { return open(ctx, dsn, true) }

func open(ctx context.Context, dsn string, lazy bool) (*DB, error) {
	cfg, shown, err := parseDSN(dsn)
	if err != nil {
		return nil, err
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
	if lazy {
		return &DB{Pool: pool, url: shown}, nil
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

// parseDSN parses dsn as pgx does and names the database it points at, for
// messages (describe); an error says what is wrong without quoting dsn.
func parseDSN(dsn string) (*pgxpool.Config, string, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		problem := parseProblem(err)
		if strings.Contains(dsn, "://") && !strings.Contains(problem, "percent-encoded") {
			problem += "; in a URL, a password holding @ / ? # or : must be percent-encoded (@ as %40)"
		}
		return nil, "", fmt.Errorf("%w: %s (the value is not shown: it may hold a password)", ErrURL, problem)
	}
	return cfg, describe(cfg.ConnConfig.Config), nil
}

// describe names the database c connects to by its host(s), port(s),
// database and user: nothing else of the connection string is shown.
func describe(c pgconn.Config) string {
	hosts, ports := []string{c.Host}, []string{strconv.Itoa(int(c.Port))}
	seen := map[string]bool{c.Host + ":" + ports[0]: true}
	for _, f := range c.Fallbacks {
		port := strconv.Itoa(int(f.Port))
		if k := f.Host + ":" + port; !seen[k] {
			seen[k] = true
			hosts, ports = append(hosts, f.Host), append(ports, port)
		}
	}
	return fmt.Sprintf("host=%s port=%s dbname=%s user=%s",
		dsnValue(strings.Join(hosts, ",")), strings.Join(ports, ","), dsnValue(c.Database), dsnValue(c.User))
}

// dsnValue shows a value as is when it is plain, else quoted and escaped
// (Go syntax), so that it reads as one word and no byte of it reaches a
// terminal unescaped.
func dsnValue(v string) string {
	if v == "" || strings.ContainsAny(v, ` \'`) {
		return strconv.Quote(v)
	}
	return Printable(v)
}

// parseProblem says why pgx could not parse a --db value, in words of its
// own: pgx's messages quote parts of the input (a keyword it stopped at,
// the text of a URL), which may be a piece of a password.
func parseProblem(err error) string {
	var pce *pgconn.ParseConfigError
	if !errors.As(err, &pce) {
		// pgxpool's own settings (pool_max_conns ...): the setting named,
		// not its value.
		msg, _, _ := strings.Cut(err.Error(), ":")
		return msg
	}
	inner := pce.Unwrap()
	var ue *url.Error
	switch {
	case errors.As(inner, &ue):
		return "it is not a valid postgres:// URL (a password holding @ / ? # or : must be percent-encoded, @ as %40)"
	case inner == nil:
	case strings.Contains(inner.Error(), "unterminated quoted string"):
		return "a quoted value is not closed (key='a value')"
	case strings.HasPrefix(inner.Error(), `missing "=" after`):
		return `a word is not followed by "=": a value holding spaces must be quoted (key='a value') or its spaces escaped (\ )`
	case strings.Contains(inner.Error(), "NUL byte"):
		return "it holds a NUL byte"
	case inner.Error() == "invalid keyword/value":
		return "it is neither a postgres:// URL nor key=value settings"
	}
	// ParseConfigError's text is "cannot parse `<the input, partly
	// redacted>`: <what> [(<inner error>)]": keep <what>, up to any value
	// it quotes.
	msg := pce.Error()
	if inner != nil {
		msg = strings.TrimSuffix(msg, " ("+inner.Error()+")")
	}
	if i := strings.LastIndex(msg, "`: "); i >= 0 {
		msg = msg[i+3:]
	}
	what, _, _ := strings.Cut(msg, ":")
	// The TLS files (sslrootcert, sslcert, sslkey) and the service file:
	// their errors name a path and what is wrong with it.
	if inner != nil && (what == "failed to configure TLS" || what == "failed to read service") {
		return what + ": " + redactInner(inner.Error())
	}
	return what
}

// Summarise is summarise, for the packages that share the queue's
// database (budget): a driver error without the connection string.
func Summarise(err error) string { return summarise(err) }

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
		return "cannot parse the connection settings: " + parseProblem(pce)
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
	if err := db.Pool.QueryRow(ctx, sqlSchemaExists.sql, sqlSchemaExists.with(pgx.StrictNamedArgs{"table": versionTable})).Scan(&exists); err != nil {
		return 0, fmt.Errorf("%w at %s: %s", ErrConnect, db.url, summarise(err))
	}
	if !exists {
		return 0, nil
	}
	var v int32
	if err := db.Pool.QueryRow(ctx, sqlSchemaVersion.sql, sqlSchemaVersion.with(nil)).Scan(&v); err != nil {
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
