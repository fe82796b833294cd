package queue

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"

	"github.com/hfsent/hfsent/internal/results"
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
	if err := listNewIDs(ctx, tx, b.ID, base); err != nil {
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
	w := planWork(plan[0].Plan)
	t.Logf("the check of %d rows against %d visited %.0f rows", n, n, w)
	if w > 10*n {
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

// exportCSV exports batch name and parses the results CSV, header first.
func exportCSV(t *testing.T, db *DB, name string) [][]string {
	t.Helper()
	var b strings.Builder
	w, err := results.NewWriter(&b, false)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := db.Batch(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Export(context.Background(), batch, w, false); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(strings.NewReader(b.String())).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// exportAttempts exports batch name and returns each row's outcome and
// attempts, by id.
func exportAttempts(t *testing.T, db *DB, name string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, f := range exportCSV(t, db, name)[1:] {
		out[f[0]] = f[4] + " " + f[6]
	}
	return out
}

// claimSoon claims until n rows come (rescued rows are due after a backoff).
func claimSoon(t *testing.T, s *Session, n int) []Claimed {
	t.Helper()
	var got []Claimed
	for deadline := time.Now().Add(5 * time.Second); len(got) < n && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		out, err := s.Cycle(context.Background(), CycleIn{Want: n - len(got)})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, out.Claimed...)
	}
	if len(got) != n {
		t.Fatalf("claimed %d rows, want %d", len(got), n)
	}
	return got
}

// attempts counts the provider calls of every claim of a row: those its
// results reported, and one for each claim whose worker stopped without a
// result (it had sent the row), whether the row is then redone, finished
// with its last failure when its attempts are used up, or still waiting.
func TestAttemptsCountClaimsLostWithTheirWorker(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	s := spec("lost")
	s.Lease, s.MaxAttempts = 200*time.Millisecond, 3
	b := push(t, db, s, "d", gen("r", 3, "c")).Batch
	a := db.NewSession(b, "A", 0)
	claimSoon(t, a, 3) // A sends all three and is killed
	time.Sleep(300 * time.Millisecond)
	other := db.NewSession(b, "B", time.Minute)
	if _, back, _, err := other.Heartbeat(ctx, "h", 1, nil); err != nil || back != 3 {
		t.Fatalf("rescue: %d back, %v", back, err)
	}
	if got := exportAttempts(t, db, "lost"); got["r0002"] != "not_attempted 1" {
		t.Fatalf("a row waiting after a lost claim: %s, want attempts 1", got["r0002"])
	}
	// B redoes two rows: one in one call, one failed after two calls
	// (retried within the claim) and put back.
	cs := claimSoon(t, other, 2)
	ok, failed := cs[0], cs[1]
	done := succeed([]Claimed{ok}, "B")
	done = append(done, Completion{Seq: failed.Seq, Attempt: failed.Attempt, Action: Retry, Outcome: "upstream_timeout", Error: "slow",
		Attempts: 2, WaitMs: 0, TotalMs: 3})
	if out, err := other.Cycle(ctx, CycleIn{Done: done}); err != nil || out.Written != 2 {
		t.Fatalf("B's results: %+v %v", out, err)
	}
	// C claims the other two and is killed too: the failed row has used
	// its three attempts.
	c := db.NewSession(b, "C", 200*time.Millisecond)
	rest := claimSoon(t, c, 2)
	time.Sleep(300 * time.Millisecond)
	if _, back, exhausted, err := other.Heartbeat(ctx, "h", 1, nil); err != nil || back != 1 || exhausted != 1 {
		t.Fatalf("second rescue: %d back, %d exhausted, %v", back, exhausted, err)
	}
	waiting := rest[0].RequestID
	if waiting == failed.RequestID {
		waiting = rest[1].RequestID
	}
	got := exportAttempts(t, db, "lost")
	for id, want := range map[string]string{
		ok.RequestID:     "success 2",          // A's lost call, B's call
		failed.RequestID: "upstream_timeout 4", // A's, B's two, C's
		waiting:          "not_attempted 2",    // A's, C's; pending again
	} {
		if got[id] != want {
			t.Errorf("%s: %s, want %s", id, got[id], want)
		}
	}
}
