package queue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/input"
	"github.com/hfsent/hfsent/internal/queue/pgtest"
	"github.com/hfsent/hfsent/internal/results"
)

func openDB(t *testing.T) *DB {
	t.Helper()
	db, err := Open(context.Background(), pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return db
}

// rows is a Source of rows {id, text, client}.
type rows struct {
	r [][3]string
	i int
}

func (s *rows) Next() (input.Row, error) {
	if s.i == len(s.r) {
		return input.Row{}, io.EOF
	}
	r := s.r[s.i]
	s.i++
	return input.Row{Seq: int64(s.i - 1), ID: r[0], Text: r[1], Client: r[2]}, nil
}

func spec(name string) Spec {
	return Spec{Name: name, Model: "m", GlobalCap: 4, Lease: 30 * time.Second, MaxAttempts: 3, MaxChars: 100}
}

func push(t *testing.T, db *DB, s Spec, digest string, r [][3]string) PushResult {
	t.Helper()
	res, err := db.Push(context.Background(), PushRequest{Spec: s, Source: digest + ".csv", Digest: digest}, &rows{r: r})
	if err != nil {
		t.Fatalf("push %s: %v", digest, err)
	}
	return res
}

func gen(prefix string, n int, client string) [][3]string {
	out := make([][3]string, n)
	for i := range out {
		out[i] = [3]string{fmt.Sprintf("%s%04d", prefix, i), fmt.Sprintf("text %s %d", prefix, i), client}
	}
	return out
}

// queryInt runs a query that answers one number.
func queryInt(t *testing.T, db *DB, q string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.Pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// succeed finishes claimed rows as success.
func succeed(cs []Claimed, label string) []Completion {
	out := make([]Completion, len(cs))
	for i, c := range cs {
		out[i] = Completion{Seq: c.Seq, Attempt: c.Attempt, Action: Finish, Outcome: "success", Label: label, Score: 0.9,
			Model: "m", Attempts: 1, LatencyMs: 5, WaitMs: 0, TotalMs: 5}
	}
	return out
}

func exportRows(t *testing.T, db *DB, name string) []results.Row {
	t.Helper()
	recs := exportCSV(t, db, name)
	var out []results.Row
	for _, f := range recs[1:] {
		// Model holds the outcome column, for the tests.
		out = append(out, results.Row{RequestID: f[0], Label: f[2], Model: f[4], Error: f[8]})
	}
	return out
}

func TestPushIdempotentRefusedAndInOrder(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	s := spec("b")
	first := append(gen("a", 5, ""), [3]string{"a0001", "dup id", ""}, [3]string{"x", "  ", ""})
	res := push(t, db, s, "d1", first)
	if !res.Created || res.Rows != 7 || res.Invalid != 2 {
		t.Fatalf("first push: %+v", res)
	}
	// The same file again: nothing doubled.
	again := push(t, db, s, "d1", first)
	if !again.Already || again.Rows != 0 {
		t.Fatalf("second push of the same file: %+v", again)
	}
	// Another file with an id already there: refused, nothing added.
	_, err := db.Push(ctx, PushRequest{Spec: s, Source: "other.csv", Digest: "d2"}, &rows{r: [][3]string{{"z1", "new", ""}, {"a0003", "clash", ""}}})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), `"a0003"`) || !strings.Contains(err.Error(), "d1.csv") {
		t.Fatalf("overlapping push: %v", err)
	}
	// A setting given that differs from the batch's: refused.
	s2 := s
	s2.GlobalCap = 9
	_, err = db.Push(ctx, PushRequest{Spec: s2, Source: "c.csv", Digest: "d3", Given: func(f string) bool { return f == "global-cap" }}, &rows{r: gen("c", 1, "")})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "--global-cap 4") {
		t.Fatalf("changed cap: %v", err)
	}
	// New ids append after the first file.
	push(t, db, s, "d4", gen("b", 3, ""))
	got := exportRows(t, db, "b")
	var ids []string
	for _, r := range got {
		ids = append(ids, r.RequestID+":"+r.Model)
	}
	want := "a0000:not_attempted a0001:not_attempted a0002:not_attempted a0003:not_attempted a0004:not_attempted a0001:invalid_input x:invalid_input b0000:not_attempted b0001:not_attempted b0002:not_attempted"
	if strings.Join(ids, " ") != want {
		t.Fatalf("export order:\n got %s\nwant %s", strings.Join(ids, " "), want)
	}
	st, err := db.Status(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if st.Total() != 10 || st.Pending != 8 || st.Done != 2 || st.Outcomes["invalid_input"] != 2 {
		t.Fatalf("status does not add up: %+v", st)
	}
}

// Many sessions claim at once, each holding rows a random while: the rows
// they hold never exceed the global cap nor the per-client cap. A session's
// count is raised once the claim has committed and lowered before its
// completion commits, so it never exceeds what the database counts: an
// over-admission in the database shows here.
func TestCapsHoldUnderConcurrentClaims(t *testing.T) {
	s := spec("caps")
	s.GlobalCap, s.ClientCap, s.ClientColumn = 5, 2, "client"
	var r [][3]string
	r = append(r, gen("tiny", 3, "tiny")...)
	r = append(r, gen("small", 40, "small")...)
	r = append(r, gen("big", 150, "big")...)
	r = append(r, gen("huge", 150, "huge")...)
	capsHold(t, s, r)
}

// The same with one client and no client cap, which a smaller statement
// claims (claimOne).
func TestGlobalCapHoldsUnderConcurrentClaims(t *testing.T) {
	s := spec("caps")
	s.GlobalCap = 5
	capsHold(t, s, gen("r", 343, ""))
}

func capsHold(t *testing.T, s Spec, r [][3]string) {
	db := openDB(t)
	res := push(t, db, s, "d", r)
	b := res.Batch

	var mu sync.Mutex
	total, maxTotal := 0, 0
	per, maxPer := map[string]int{}, 0
	client := func(seq int64) string { return r[seq][2] }
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sess := db.NewSession(b, fmt.Sprintf("w%d", w), 30*time.Second)
			var held []Claimed
			for range 2000 {
				var done []Claimed
				if len(held) > 0 && rand.IntN(2) == 0 {
					k := rand.IntN(len(held)) + 1
					done, held = held[:k], held[k:]
				}
				mu.Lock()
				for _, c := range done {
					total--
					per[client(c.Seq)]--
				}
				mu.Unlock()
				out, err := sess.Cycle(context.Background(), CycleIn{Done: succeed(done, "P"), Want: 1 + rand.IntN(4), AskRemaining: len(held) == 0})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, c := range out.Claimed {
					total++
					per[client(c.Seq)]++
					maxTotal = max(maxTotal, total)
					maxPer = max(maxPer, per[client(c.Seq)])
				}
				mu.Unlock()
				held = append(held, out.Claimed...)
				if len(held) == 0 && len(out.Claimed) == 0 && !out.Remaining {
					return
				}
				time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
			}
			errs <- fmt.Errorf("session %d did not finish", w)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if maxTotal > 5 || (s.ClientCap > 0 && maxPer > 2) {
		t.Fatalf("caps broken: %d rows held at once (cap 5), %d by one client (cap 2)", maxTotal, maxPer)
	}
	if maxTotal < 4 {
		t.Fatalf("at most %d rows held at once: the caps were never approached, so not tested", maxTotal)
	}
	st, err := db.Status(context.Background(), "caps")
	if err != nil {
		t.Fatal(err)
	}
	if st.Done != int64(len(r)) || st.Outcomes["success"] != int64(len(r)) {
		t.Fatalf("not every row finished once: %+v", st)
	}
}

// One-row claims take turns between clients: a client with 5 rows behind
// one with 500 (pushed first) is served long before the big one is done,
// both when a row of the big one is running (the client with fewer rows
// running goes first) and when none is (the one served longest ago goes
// first).
func TestSmallClientIsNotStarved(t *testing.T) {
	for _, hold := range []int{1, 0} {
		t.Run(fmt.Sprintf("held=%d", hold), func(t *testing.T) {
			db := openDB(t)
			s := spec("fair")
			s.GlobalCap, s.ClientColumn = hold+1, "client"
			r := append(gen("big", 500, "big"), gen("small", 5, "small")...)
			b := push(t, db, s, "d", r).Batch
			sess := db.NewSession(b, "w", 30*time.Second)
			var held []Claimed
			bigDone, smallDone := 0, 0
			for smallDone < 5 {
				var done []Claimed
				if len(held) > hold {
					done, held = held[:1], held[1:]
				}
				for _, c := range done {
					if c.Seq < 500 {
						bigDone++
					} else {
						smallDone++
					}
				}
				out, err := sess.Cycle(context.Background(), CycleIn{Done: succeed(done, "P"), Want: 1})
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, out.Claimed...)
				if bigDone > 100 {
					t.Fatalf("the small client has %d of 5 rows done after %d of the big one's: starved", smallDone, bigDone)
				}
			}
			if bigDone > 10 {
				t.Fatalf("the small client finished after %d of the big one's rows; want turns", bigDone)
			}
		})
	}
}

// A worker that stalls past its lease loses its rows to another, and its
// late results are discarded, never written over the other's.
func TestFencedCompletionAfterRescue(t *testing.T) {
	db := openDB(t)
	s := spec("fence")
	s.Lease = 300 * time.Millisecond
	b := push(t, db, s, "d", gen("r", 2, "")).Batch
	ctx := context.Background()
	a := db.NewSession(b, "A", 0)
	outA, err := a.Cycle(ctx, CycleIn{Want: 2})
	if err != nil || len(outA.Claimed) != 2 {
		t.Fatalf("A claimed %v: %v", outA.Claimed, err)
	}
	time.Sleep(400 * time.Millisecond)
	bs := db.NewSession(b, "B", 30*time.Second)
	_, rescued, exhausted, err := bs.Heartbeat(ctx, "h", 1, nil)
	if err != nil || rescued != 2 || exhausted != 0 {
		t.Fatalf("rescue: %d back, %d exhausted, %v", rescued, exhausted, err)
	}
	var got []Claimed
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < 2 && time.Now().Before(deadline) {
		out, err := bs.Cycle(ctx, CycleIn{Want: 2})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, out.Claimed...)
		time.Sleep(50 * time.Millisecond)
	}
	if len(got) != 2 || got[0].Attempt != 2 {
		t.Fatalf("B claimed %+v", got)
	}
	// A comes back while B holds the rows: its results are refused.
	late, err := a.Cycle(ctx, CycleIn{Done: succeed(outA.Claimed, "A")})
	if err != nil {
		t.Fatal(err)
	}
	if late.Written != 0 || len(late.Discarded) != 2 {
		t.Fatalf("A's late results: %d written, %d discarded; want 0 and 2", late.Written, len(late.Discarded))
	}
	outB, err := bs.Cycle(ctx, CycleIn{Done: succeed(got, "B")})
	if err != nil || outB.Written != 2 {
		t.Fatalf("B wrote %d: %v", outB.Written, err)
	}
	for _, r := range exportRows(t, db, "fence") {
		if r.Label != "B" {
			t.Fatalf("row %s has label %q: the stalled worker overwrote it", r.RequestID, r.Label)
		}
	}
}

// A row whose attempts are used up ends with its last failure; one that
// never got a result ends upstream_failed, saying why.
func TestRescueUsesUpAttempts(t *testing.T) {
	db := openDB(t)
	s := spec("rescue")
	s.Lease, s.MaxAttempts = 200*time.Millisecond, 2
	b := push(t, db, s, "d", gen("r", 2, "")).Batch
	ctx := context.Background()
	w := db.NewSession(b, "w", 0)
	out, err := w.Cycle(ctx, CycleIn{Want: 2})
	if err != nil || len(out.Claimed) != 2 {
		t.Fatal(out, err)
	}
	// r0000 fails and is retried at once; r0001's worker vanishes.
	fail := Completion{Seq: out.Claimed[0].Seq, Attempt: 1, Action: Retry, Outcome: "upstream_timeout", Error: "slow", WaitMs: 0, TotalMs: 3, Attempts: 1}
	if _, err := w.Cycle(ctx, CycleIn{Done: []Completion{fail}}); err != nil {
		t.Fatal(err)
	}
	// Claim r0000 again (attempt 2), then let both leases expire.
	var again []Claimed
	for deadline := time.Now().Add(3 * time.Second); len(again) == 0 && time.Now().Before(deadline); {
		o, err := w.Cycle(ctx, CycleIn{Want: 1})
		if err != nil {
			t.Fatal(err)
		}
		again = o.Claimed
	}
	if len(again) != 1 || again[0].Attempt != 2 {
		t.Fatalf("second claim: %+v", again)
	}
	time.Sleep(300 * time.Millisecond)
	other := db.NewSession(b, "o", time.Second)
	_, back, exhausted, err := other.Heartbeat(ctx, "h", 1, nil)
	if err != nil || back != 1 || exhausted != 1 {
		t.Fatalf("rescue: %d back, %d exhausted, %v", back, exhausted, err)
	}
	rs := exportRows(t, db, "rescue")
	if rs[0].Model != "upstream_timeout" || rs[0].Error != "slow" {
		t.Fatalf("r0000 ended %s %q; want its last failure", rs[0].Model, rs[0].Error)
	}
	if rs[1].Model != "not_attempted" {
		t.Fatalf("r0001 is %s; want pending again", rs[1].Model)
	}
}

// A round trip is one transaction: when its claim fails, the results it
// carries are not written either (they are sent again), so the results and
// the claim cost the server one transaction, not two.
func TestResultsCommitWithTheClaim(t *testing.T) {
	db := openDB(t)
	b := push(t, db, spec("atomic"), "d", gen("r", 2, "")).Batch
	ctx := context.Background()
	w := db.NewSession(b, "w", 0)
	out, err := w.Cycle(ctx, CycleIn{Want: 1})
	if err != nil || len(out.Claimed) != 1 {
		t.Fatal(out, err)
	}
	// Another transaction holds the batch row: the round trip waits at the
	// lock, after its results, and is cancelled there (by the server: a
	// client that gives up cannot tell whether the commit it sent ran).
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "select 1 from hfsent.batch where id = $1 for update", b.ID); err != nil {
		t.Fatal(err)
	}
	failed := make(chan error, 1)
	go func() {
		_, err := w.Cycle(ctx, CycleIn{Done: succeed(out.Claimed, "lost"), Want: 1})
		failed <- err
	}()
	for cancelled := false; !cancelled; {
		if err := tx.QueryRow(ctx, `select count(pg_cancel_backend(pid)) > 0 from pg_stat_activity
			where datname = current_database() and wait_event_type = 'Lock' and pid <> pg_backend_pid()`).Scan(&cancelled); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := <-failed; err == nil {
		t.Fatal("the round trip went through a locked batch row")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var state string
	if err := db.Pool.QueryRow(ctx, "select state from hfsent.item where batch_id = $1 and seq = $2", b.ID, out.Claimed[0].Seq).Scan(&state); err != nil {
		t.Fatal(err)
	}
	if state != "running" {
		t.Fatalf("the row is %s after a round trip whose claim failed; want running (its result undone)", state)
	}
	if o, err := w.Cycle(ctx, CycleIn{Done: succeed(out.Claimed, "again")}); err != nil || o.Written != 1 {
		t.Fatalf("sent again: %+v, %v", o, err)
	}
}

// A claim starts its probe of the pending rows at the client's
// pending_from and raises it past the rows it took, so that it does not walk
// the index entries of every row claimed before (dead until VACUUM); and
// whatever puts a row below it back to pending (a give-back, a retry, a
// rescue, a reconcile) lowers it, so that the row is claimed again.
func TestPendingFromFollowsTheClaims(t *testing.T) {
	db := openDB(t)
	s := spec("mark")
	s.GlobalCap, s.Lease = 1000, 300*time.Millisecond
	b := push(t, db, s, "d", gen("r", 300, "")).Batch
	ctx := context.Background()
	mark := func() int64 {
		t.Helper()
		return queryInt(t, db, "select pending_from from hfsent.client where batch_id = $1", b.ID)
	}
	w := db.NewSession(b, "w", 30*time.Second)
	first, err := w.Cycle(ctx, CycleIn{Want: 5})
	if err != nil || len(first.Claimed) != 5 {
		t.Fatal(first, err)
	}
	for range 20 {
		out, err := w.Cycle(ctx, CycleIn{Want: 10})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Cycle(ctx, CycleIn{Done: succeed(out.Claimed, "x")}); err != nil {
			t.Fatal(err)
		}
	}
	if m := mark(); m < 150 || m > 205 {
		t.Fatalf("pending_from is %d after 205 rows claimed; want it raised past most of them", m)
	}
	// claimAgain claims until it gets seq, which was put back.
	claimAgain := func(how string, seq int64) Claimed {
		t.Helper()
		if m := mark(); m > seq {
			t.Fatalf("%s: pending_from %d is above row %d, pending again", how, m, seq)
		}
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			out, err := w.Cycle(ctx, CycleIn{Want: 1})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range out.Claimed {
				if c.Seq == seq {
					return c
				}
				if _, err := w.Cycle(ctx, CycleIn{Done: succeed([]Claimed{c}, "x")}); err != nil {
					t.Fatal(err)
				}
			}
		}
		t.Fatalf("%s: row %d was never claimed again", how, seq)
		return Claimed{}
	}
	c0, c1, c2 := first.Claimed[0], first.Claimed[1], first.Claimed[2]
	gb := Completion{Seq: c0.Seq, Attempt: c0.Attempt, Action: GiveBack, Outcome: "not_attempted", WaitMs: -1}
	if _, err := w.Cycle(ctx, CycleIn{Done: []Completion{gb}}); err != nil {
		t.Fatal(err)
	}
	claimAgain("give-back", c0.Seq)
	retry := Completion{Seq: c1.Seq, Attempt: c1.Attempt, Action: Retry, Outcome: "upstream_timeout", Attempts: 1, WaitMs: 0, TotalMs: 1}
	if _, err := w.Cycle(ctx, CycleIn{Done: []Completion{retry}}); err != nil {
		t.Fatal(err)
	}
	claimAgain("retry", c1.Seq)
	// Reconcile: the worker says it holds none of c0, c1, c2 (claims
	// whose answer was lost): all three go back.
	if _, err := w.Cycle(ctx, CycleIn{Reconcile: true, Held: []int64{}}); err != nil {
		t.Fatal(err)
	}
	c2 = claimAgain("reconcile", c2.Seq)
	// Rescue: c2's lease (this worker's, 300ms) expires; another worker's
	// heartbeat puts it back, due after a backoff of 0.5 to 1 s.
	short := db.NewSession(b, "w", 0)
	if _, err := short.Cycle(ctx, CycleIn{Done: []Completion{{Seq: c2.Seq, Attempt: c2.Attempt, Action: GiveBack, Outcome: "not_attempted", WaitMs: -1}}}); err != nil {
		t.Fatal(err)
	}
	var again Claimed
	for again.Seq != c2.Seq {
		out, err := short.Cycle(ctx, CycleIn{Want: 1})
		if err != nil || len(out.Claimed) != 1 {
			t.Fatal(out, err)
		}
		again = out.Claimed[0]
	}
	// Rows after it are taken, so pending_from passes it.
	more, err := w.Cycle(ctx, CycleIn{Want: 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Cycle(ctx, CycleIn{Done: succeed(more.Claimed, "x")}); err != nil {
		t.Fatal(err)
	}
	if m := mark(); m <= c2.Seq {
		t.Fatalf("pending_from is %d, not past row %d", m, c2.Seq)
	}
	time.Sleep(400 * time.Millisecond)
	if _, back, _, err := db.NewSession(b, "o", 0).Heartbeat(ctx, "h", 1, nil); err != nil || back < 1 {
		t.Fatalf("rescue: %d back, %v", back, err)
	}
	claimAgain("rescue", c2.Seq)
}

func TestGiveBackUndoesTheClaim(t *testing.T) {
	db := openDB(t)
	b := push(t, db, spec("give"), "d", gen("r", 1, "")).Batch
	ctx := context.Background()
	w := db.NewSession(b, "w", 0)
	out, _ := w.Cycle(ctx, CycleIn{Want: 1})
	gb := Completion{Seq: out.Claimed[0].Seq, Attempt: 1, Action: GiveBack, Outcome: "not_attempted", WaitMs: -1}
	if o, err := w.Cycle(ctx, CycleIn{Done: []Completion{gb}}); err != nil || o.Written != 1 {
		t.Fatal(o, err)
	}
	out, _ = w.Cycle(ctx, CycleIn{Want: 1})
	if len(out.Claimed) != 1 || out.Claimed[0].Attempt != 1 {
		t.Fatalf("after a give-back the row is claimed as %+v; want attempt 1 again", out.Claimed)
	}
}

// A 429 pause or an open breaker reported by one worker holds every
// worker's claims until it passes; a worker with a fallback claims through
// an open breaker.
func TestSharedPauseAndBreaker(t *testing.T) {
	db := openDB(t)
	b := push(t, db, spec("bp"), "d", gen("r", 4, "")).Batch
	ctx := context.Background()
	a, o := db.NewSession(b, "a", 0), db.NewSession(b, "o", 0)
	if _, err := a.Cycle(ctx, CycleIn{PauseFor: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	out, err := o.Cycle(ctx, CycleIn{Want: 4})
	if err != nil || len(out.Claimed) != 0 || out.Paused < time.Second || out.Paused > 2100*time.Millisecond {
		t.Fatalf("during a shared pause: claimed %d, paused %s, %v", len(out.Claimed), out.Paused, err)
	}
	if _, err := db.Pool.Exec(ctx, "update hfsent.batch set paused_until = null"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Cycle(ctx, CycleIn{OpenFor: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	out, _ = o.Cycle(ctx, CycleIn{Want: 4})
	if len(out.Claimed) != 0 || out.Open < 4*time.Second {
		t.Fatalf("during a shared open breaker: claimed %d, open %s", len(out.Claimed), out.Open)
	}
	out, _ = o.Cycle(ctx, CycleIn{Want: 4, Fallback: true})
	if len(out.Claimed) != 4 {
		t.Fatalf("with a fallback, claimed %d of 4 through an open breaker", len(out.Claimed))
	}
}

// --global-rps: claims draw from a bucket in the batch row.
func TestGlobalRateBucket(t *testing.T) {
	db := openDB(t)
	s := spec("rps")
	s.GlobalCap, s.GlobalRPS = 1000, 4
	b := push(t, db, s, "d", gen("r", 200, "")).Batch
	w := db.NewSession(b, "w", 0)
	start := time.Now()
	claimed := 0
	for time.Since(start) < time.Second {
		out, err := w.Cycle(context.Background(), CycleIn{Want: 100})
		if err != nil {
			t.Fatal(err)
		}
		claimed += len(out.Claimed)
		time.Sleep(20 * time.Millisecond)
	}
	el := time.Since(start).Seconds()
	if limit := 4 + 4*el + 1; float64(claimed) > limit || claimed < 4 {
		t.Fatalf("%d rows claimed in %.2fs at --global-rps 4 (burst 4): want between 4 and %.0f", claimed, el, limit)
	}
}

func TestSchemaChecks(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	if err := db.Check(ctx); !errors.Is(err, ErrNoSchema) {
		t.Fatalf("empty database: %v", err)
	}
	if _, to, err := db.Migrate(ctx); err != nil || to != Latest() {
		t.Fatalf("migrate: %d %v", to, err)
	}
	if err := db.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "update "+versionTable+" set version = version + 1"); err != nil {
		t.Fatal(err)
	}
	if err := db.Check(ctx); !errors.Is(err, ErrNewer) {
		t.Fatalf("newer schema: %v", err)
	}
	if _, _, err := db.Migrate(ctx); !errors.Is(err, ErrNewer) {
		t.Fatalf("migrate onto a newer schema: %v", err)
	}
	if _, err := db.Batch(ctx, "nope"); !errors.Is(err, ErrNoBatch) {
		t.Fatalf("missing batch: %v", err)
	}
}

// Reservations (batches of one client without client cap or rate): a
// reserved row stays pending and counts against no cap, other workers pass
// over it while its lease holds, and it runs only in the place of a row of
// its worker's that is still running (in the transaction that writes that
// row), or by a claim, which runs the worker's own reservations first.
func TestReservations(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	b := push(t, db, spec("res"), "d", gen("r", 10, "")).Batch // global cap 4
	a := db.NewSession(b, "a", 0)
	other := db.NewSession(b, "b", 0)
	if !a.Reserves() {
		t.Fatal("a batch of one client with no client cap or rate does not reserve")
	}
	running := func() int64 {
		t.Helper()
		return queryInt(t, db, "select count(*) from hfsent.item where batch_id = $1 and state = 'running'", b.ID)
	}
	split := func(cs []Claimed) (run, res []Claimed) {
		for _, c := range cs {
			if c.Reserved {
				res = append(res, c)
			} else {
				run = append(run, c)
			}
		}
		return run, res
	}

	out, err := a.Cycle(ctx, CycleIn{Want: 2, Reserve: 3})
	if err != nil {
		t.Fatal(err)
	}
	aRun, aRes := split(out.Claimed)
	if len(aRun) != 2 || len(aRes) != 3 || running() != 2 {
		t.Fatalf("claimed %+v; %d running, want 2 running and 3 reserved", out.Claimed, running())
	}
	if st, err := db.Status(ctx, "res"); err != nil || st.Pending != 8 || st.Reserved != 3 || st.Running != 2 {
		t.Fatalf("status: %+v, %v; want 8 pending (3 of them reserved), 2 running", st, err)
	}
	if aRes[0].Attempt != 1 {
		t.Fatalf("a reservation's attempt is %d, want 1 (the attempt it will run as)", aRes[0].Attempt)
	}
	// The reservations count against no cap, and another worker passes
	// over them.
	out, err = other.Cycle(ctx, CycleIn{Want: 4})
	if err != nil {
		t.Fatal(err)
	}
	bRun, _ := split(out.Claimed)
	if len(bRun) != 2 || running() != 4 {
		t.Fatalf("the other worker claimed %+v with %d running; want 2 (the room the cap leaves)", out.Claimed, running())
	}
	for _, c := range bRun {
		for _, r := range aRes {
			if c.Seq == r.Seq {
				t.Fatalf("the other worker claimed row %d, reserved by the first", c.Seq)
			}
		}
	}

	// A swap in the place of a row that is not this worker's running row
	// (the other worker's) does nothing.
	stray := succeed(aRun[:1], "x")[0]
	stray.Seq, stray.Attempt, stray.Promote = bRun[0].Seq, bRun[0].Attempt, &aRes[0]
	out, err = a.Cycle(ctx, CycleIn{Done: []Completion{stray}})
	if err != nil || len(out.Promoted) != 0 || out.Written != 0 || running() != 4 {
		t.Fatalf("a swap for another worker's row: %+v, %v; %d running", out, err, running())
	}
	// A swap in the place of its own row: the row is written and the
	// reservation runs, in one commit; the count stays at the cap.
	done := succeed(aRun[:1], "a")
	done[0].Promote = &aRes[0]
	out, err = a.Cycle(ctx, CycleIn{Done: done})
	if err != nil || len(out.Promoted) != 1 || out.Promoted[0] != aRes[0].Seq || out.Written != 1 || running() != 4 {
		t.Fatalf("a swap: %+v, %v; %d running", out, err, running())
	}
	// Its result is fenced on the attempt it ran as.
	if out, err := a.Cycle(ctx, CycleIn{Done: succeed(aRes[:1], "a")}); err != nil || out.Written != 1 {
		t.Fatalf("the swapped row's result: %+v, %v", out, err)
	}

	// A claim runs the worker's own reservations first, within the room.
	out, err = a.Cycle(ctx, CycleIn{Want: 1, Promote: []int64{aRes[2].Seq}})
	if err != nil {
		t.Fatal(err)
	}
	if run, _ := split(out.Claimed); len(run) != 1 || run[0].Seq != aRes[2].Seq || run[0].Attempt != 1 || running() != 4 {
		t.Fatalf("claimed %+v with %d running; want reservation %d running as attempt 1", out.Claimed, running(), aRes[2].Seq)
	}

	// The heartbeat renews a reservation's lease; given back, another
	// worker can claim it.
	if renewed, _, _, err := a.Heartbeat(ctx, "h", 1, []int64{aRes[1].Seq}); err != nil || len(renewed) != 1 {
		t.Fatalf("heartbeat renewed %d, %v; want the reservation", renewed, err)
	}
	if _, err := a.Cycle(ctx, CycleIn{Release: []int64{aRes[1].Seq}}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Cycle(ctx, CycleIn{Done: succeed(bRun, "b")}); err != nil {
		t.Fatal(err)
	}
	out, err = other.Cycle(ctx, CycleIn{Want: 1})
	if err != nil {
		t.Fatal(err)
	}
	if run, _ := split(out.Claimed); len(run) != 1 || run[0].Seq != aRes[1].Seq {
		t.Fatalf("after the give-back the other worker claimed %+v; want row %d", out.Claimed, aRes[1].Seq)
	}
}

// A reservation whose lease ran out (its worker stopped) is claimed by
// another worker, with no rescue.
func TestReservationExpires(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	b := push(t, db, spec("resx"), "d", gen("r", 3, "")).Batch
	a := db.NewSession(b, "a", 50*time.Millisecond)
	out, err := a.Cycle(ctx, CycleIn{Reserve: 3})
	if err != nil || len(out.Claimed) != 3 || !out.Claimed[0].Reserved {
		t.Fatalf("reserved %+v, %v", out.Claimed, err)
	}
	other := db.NewSession(b, "b", 0)
	if out, err := other.Cycle(ctx, CycleIn{Want: 3}); err != nil || len(out.Claimed) != 0 {
		t.Fatalf("claimed %+v, %v while the reservations hold", out.Claimed, err)
	}
	time.Sleep(100 * time.Millisecond)
	if out, err := other.Cycle(ctx, CycleIn{Want: 3}); err != nil || len(out.Claimed) != 3 || out.Claimed[0].Attempt != 1 {
		t.Fatalf("claimed %+v, %v after the reservations' lease; want all 3, attempt 1", out.Claimed, err)
	}
}

// A worker reserves as many rows as its calls finish in eight round trips,
// at least one and at most its capacity; none where the batch does not
// reserve or its calls are faster than a round trip.
func TestReserveTarget(t *testing.T) {
	one := &Batch{}
	capped := &Batch{Spec: Spec{ClientColumn: "team", ClientCap: 2}}
	for _, c := range []struct {
		b     *Batch
		p     pace
		want  int
		about string
	}{
		{one, pace{}, 1, "nothing measured yet"},
		{one, pace{rowMs: 20, tripMs: 3}, 16, "20 ms calls, 3 ms round trips, 16 places"},
		{one, pace{rowMs: 40, tripMs: 3}, 10, "40 ms calls, 3 ms round trips, 16 places"},
		{one, pace{rowMs: 1000, tripMs: 3}, 1, "calls far slower than the database"},
		{one, pace{rowMs: 2, tripMs: 0.9}, 16, "at most the capacity"},
		{one, pace{rowMs: 1, tripMs: 3}, 0, "calls faster than a round trip"},
		{one, pace{rowMs: 5, tripMs: 6}, 0, "calls a little faster than a round trip"},
		{one, pace{rowMs: 23, tripMs: 12}, 16, "20 ms calls whose round trips slowed for a moment"},
		{capped, pace{rowMs: 20, tripMs: 3}, 0, "a batch with a client cap"},
	} {
		w := NewWorker(&Session{batch: c.b}, WorkerConfig{Capacity: 16})
		if got := w.reserveTarget(c.p); got != c.want {
			t.Errorf("%s: reserve %d, want %d", c.about, got, c.want)
		}
	}
}

// The pace settles within a few samples of slow first ones (a worker's
// first round trips open connections and prepare statements): weighted an
// eighth from the start, a first round trip of 150 ms still counted for
// 60 ms after seven of 5 ms, and the reserve stayed off meanwhile.
func TestPaceSettlesAfterSlowFirstSamples(t *testing.T) {
	var p pace
	ewma(&p.tripMs, &p.trips, 150)
	for range 7 {
		ewma(&p.tripMs, &p.trips, 5)
	}
	if p.tripMs > 10 {
		t.Fatalf("after a first round trip of 150 ms and seven of 5 ms the pace says %.1f ms; want under 10", p.tripMs)
	}
	// Settled, one slow round trip moves it by an eighth.
	for range 20 {
		ewma(&p.tripMs, &p.trips, 5)
	}
	ewma(&p.tripMs, &p.trips, 85)
	if p.tripMs < 14 || p.tripMs > 16 {
		t.Fatalf("one round trip of 85 ms after many of 5 moved the pace to %.1f ms; want 15 (an eighth of the way)", p.tripMs)
	}
}

// Reservations whose answer was lost (the round trip failed after its
// commit) are given back by the reconcile that follows, with the claims;
// those the worker holds stay.
func TestReconcileGivesBackLostReservations(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	b := push(t, db, spec("resr"), "d", gen("r", 6, "")).Batch
	a := db.NewSession(b, "a", 0)
	out, err := a.Cycle(ctx, CycleIn{Reserve: 3})
	if err != nil || len(out.Claimed) != 3 {
		t.Fatalf("reserved %+v, %v", out.Claimed, err)
	}
	kept := out.Claimed[0].Seq
	if _, err := a.Cycle(ctx, CycleIn{Reconcile: true, Held: []int64{kept}}); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, db, "select count(*) from hfsent.item where batch_id = $1 and lease_owner is not null", b.ID); n != 1 {
		t.Fatalf("%d rows leased after the reconcile; want only the one held", n)
	}
	if n := queryInt(t, db, "select count(*) from hfsent.item where batch_id = $1 and seq = $2 and lease_owner = 'a'", b.ID, kept); n != 1 {
		t.Fatal("the reservation the worker holds was given back")
	}
}
