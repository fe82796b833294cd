package queue

import (
	"context"
	"embed"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/hfsent/hfsent/internal/sqlfile"
)

// The queue's statements: each is a file of sql/, whole, with its named
// parameters (@batch) and comments beside its clauses. A new statement is
// a new file there and a line here.
var (
	// A worker's round trip (Session.Cycle), in the order it sends them.
	sqlEnterBatchAsync    = load("enter_batch_async")
	sqlRelease            = load("release")
	sqlPromote            = load("promote")
	sqlComplete           = load("complete")
	sqlLockBatch          = load("lock_batch")
	sqlLowerMarks         = load("lower_marks")
	sqlReconcile          = load("reconcile")
	sqlReportBackpressure = load("report_backpressure")
	sqlClaim              = load("claim")
	sqlClaimOne           = load("claim_one")
	sqlRemaining          = load("remaining")

	// A worker's heartbeat (Session.Heartbeat).
	sqlEnterBatch = load("enter_batch")
	sqlRenew      = load("renew")
	sqlWorkerSeen = load("worker_seen")
	sqlExpired    = load("expired")
	sqlRescue     = load("rescue")

	// Batches, status and export.
	sqlBatch          = load("batch")
	sqlBatches        = load("batches")
	sqlBatchRows      = load("batch_rows")
	sqlLockPush       = load("lock_push")
	sqlDropGate       = load("drop_gate")
	sqlDrop           = load("drop")
	sqlNotify         = load("notify")
	sqlStatusCounts   = load("status_counts")
	sqlStatusOutcomes = load("status_outcomes")
	sqlStatusClients  = load("status_clients")
	sqlStatusWorkers  = load("status_workers")
	sqlStatusRate     = load("status_rate")
	sqlStatusSpend    = load("status_spend")
	sqlExport         = load("export")
	sqlExportColumns  = load("export_columns")
	sqlSchemaExists   = load("schema_exists")
	sqlSchemaVersion  = load("schema_version")

	// A push (DB.Push), in the order it sends them.
	sqlCreateBatch   = load("create_batch")
	sqlPushed        = load("pushed")
	sqlHadRows       = load("had_rows")
	sqlReserveSeqs   = load("reserve_seqs")
	sqlNewIDsTable   = load("new_ids_table")
	sqlNewIDsFill    = load("new_ids_fill")
	sqlNewIDsIndex   = load("new_ids_index")
	sqlNewIDsAnalyze = load("new_ids_analyze")
	sqlAddClients    = load("add_clients")
	sqlRecordPush    = load("record_push")
	sqlReopenBatch   = load("reopen_batch")
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// statement is one of the queue's statements.
type statement struct {
	name string // its file, sql/<name>.sql
	// sql is the statement as sent: its named parameters numbered ($1 ...)
	// by pgx's own rewriter, once, rather than on every send as
	// pgx.StrictNamedArgs would (a lexing of the whole text: see
	// BenchmarkNamedArgs). The text, and so the prepared statement and its
	// generic plan, is the same on every send.
	sql    string
	params []string // the parameters' names, in the order of their numbers
}

// load reads sql/<name>.sql. The files are built into the binary: one that
// is missing or malformed fails every test of the package at its start.
func load(name string) *statement {
	sql, params, err := number(sqlfile.Read(sqlFiles, name))
	if err != nil {
		panic(fmt.Sprintf("sql/%s.sql: %v", name, err))
	}
	return &statement{name: name, sql: sql, params: params}
}

// number numbers the named parameters of text as pgx.NamedArgs does (its
// own lexer decides what is a parameter, and not a comment or a string),
// and reads their names off where the two texts part: pgx copies the text
// and puts $n for each @name.
func number(text string) (string, []string, error) {
	sql, _, err := pgx.NamedArgs{}.RewriteQuery(context.Background(), nil, text, nil)
	if err != nil {
		return "", nil, err
	}
	var params []string
	i, j := 0, 0
	for i < len(text) && j < len(sql) {
		if text[i] == sql[j] {
			i, j = i+1, j+1
			continue
		}
		if text[i] != '@' || sql[j] != '$' {
			return "", nil, fmt.Errorf("cannot follow pgx's numbering at byte %d", i)
		}
		k := i + 1
		for k < len(text) && isNameByte(text[k]) {
			k++
		}
		m := j + 1
		for m < len(sql) && sql[m] >= '0' && sql[m] <= '9' {
			m++
		}
		n, err := strconv.Atoi(sql[j+1 : m])
		if err != nil {
			return "", nil, fmt.Errorf("cannot follow pgx's numbering at byte %d", i)
		}
		switch name := text[i+1 : k]; {
		case n == len(params)+1:
			params = append(params, name)
		case n > len(params) || params[n-1] != name:
			return "", nil, fmt.Errorf("@%s numbered $%d out of order", name, n)
		}
		i, j = k, m
	}
	if i != len(text) || j != len(sql) {
		return "", nil, fmt.Errorf("cannot follow pgx's numbering to the end")
	}
	return sql, params, nil
}

func isNameByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// with binds the statement's parameters by name, for a query method or a
// pgx.Batch (pgx.QueryRewriter): every parameter must be given and no
// other, as pgx.StrictNamedArgs checks; a mistake fails the statement,
// naming it.
func (s *statement) with(args pgx.StrictNamedArgs) pgx.QueryRewriter { return bound{s, args} }

// queue queues the statement with args on b.
func (s *statement) queue(b *pgx.Batch, args pgx.StrictNamedArgs) *pgx.QueuedQuery {
	return b.Queue(s.sql, s.with(args))
}

type bound struct {
	s    *statement
	args pgx.StrictNamedArgs
}

func (b bound) RewriteQuery(context.Context, *pgx.Conn, string, []any) (string, []any, error) {
	out := make([]any, len(b.s.params))
	for i, p := range b.s.params {
		v, ok := b.args[p]
		if !ok {
			return "", nil, fmt.Errorf("sql/%s.sql: no value for @%s", b.s.name, p)
		}
		out[i] = v
	}
	if len(b.args) != len(b.s.params) {
		var extra []string
		for name := range b.args {
			if !slices.Contains(b.s.params, name) {
				extra = append(extra, "@"+name)
			}
		}
		slices.Sort(extra)
		return "", nil, fmt.Errorf("sql/%s.sql has no %s", b.s.name, strings.Join(extra, ", "))
	}
	return b.s.sql, out, nil
}
