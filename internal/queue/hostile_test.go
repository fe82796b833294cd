package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode"

	"github.com/jackc/pgx/v5"
)

// planWork sums, over every node of an EXPLAIN (ANALYZE, FORMAT JSON)
// plan, the rows it produced and the rows its filters threw away, times
// its loops: the work the statement did, in rows.
func planWork(node map[string]any) float64 {
	loops, _ := node["Actual Loops"].(float64)
	rows, _ := node["Actual Rows"].(float64)
	w := rows * loops
	for _, k := range []string{"Rows Removed by Filter", "Rows Removed by Join Filter", "Rows Removed by Index Recheck"} {
		if v, ok := node[k].(float64); ok {
			w += v * loops
		}
	}
	if kids, ok := node["Plans"].([]any); ok {
		for _, k := range kids {
			w += planWork(k.(map[string]any))
		}
	}
	return w
}

// The overlap check of a second push into a batch does work in proportion
// to the rows pushed, not to their product with the batch's rows, whatever
// the plan: 20,000 new rows against 20,000 visit a few rows per new row.
// The check that joined the two sets visited 400 million.
func TestOverlapCheckIsLinear(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	const n = 20000
	push(t, db, spec("big"), "d1", gen("a", n, ""))
	b, err := db.Batch(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// The next push's rows, as Push copies them: in the next seq block,
	// not yet committed.
	var base int64
	if err := tx.QueryRow(ctx, "select next_seq from hfsent.batch where id = $1", b.ID).Scan(&base); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"hfsent", "input"}, []string{"batch_id", "seq", "request_id", "text"},
		pgx.CopyFromSlice(n, func(i int) ([]any, error) {
			return []any{b.ID, base + int64(i), fmt.Sprintf("b%05d", i), "text"}, nil
		})); err != nil {
		t.Fatal(err)
	}
	// Whatever join the planner picks: without statistics on the rows
	// just copied it estimates a handful on each side, and picked a
	// nested loop over every pair (42 s for 20,000 against 20,000 in
	// bench/queue_push_overlap.sh). Here the other joins are ruled out,
	// so the check must stay linear within one.
	if _, err := tx.Exec(ctx, "set local enable_hashjoin = off; set local enable_mergejoin = off"); err != nil {
		t.Fatal(err)
	}
	var plan []struct {
		Plan map[string]any `json:"Plan"`
	}
	var raw []byte
	if err := tx.QueryRow(ctx, "explain (analyze, format json) "+overlapCheck, b.ID, base, seqBlock).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 {
		t.Fatalf("plan %s: %v", raw, err)
	}
	if w := planWork(plan[0].Plan); w > 10*n {
		t.Fatalf("the overlap check of %d rows against %d visited %.0f rows: it grows with their product", n, n, w)
	}
}

// The overlap check still finds ids already in the batch, compared trimmed,
// and takes ids of any length (the index holds a hash of the id).
func TestOverlapCheckFindsTrimmedIDsAndTakesLongOnes(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	s := spec("b")
	long := strings.Repeat("x", 20000)
	push(t, db, s, "d1", [][3]string{{"a1", "t", ""}, {long, "t", ""}})
	_, err := db.Push(ctx, PushRequest{Spec: s, Source: "two.csv", Digest: "d2"}, &rows{r: [][3]string{{"z", "t", ""}, {"  a1 ", "t", ""}}})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), `"  a1 "`) || !strings.Contains(err.Error(), "d1.csv") {
		t.Fatalf("a trimmed id already in the batch: %v", err)
	}
	_, err = db.Push(ctx, PushRequest{Spec: s, Source: "three.csv", Digest: "d3"}, &rows{r: [][3]string{{long + " ", "t", ""}}})
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("a long id already in the batch: %v", err)
	}
	res := push(t, db, s, "d4", [][3]string{{long + "y", "t", ""}, {"a2", "t", ""}})
	if res.Rows != 2 || res.Invalid != 0 {
		t.Fatalf("new ids, one of 20,001 characters: %+v", res)
	}
}

func TestCheckNameAndPrintable(t *testing.T) {
	for _, ok := range []string{"nightly", "team a/2026-01 (retry #2)", "café ☕", strings.Repeat("é", MaxNameChars)} {
		if err := CheckName(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
		if Printable(ok) != ok {
			t.Errorf("%q shown as %s", ok, Printable(ok))
		}
	}
	for _, bad := range []string{"a\nb", "a\rb", "x\x1b[31m", "a\u202eb", "zero\u200bwidth", "line\u2028sep", "del\x7f", "c1\u0085", "\xff", strings.Repeat("n", MaxNameChars+1)} {
		err := CheckName(bad)
		if !errors.Is(err, ErrName) {
			t.Errorf("%q accepted: %v", bad, err)
			continue
		}
		if strings.IndexFunc(err.Error(), func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			t.Errorf("%q: the message holds it raw: %q", bad, err)
		}
	}
	for in, want := range map[string]string{"a\nb": `"a\nb"`, "x\x1b[31m": `"x\x1b[31m"`, `"quoted"`: `"\"quoted\""`, "a\u202eb": `"a\u202eb"`, "\xff": `"\xff"`} {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %s, want %s", in, got, want)
		}
	}
}
