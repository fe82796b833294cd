package e2e

import (
	"bufio"
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// metric reads one gauge of a server's /metrics (-1 when absent).
func metric(t *testing.T, s *server, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + s.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == name {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return -1
}

// post sends one request to a server and returns its status and Retry-After.
func post(t *testing.T, s *server, id string) (code int, retryAfter string) {
	t.Helper()
	cl := &http.Client{Timeout: 20 * time.Second}
	resp, err := cl.Post("http://"+s.addr+"/feedback-sentiment", "application/json",
		bytes.NewReader([]byte(`{"request_id":"`+id+`","text":"a text `+id+`"}`)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

func readyz(t *testing.T, s *server) int {
	t.Helper()
	resp, err := http.Get("http://" + s.addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Three servers and two workers under --cap 12, PostgreSQL cut off for 4 s
// (a TCP proxy that forwards nothing, its connections held open: a
// partition; a proxy that closes them ends the members' sessions as their
// processes' exit would, and TestBudgetSessionsClosedByAProxy has that):
// every member keeps its share until its lease ends, then
// sends on its safe share (the cap divided by the members, at most its
// share). The servers answer all through the cut, with no 503; the
// provider never sees more than 12 at once; budget status and /metrics
// show the members on their safe shares; all take their shares back when
// the database returns. On main the servers answer 503 from 1.3 s into the
// cut (0 answers after).
func TestBudgetThroughADatabaseOutage(t *testing.T) {
	db, viaProxy, px := proxiedDB(t)
	mustRun(t, qenv(db), "budget", "set", "b", "--cap", "12")
	pushBatch(t, db, "outage", rowsOf(6000), "--global-cap", "100")
	f := startFleet(t, viaProxy, "b", "outage", 50*time.Millisecond, 3, 2)
	sm := sample(f.meter)
	defer sm.close()
	var loads []*load
	for _, s := range f.servers {
		l := startLoad(s, 2)
		defer l.end()
		loads = append(loads, l)
	}
	time.Sleep(2500 * time.Millisecond) // the shares settle
	begin := time.Now()
	for _, l := range loads {
		l.reset()
	}
	px.SetStalled(true)
	cut := time.Now()
	time.Sleep(2 * time.Second)
	st := budgetStatus(t, db, "b") // straight to PostgreSQL: the members cannot reach it
	onSafe := 0
	for _, m := range st.Members {
		if m.OnSafe && m.Safe > 0 {
			onSafe++
		}
	}
	gauge := metric(t, f.servers[0], "hfsent_budget_on_safe_share")
	time.Sleep(cut.Add(4 * time.Second).Sub(time.Now()))
	var answered, refused []int
	for _, l := range loads {
		codes, _, _, _ := l.snapshot()
		answered, refused = append(answered, codes[200]), append(refused, codes[503])
	}
	px.SetStalled(false)
	mean, most := sm.window(cut, time.Now())
	t.Logf("during the 4 s cut: servers answered %v, 503 %v; the provider's mean in flight %.1f, most %d; %d members on their safe shares (budget status), server 0's hfsent_budget_on_safe_share %g",
		answered, refused, mean, most, onSafe, gauge)
	for i := range answered {
		if answered[i] == 0 || refused[i] > 0 {
			t.Fatalf("server %d answered %d and refused %d (503) during the cut: want answers on its safe share and no 503\n%s", i, answered[i], refused[i], f.servers[i].log())
		}
	}
	if onSafe != 5 || gauge != 1 {
		t.Fatalf("during the cut budget status showed %d of 5 members on their safe shares, and server 0's hfsent_budget_on_safe_share was %g: want 5 and 1\n%+v", onSafe, gauge, st)
	}
	if !strings.Contains(f.servers[0].log(), "sending on its safe share") {
		t.Fatalf("server 0 did not say it went on its safe share:\n%s", f.servers[0].log())
	}

	// The database is back: every member takes its share again (within a
	// few renewals: on a loaded machine the first ones may be slow).
	back := func() bool {
		for _, s := range f.servers {
			if metric(t, s, "hfsent_budget_on_safe_share") != 0 || metric(t, s, "hfsent_budget_lease_held") != 1 {
				return false
			}
		}
		for _, m := range budgetStatus(t, db, "b").Members {
			if !m.Live || m.OnSafe {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(5 * time.Second); !back(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the members are not back on their shares 5 s after the database returned: %+v\n%s", budgetStatus(t, db, "b"), f.servers[0].log())
		}
	}
	if _, most := sm.window(begin, time.Now()); most > 12 {
		t.Fatalf("the provider saw %d calls at once, cap 12", most)
	}
}

// A server that starts while its budget's database cannot be reached: with
// no --budget-safe-share it sends nothing (503 with Retry-After, /readyz
// 503) and says so; with --budget-safe-share 2 it answers on those 2. Both
// take their shares when the database comes. A worker, which needs the
// database for its queue, refuses to start (exit 2). On main neither
// server listens (exit 2: the database cannot be reached), and
// --budget-safe-share does not exist.
func TestBudgetSafeShareAtStart(t *testing.T) {
	db, viaProxy, px := proxiedDB(t)
	mustRun(t, qenv(db), "budget", "set", "b", "--cap", "4")
	m, srv := newMeter(&fakehf.Fake{Latency: 20 * time.Millisecond, NoRecord: true})
	t.Cleanup(srv.Close)
	px.SetDown(true)
	common := []string{"--endpoint", srv.URL, "-c", "4", "--timeout", "2s", "--no-cache", "--budget", "b", "--db", viaProxy, "--admission-wait", "300ms"}
	waiting := startServe(t, common...)
	safe := startServe(t, append(common, "--budget-safe-share", "2")...)

	if code, retry := post(t, waiting, "w1"); code != 503 || retry == "" {
		t.Fatalf("the server with no safe share answered %d (Retry-After %q) with its database away: want 503 with Retry-After", code, retry)
	}
	if code := readyz(t, waiting); code != 503 {
		t.Fatalf("its /readyz answered %d: want 503 while it has no share", code)
	}
	if !strings.Contains(waiting.log(), "no --budget-safe-share: no provider call until it renews") {
		t.Fatalf("the server with no safe share did not say why it waits:\n%s", waiting.log())
	}
	for i := range 5 {
		if code, _ := post(t, safe, "s"+strconv.Itoa(i)); code != 200 {
			t.Fatalf("the server with --budget-safe-share 2 answered %d with its database away: want 200\n%s", code, safe.log())
		}
	}
	if readyz(t, safe) != 200 || metric(t, safe, "hfsent_budget_on_safe_share") != 1 || metric(t, safe, "hfsent_budget_safe_share") != 2 {
		t.Fatalf("the server on --budget-safe-share 2: /readyz %d, on_safe_share %g, safe_share %g: want 200, 1, 2",
			readyz(t, safe), metric(t, safe, "hfsent_budget_on_safe_share"), metric(t, safe, "hfsent_budget_safe_share"))
	}
	r := runBin(t, qenv(viaProxy), "worker", "--batch", "x", "--endpoint", srv.URL, "--budget", "b", "--no-progress")
	if r.code != 2 || !strings.Contains(r.stderr, "cannot") {
		t.Fatalf("a worker started with its database away: exit %d, want 2 saying the database cannot be reached\n%s", r.code, r.stderr)
	}

	px.SetDown(false)
	deadline := time.Now().Add(10 * time.Second)
	for readyz(t, waiting) != 200 || metric(t, safe, "hfsent_budget_on_safe_share") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the servers did not take their shares within 10 s of the database's return:\n%s\n%s", waiting.log(), safe.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code, _ := post(t, waiting, "w2"); code != 200 {
		t.Fatalf("the server that waited answered %d once the database came: want 200\n%s", code, waiting.log())
	}
	if st := budgetStatus(t, db, "b"); len(st.Members) != 2 {
		t.Fatalf("budget status lists %d members, want the 2 servers: %+v", len(st.Members), st)
	}
	m.mu.Lock()
	most := m.max
	m.mu.Unlock()
	if most > 4 {
		t.Fatalf("the provider saw %d calls at once, cap 4", most)
	}
}
