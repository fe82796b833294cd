package queue

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// A round trip's write looks up each row's earlier result by its key, in
// the plan PostgreSQL caches for the statement (a generic plan, made while
// a batch has few results): one that walked every result of the batch for
// each row written made a round trip's cost grow with the batch (issue 31,
// item 3: 6.7 ms a write by the end of 6,000 rows).
func TestCompleteLooksUpResultsByKey(t *testing.T) {
	db := openDB(t)
	b := push(t, db, spec("plan"), "d", gen("r", 4, "")).Batch
	ctx := context.Background()
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	s := &Session{db: db, batch: b, owner: "w"}
	args := s.completionArgs(succeed([]Claimed{{Seq: 1, Attempt: 1}}, "x"))
	sql, params, err := sqlComplete.with(args).RewriteQuery(ctx, conn.Conn(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "set plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "prepare complete_plan as "+sql); err != nil {
		t.Fatal(err)
	}
	lits := make([]string, len(params))
	for i := range params {
		lits[i] = "$" + strconv.Itoa(i+1)
	}
	// Sent as text, the arguments written into it by pgx: EXPLAIN takes
	// no parameters.
	rows, err := conn.Query(ctx, "explain (costs off) execute complete_plan("+strings.Join(lits, ", ")+")",
		append([]any{pgx.QueryExecModeSimpleProtocol}, params...)...)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	for i, line := range plan {
		if !strings.Contains(line, " on result ") || !strings.Contains(line, "Scan") {
			continue
		}
		if i+1 >= len(plan) || !strings.Contains(plan[i+1], "seq = ") {
			t.Errorf("a scan of the results not by the row's key:\n%s", text)
		}
	}
}
