package cache

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// FileName is the cache's file in --cache-dir (with its -wal and -shm
// beside it while it is open).
const FileName = "responses.sqlite"

// The file's format: application_id says it is an hfsent cache,
// user_version which format; a newer format is refused, never guessed at.
const (
	appID      = 0x68667363 // "hfsc"
	fileFormat = 2
)

// getBatch is how many keys one lookup statement asks for.
const getBatch = 64

// File is the cache on one machine: one SQLite file (modernc.org/sqlite,
// pure Go, so the release binaries stay static). SQLite in WAL mode lets
// several processes read and write it at once (writers take turns,
// readers never wait), a transaction is all or nothing across kill -9,
// and every entry carries its own checksum, since SQLite checks none.
type File struct {
	path     string
	dir      string
	db       *sql.DB
	maxBytes int64
	get      *sql.Stmt
	put      *sql.Stmt

	mu       sync.Mutex // one writer in the process at a time
	sinceFit int        // entries put since the size was last checked

	// sole: every entry in the file was put by this File, which opened
	// it empty; lastSeq is the newest seq it wrote. Another process's
	// commit shows as a newest seq not its own, at this File's next Put.
	sole    atomic.Bool
	lastSeq int64
}

// OpenFile opens (or makes) the cache in dir, bounded to maxBytes (0:
// unbounded). A file that is not a readable cache is refused: ErrDamaged,
// ErrNewer or ErrForeign, naming it.
func OpenFile(ctx context.Context, dir string, maxBytes int64) (*File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	path, err := filepath.Abs(filepath.Join(dir, FileName))
	if err != nil {
		return nil, err
	}
	f, err := openDB(ctx, path, dir, maxBytes, 0)
	if err != nil || f.Sole() {
		return f, err
	}
	// A file with entries is read through a memory map of its first 48
	// MiB: a lookup then costs no read(2), and an all-hit run is as fast
	// as --provider local (4.1 s against 2.6 s with the map, 300,000
	// rows). A file opened empty is only written, and the map's pages
	// would count in the resident set as the writer touched them.
	f.Close()
	return openDB(ctx, path, dir, maxBytes, 48<<20)
}

func openDB(ctx context.Context, path, dir string, maxBytes, mmap int64) (*File, error) {
	db, err := sql.Open("sqlite", dsn(path, mmap))
	if err != nil {
		return nil, err
	}
	// A few readers at once; connections live as long as the process.
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(4)
	f := &File{path: path, dir: dir, db: db, maxBytes: maxBytes}
	if err := f.init(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("cache %s: %w", path, err)
	}
	return f, nil
}

// dsn is the file's URI (escaped: a directory may hold '?' or '#'), each
// connection waiting up to 10 s for another process's write, syncing at
// checkpoints only (WAL: a process killed loses nothing committed), with
// a memory map of mmap bytes (0: none; see OpenFile) and a page cache of
// at most 2 MiB a connection when the file is read through the map, 512
// KiB when it is not. A file opened empty is only written, in batches that
// touch most leaves of the key index, far more than either holds: the
// smaller cache writes as fast and keeps 1.5 MiB out of a fill's resident
// set (issue 31's 300,000 rows at the default flags). The WAL is copied
// back into the file once it holds 4,000 pages (16 MiB), not SQLite's
// 1,000: a fill's batches rewrite the same index pages, and a page is
// copied once however many commits wrote it since the last copy (a sixth
// less CPU in the store on a fill). The file is checkpointed and the WAL
// removed when the last process closes it.
func dsn(path string, mmap int64) string {
	p := filepath.ToSlash(path)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // a Windows drive
	}
	pageCache := "-2048"
	if mmap == 0 {
		pageCache = "-512"
	}
	return "file:" + (&url.URL{Path: p}).EscapedPath() +
		"?_pragma=busy_timeout(10000)&_pragma=wal_autocheckpoint(4000)&_pragma=synchronous(NORMAL)&_pragma=mmap_size(" + strconv.FormatInt(mmap, 10) + ")&_pragma=cache_size(" + pageCache + ")&_txlock=immediate"
}

// init checks the file is this format's cache, or makes it one when it is
// new, then prepares the statements. The check and the making are one
// write transaction: two processes opening a new file at once take turns,
// and the second finds the first's cache.
func (f *File) init(ctx context.Context) error {
	if err := f.check(ctx); err != nil {
		return err
	}
	if err := f.wal(ctx); err != nil {
		return err
	}
	qs := "select key, at, val, sum from entry where " + key8 + " in (?" + strings.Repeat(",?", getBatch-1) + ")"
	var err error
	if f.get, err = f.db.PrepareContext(ctx, qs); err != nil {
		return classify(err)
	}
	f.put, err = f.db.PrepareContext(ctx, "insert into entry (seq, key, at, val, sum) values (?, ?, ?, ?, ?)")
	if err != nil {
		return classify(err)
	}
	var some bool
	if err := f.db.QueryRowContext(ctx, "select coalesce(max(seq), 0), exists(select 1 from entry) from entry").Scan(&f.lastSeq, &some); err != nil {
		return classify(err)
	}
	f.sole.Store(!some)
	return nil
}

// wal puts the file in WAL mode (kept in the file: set once). Changing
// the mode needs the file to itself, and SQLite answers busy at once
// rather than wait while another process has it open (two starting on a
// new file together): it is asked again, until the other has set it.
func (f *File) wal(ctx context.Context) error {
	for try := 0; ; try++ {
		var mode string
		err := f.db.QueryRowContext(ctx, "pragma journal_mode").Scan(&mode)
		if err == nil && strings.EqualFold(mode, "wal") {
			return nil
		}
		if err == nil {
			err = f.db.QueryRowContext(ctx, "pragma journal_mode = wal").Scan(&mode)
		}
		var se *sqlite.Error
		if err == nil && strings.EqualFold(mode, "wal") {
			return nil
		}
		if err != nil && (!errors.As(err, &se) || se.Code()&0xff != 5) { // not SQLITE_BUSY
			return classify(err)
		}
		if try >= 200 {
			return fmt.Errorf("cannot put the file in WAL mode (journal mode %q): another process holds it (%v)", mode, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// schema is the cache's tables (format 2): entry in the order stored
// (seq, the rowid: the oldest go first), found through entry_key8, a
// unique index on the first 8 bytes of the key; totals the hits and
// savings since the file was made.
//
// Format 1 kept entry as a b-tree by the whole key, with the answer in
// it: keys are hashes, so every batch of a fill landed all over that tree
// and rewrote most of its pages (a page is written whole to the WAL and
// again at the checkpoint). At 300,000 rows that was 7 s of CPU beside a
// provider answering at once (issue 31). Now a batch appends its answers
// at the tree's end, and only the index, 13 bytes an entry against 190,
// takes them in key order. Two keys whose first 8 bytes agree (a chance
// of about 1 in 37 that any pair does among a billion entries) share a
// slot: the newer replaces the older, whose row is then asked again; a
// lookup compares the whole key, so it is never answered with the other's
// entry.
const schema = `
create table if not exists entry (
	seq integer primary key,
	key blob not null,
	at  integer not null,
	val blob not null,
	sum blob not null
);
create unique index if not exists entry_key8 on entry (substr(key, 1, 8));
create table if not exists totals (
	id integer primary key check (id = 1),
	hits integer not null, saved_prompt integer not null, saved_completion integer not null,
	saved_usd real not null, costed integer not null
);
insert or ignore into totals values (1, 0, 0, 0, 0, 0);
pragma application_id = 1751544675;
pragma user_version = 2;
`

// key8 is the indexed expression: a query must name it exactly so for
// SQLite to use entry_key8.
const key8 = "substr(key, 1, 8)"

// upgrade turns a format 1 file into format 2 in the caller's
// transaction, keeping every entry and its order.
const upgrade = `
alter table entry rename to entry_v1;
drop index if exists entry_seq;
` + schema + `
insert or replace into entry (key, at, val, sum) select key, at, val, sum from entry_v1 order by seq;
drop table entry_v1;
`

// check reads the file's marks, and makes a new file a cache.
func (f *File) check(ctx context.Context) error {
	conn, err := f.db.Conn(ctx)
	if err != nil {
		return classify(err)
	}
	defer conn.Close()
	// Freed pages can be handed back (cache clear): the setting applies
	// when the first table is made, on this connection, and is a no-op on
	// a file that has tables (and inside a transaction, so it comes first).
	if _, err := conn.ExecContext(ctx, "pragma auto_vacuum = incremental"); err != nil {
		return classify(err)
	}
	tx, err := conn.BeginTx(ctx, nil) // immediate: the write lock, now
	if err != nil {
		return classify(err)
	}
	defer tx.Rollback()
	var app, ver, tables int64
	if err := tx.QueryRowContext(ctx, "select (select application_id from pragma_application_id()), (select user_version from pragma_user_version()), (select count(*) from sqlite_master)").
		Scan(&app, &ver, &tables); err != nil {
		return classify(err)
	}
	switch {
	case app == appID && ver > fileFormat:
		return fmt.Errorf("%w (format %d; this one reads format %d)", ErrNewer, ver, fileFormat)
	case app == appID && ver == fileFormat:
		return nil
	case app == appID && ver == 1:
		if _, err := tx.ExecContext(ctx, upgrade); err != nil {
			return classify(err)
		}
		return classify(tx.Commit())
	case app != 0 || ver != 0 || tables > 0:
		return ErrForeign // someone's database, with no hfsent mark
	}
	if _, err := tx.ExecContext(ctx, schema); err != nil {
		return classify(err)
	}
	return classify(tx.Commit())
}

// classify turns SQLite's word for a damaged file into ErrDamaged.
func classify(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case 11, 26: // SQLITE_CORRUPT, SQLITE_NOTADB
			return fmt.Errorf("%w: %v", ErrDamaged, err)
		}
	}
	return err
}

// Name implements Store: the file's path.
func (f *File) Name() string { return f.path }

// Get implements Store.
func (f *File) Get(ctx context.Context, keys []Key) ([]Stored, error) {
	var out []Stored
	args := make([]any, getBatch)
	for len(keys) > 0 {
		n := min(len(keys), getBatch)
		for i := range args {
			k := keys[min(i, n-1)] // the rest repeat the last: the same answer
			args[i] = k[:8]
		}
		rows, err := f.get.QueryContext(ctx, args...)
		if err != nil {
			return nil, classify(err)
		}
		for rows.Next() {
			var s Stored
			var key, val, sum sql.RawBytes
			if err := rows.Scan(&key, &s.AtMs, &val, &sum); err != nil {
				rows.Close()
				return nil, classify(err)
			}
			if len(key) == len(s.Key) {
				// One copy for both: RawBytes are the driver's until Next.
				buf := make([]byte, len(val)+len(sum))
				copy(s.Key[:], key)
				s.Val, s.Sum = buf[:copy(buf, val)], buf[len(val):]
				copy(s.Sum, sum)
				out = append(out, s)
			}
		}
		if err := rows.Close(); err != nil {
			return nil, classify(err)
		}
		if err := rows.Err(); err != nil {
			return nil, classify(err)
		}
		keys = keys[n:]
	}
	return out, nil
}

// Put implements Store: one transaction; past the bound, the oldest
// entries go (checked every fitEvery entries, and down to nine tenths, so
// that eviction is seldom).
func (f *File) Put(ctx context.Context, entries []Stored) error {
	return f.write(ctx, func(tx *sql.Tx) error {
		// The newest seq is read once: the transaction holds the write
		// lock, so no other writer takes the ones after it meanwhile.
		var seq int64
		if err := tx.QueryRowContext(ctx, "select coalesce(max(seq), 0) from entry").Scan(&seq); err != nil {
			return err
		}
		if seq != f.lastSeq {
			f.sole.Store(false)
		}
		f.lastSeq = seq + int64(len(entries))
		// In key order: the entries land in the b-tree's leaves from left
		// to right, each leaf read and written once a batch, and the pages
		// above them stay in the page cache (random keys in arrival order
		// read a leaf from the disk almost every entry).
		slices.SortStableFunc(entries, func(a, b Stored) int { return bytes.Compare(a.Key[:], b.Key[:]) })
		st := tx.StmtContext(ctx, f.put)
		for i, e := range entries {
			if err := f.insert(ctx, tx, st, seq+1+int64(i), e); err != nil {
				return err
			}
			// Checked inside the batch, not after it: a batch of
			// thousands would otherwise pass the bound by its own size.
			if f.sinceFit++; f.maxBytes > 0 && f.sinceFit >= fitEvery {
				f.sinceFit = 0
				if err := fit(ctx, tx, f.maxBytes); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// insert adds e as the newest entry, in place of any under its key. A
// plain insert needs no statement journal (SQLite checks the unique index
// before it writes); "insert or replace" deletes then inserts, and keeps
// one for every entry: a tenth of a fill's CPU (issue 31). A key already
// there is rare (a run whose lookup missed it, or damage).
func (f *File) insert(ctx context.Context, tx *sql.Tx, st *sql.Stmt, seq int64, e Stored) error {
	_, err := st.ExecContext(ctx, seq, e.Key[:], e.AtMs, e.Val, e.Sum)
	var se *sqlite.Error
	if err == nil || !errors.As(err, &se) || se.Code() != sqlite3.SQLITE_CONSTRAINT_UNIQUE {
		return err
	}
	if _, err := tx.ExecContext(ctx, "delete from entry where "+key8+" = ?", e.Key[:8]); err != nil {
		return err
	}
	_, err = st.ExecContext(ctx, seq, e.Key[:], e.AtMs, e.Val, e.Sum)
	return err
}

// write runs do in one write transaction, one writer of the process at a
// time.
func (f *File) write(ctx context.Context, do func(tx *sql.Tx) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return classify(err)
	}
	defer tx.Rollback()
	if err := do(tx); err != nil {
		return classify(err)
	}
	return classify(tx.Commit())
}

// fitEvery is how many entries are put between checks of the size.
const fitEvery = 256

// fit deletes the oldest entries while the pages in use pass maxBytes.
func fit(ctx context.Context, tx *sql.Tx, maxBytes int64) error {
	var used, lo, hi sql.NullInt64
	if err := tx.QueryRowContext(ctx, `select (select page_count from pragma_page_count()) - (select freelist_count from pragma_freelist_count()),
		(select page_size from pragma_page_size())`).Scan(&used, &hi); err != nil {
		return err
	}
	bytes := used.Int64 * hi.Int64
	if bytes <= maxBytes {
		return nil
	}
	if err := tx.QueryRowContext(ctx, "select min(seq), max(seq) from entry").Scan(&lo, &hi); err != nil || !lo.Valid {
		return err
	}
	n := hi.Int64 - lo.Int64 + 1 // about the entries: replaced ones leave gaps
	per := max(1, bytes/n)
	drop := max((bytes-maxBytes*9/10)/per, n/50, 1)
	_, err := tx.ExecContext(ctx, "delete from entry where seq <= coalesce((select seq from entry order by seq limit 1 offset ?), (select max(seq) from entry))", drop-1)
	return err
}

// Delete implements Store.
func (f *File) Delete(ctx context.Context, keys []Key) error {
	return f.write(ctx, func(tx *sql.Tx) error {
		for _, k := range keys {
			if _, err := tx.ExecContext(ctx, "delete from entry where "+key8+" = ? and key = ?", k[:8], k[:]); err != nil {
				return err
			}
		}
		return nil
	})
}

// AddTotals implements Store.
func (f *File) AddTotals(ctx context.Context, t Totals) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, err := f.db.ExecContext(ctx, `update totals set hits = hits + ?, saved_prompt = saved_prompt + ?,
		saved_completion = saved_completion + ?, saved_usd = saved_usd + ?, costed = max(costed, ?) where id = 1`,
		t.Hits, t.SavedPrompt, t.SavedCompletion, t.SavedUSD, t.Costed)
	return classify(err)
}

// Stats implements Store.
func (f *File) Stats(ctx context.Context) (Stats, error) {
	s := Stats{Name: f.path, MaxBytes: f.maxBytes}
	var lo, hi sql.NullInt64
	if err := f.db.QueryRowContext(ctx, "select count(*), min(at), max(at) from entry").Scan(&s.Entries, &lo, &hi); err != nil {
		return s, classify(err)
	}
	if lo.Valid {
		s.Oldest, s.Newest = time.UnixMilli(lo.Int64), time.UnixMilli(hi.Int64)
	}
	var costed int64
	if err := f.db.QueryRowContext(ctx, "select hits, saved_prompt, saved_completion, saved_usd, costed from totals where id = 1").
		Scan(&s.Hits, &s.SavedPrompt, &s.SavedCompletion, &s.SavedUSD, &costed); err != nil {
		return s, classify(err)
	}
	s.Costed = costed != 0
	for _, p := range []string{f.path, f.path + "-wal"} {
		if st, err := os.Stat(p); err == nil {
			s.Bytes += st.Size()
		}
	}
	return s, nil
}

// Clear implements Store, and gives the freed pages back to the disk.
func (f *File) Clear(ctx context.Context, before time.Time) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q, args := "delete from entry", []any(nil)
	if !before.IsZero() {
		q, args = "delete from entry where at < ?", []any{before.UnixMilli()}
	}
	res, err := f.db.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, classify(err)
	}
	n, _ := res.RowsAffected()
	if _, err := f.db.ExecContext(ctx, "pragma incremental_vacuum"); err != nil {
		return n, classify(err)
	}
	_, err = f.db.ExecContext(ctx, "pragma wal_checkpoint(truncate)")
	return n, classify(err)
}

// Sole reports whether every entry in the file was put through this File
// since it opened the file empty (as far as its last Put could tell): a
// key it never put is then not there, and need not be looked up.
func (f *File) Sole() bool { return f.sole.Load() }

// Close implements Store.
func (f *File) Close() error { return f.db.Close() }

// RemoveFile deletes the cache file in dir and its journal: the way out of
// a damaged or foreign file (cache clear). No process may have it open.
func RemoveFile(dir string) error {
	var first error
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(filepath.Join(dir, FileName+suffix)); err != nil && !errors.Is(err, os.ErrNotExist) && first == nil {
			first = err
		}
	}
	return first
}
