package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// A server whose budget lapsed says why in its 503: the budget was dropped
// (budget drop), or its database cannot be reached (a proxy cut). Before,
// a drop was answered "its database cannot be reached" too, sending the
// operator to a database that was fine. Created again, the budget is
// joined again, and the server answers.
func TestServeSaysWhyItsBudgetLapsed(t *testing.T) {
	db, viaProxy, px := proxiedDB(t)
	mustRun(t, qenv(db), "budget", "set", "b", "--cap", "4")
	fake := fakehf.Start(&fakehf.Fake{})
	defer fake.Close()
	// A safe share of 1s: with the database cut it answers on it for a
	// second past its lease, then says why it sends nothing.
	s := startServe(t, "--endpoint", fake.URL, "--budget", "b", "--db", viaProxy, "--retries", "0", "--admission-wait", "200ms", "--budget-safe-for", "1s")
	// Every text another: an answer known (dedupe) takes no slot.
	n := 0
	ask := func() reply { n++; return s.feedback("a", fmt.Sprintf("fine %d", n)) }
	if r := ask(); r.status != 200 {
		t.Fatalf("before: %d %v", r.status, r.body)
	}
	// until waits for a 503 whose message holds want.
	until := func(what, want string) {
		t.Helper()
		var r reply
		for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(50 * time.Millisecond) {
			if r = ask(); r.status == 503 {
				break
			}
		}
		d, _ := r.body["detail"].(map[string]any)
		msg, _ := d["message"].(string)
		if r.status != 503 || !strings.Contains(msg, want) {
			t.Fatalf("%s: %d %q, want 503 saying %q\n%s", what, r.status, msg, want, s.log())
		}
	}
	mustRun(t, qenv(db), "budget", "drop", "b", "--yes")
	until("after budget drop", "the budget was dropped (budget drop)")
	mustRun(t, qenv(db), "budget", "set", "b", "--cap", "4")
	waitUntil(t, "the budget created again", func() bool { return ask().status == 200 })

	px.SetDown(true)
	until("with the database cut", "its database cannot be reached")
	px.SetDown(false)
	waitUntil(t, "the database back", func() bool { return ask().status == 200 })
}
