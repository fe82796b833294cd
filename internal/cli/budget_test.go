package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/hfsent/hfsent/internal/queue/pgtest"
)

// Bad budget flags exit 2 naming the flag, before any database or call.
func TestBudgetUsageErrors(t *testing.T) {
	in := writeFile(t, "in.csv", csvOf("a"))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"budget", "set", "b"}, "--cap N is required"},
		{[]string{"budget", "set", "b", "--cap", "0", "--db", "postgres://x@127.0.0.1:1/x"}, "--cap"},
		{[]string{"budget", "set", "b", "--cap", "4", "--batch-floor", "5", "--db", "postgres://x@127.0.0.1:1/x"}, "--batch-floor"},
		{[]string{"budget", "set", "b", "--cap", "4", "--rps", "-1", "--db", "postgres://x@127.0.0.1:1/x"}, "--rps"},
		{[]string{"budget", "set", "a\x1bb", "--cap", "4"}, "bad budget name"},
		{[]string{"budget", "status"}, "name the budget"},
		{[]string{"budget", "status", "b", "--interval", "1ms"}, "--interval"},
		{[]string{"budget", "drop", "b"}, "--yes"},
		{[]string{"budget", "list"}, "--db is required"},
		{[]string{"classify", in, "--provider", "local", "--budget", "b\n"}, "--budget"},
		{[]string{"classify", in, "--provider", "local", "--budget", "b", "--budget-lease", "10ms"}, "--budget-lease"},
		{[]string{"classify", in, "--provider", "local", "--budget", "b"}, "--db is required"},
		{[]string{"classify", in, "--provider", "local", "--db", "postgres://x@127.0.0.1:1/x"}, "--db is for --budget"},
	} {
		r := runMain(t, nil, "", c.args...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("hfsent %q: exit %d, stderr %q; want exit 2 naming %s", c.args, r.code, r.stderr, c.want)
		}
	}
}

// budget set, status (text and JSON), list and drop on PostgreSQL; a
// budget that does not exist exits 2; the password is never shown.
func TestBudgetCommands(t *testing.T) {
	db := pgtest.URL(t)
	env := map[string]string{dbEnv: db}
	if r := runMain(t, env, "", "budget", "set", "b", "--cap", "12", "--rps", "5"); r.code != 0 || !strings.Contains(r.stderr, "created: cap=12 rps=5 batch_floor=1") {
		t.Fatalf("set: %d %s", r.code, r.stderr)
	}
	if r := runMain(t, env, "", "budget", "set", "b", "--cap", "10"); r.code != 0 || !strings.Contains(r.stderr, "changed: cap=10 rps=5 batch_floor=1") {
		t.Fatalf("set again: %d %s", r.code, r.stderr)
	}
	r := runMain(t, env, "", "budget", "status", "b", "--json")
	var st map[string]any
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &st) != nil || st["cap"] != 10.0 || st["members"] == nil {
		t.Fatalf("status --json: %d %q %s", r.code, r.stdout, r.stderr)
	}
	if r := runMain(t, env, "", "budget", "status", "b"); r.code != 0 || !strings.Contains(r.stdout, "budget b: cap=10 rps=5") {
		t.Fatalf("status: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := runMain(t, env, "", "budget", "list"); r.code != 0 || !strings.Contains(r.stdout, "b ") {
		t.Fatalf("list: %d %s", r.code, r.stdout)
	}
	if r := runMain(t, env, "", "budget", "status", "nope"); r.code != ExitUsage || !strings.Contains(r.stderr, "no such budget") {
		t.Fatalf("status of no budget: %d %s", r.code, r.stderr)
	}
	in := writeFile(t, "in.csv", csvOf("a", "b"))
	if r := runMain(t, env, "", "classify", in, "--provider", "local", "--budget", "nope"); r.code != ExitUsage || !strings.Contains(r.stderr, "no such budget") {
		t.Fatalf("classify --budget nope: %d %s", r.code, r.stderr)
	}
	if r := runMain(t, env, "", "classify", in, "--provider", "local", "--budget", "b"); r.code != 0 || !strings.Contains(r.stderr, "joined the budget") {
		t.Fatalf("classify --budget b: %d %s", r.code, r.stderr)
	}
	if r := runMain(t, env, "", "budget", "drop", "b", "--yes"); r.code != 0 {
		t.Fatalf("drop: %d %s", r.code, r.stderr)
	}
	if r := runMain(t, env, "", "budget", "drop", "b", "--yes"); r.code != ExitUsage {
		t.Fatalf("second drop: %d %s", r.code, r.stderr)
	}
	withPassword := strings.Replace(db, "postgres@", "postgres:s3cr3t-pw@", 1)
	r = runMain(t, map[string]string{dbEnv: withPassword}, "", "budget", "status", "b")
	if strings.Contains(r.stdout+r.stderr, "s3cr3t-pw") {
		t.Fatalf("the password was shown: %s %s", r.stdout, r.stderr)
	}
}

// budget set prints what it wrote: racing writers of race1 (each its own
// cap and rate, real PostgreSQL) each read back their own values. Before,
// set wrote and then read the budget in another statement, and printed
// `changed: cap=5` for a --cap 7 another writer had overtaken.
func TestBudgetSetPrintsWhatItWrote(t *testing.T) {
	db := pgtest.URL(t)
	env := map[string]string{dbEnv: db}
	if r := runMain(t, env, "", "budget", "set", "race1", "--cap", "1"); r.code != 0 {
		t.Fatalf("set: %d %s", r.code, r.stderr)
	}
	const writers, sets = 6, 25
	errs := make(chan string, writers*sets)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range sets {
				capacity := 2 + w*sets + i
				r := runMain(t, env, "", "budget", "set", "race1", "--cap", fmt.Sprint(capacity), "--rps", fmt.Sprint(capacity))
				want := fmt.Sprintf("budget race1 changed: cap=%d rps=%d batch_floor=1 max_spend=none\n", capacity, capacity)
				if r.code != 0 || r.stderr != want {
					errs <- fmt.Sprintf("exit %d, printed %q, want %q", r.code, r.stderr, want)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	n := 0
	for e := range errs {
		if n++; n <= 5 {
			t.Error(e)
		}
	}
	if n > 0 {
		t.Fatalf("%d of %d sets printed another writer's values", n, writers*sets)
	}
}
