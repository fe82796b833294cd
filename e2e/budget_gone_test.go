package e2e

import (
	"syscall"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/queue/pgtest"
)

// Issue 31 item 6: a server and three workers under --cap 12, with the
// default safe window (--budget-safe-for 30s). Worker 0 is killed with -9
// and worker 1 stopped (SIGSTOP) at once. The killed one's session ends,
// so its row is gone once its lease, its attempt timeout (2 s) and the
// grace have passed, its share handed on, not kept for 30 s more as a
// safe share; the stopped one's session stays open, so its safe share is
// kept (it may come back and send on it). The provider never sees more
// than the cap; its mean in flight in the 5 s after the reclaim is logged
// against the cap (the figure of the issue).
func TestBudgetReclaimsAMemberGoneNotAStoppedOne(t *testing.T) {
	db := pgtest.URL(t)
	mustRun(t, qenv(db), "budget", "set", "b", "--cap", "12")
	pushBatch(t, db, "gone", rowsOf(20000), "--global-cap", "100")
	f := startFleet(t, db, "b", "gone", 50*time.Millisecond, 1, 3)
	sm := sample(f.meter)
	defer sm.close()
	time.Sleep(3 * time.Second) // the shares settle; every member's lock is held
	killed, stopped := f.workers[0].cmd.Process, f.workers[1].cmd.Process
	t0 := time.Now()
	if err := killed.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := stopped.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stopped.Signal(syscall.SIGCONT) }()
	// Its lease (1 s), its timeout (2 s) and the grace (1 s), and a few
	// renewals of the others.
	reclaim := t0.Add(5 * time.Second)
	time.Sleep(time.Until(reclaim))
	st := budgetStatus(t, db, "b")
	time.Sleep(5 * time.Second)
	mean, most := sm.window(reclaim, time.Now())
	_, mostAll := sm.window(t0.Add(-3*time.Second), time.Now())
	t.Logf("the 5 s after the killed member's lease, timeout and grace: the provider's mean in flight %.2f of a cap of 12 (most %d; %d through the whole run)", mean, most, mostAll)
	var gone, kept bool = true, false
	for _, m := range st.Members {
		if m.PID == killed.Pid {
			gone = false
		}
		if m.PID == stopped.Pid && m.OnSafe && m.Safe > 0 {
			kept = true
		}
	}
	if !gone || !kept {
		t.Fatalf("5 s after kill -9 and SIGSTOP: killed member's row gone %v (want true), stopped member on its safe share %v (want true)\n%+v", gone, kept, st)
	}
	if mostAll > 12 {
		t.Fatalf("the provider saw %d calls at once, cap 12", mostAll)
	}
}

// A proxy between a server and PostgreSQL closes the server's connections
// and refuses new ones while PostgreSQL stays up: to the database, the
// server's session ended as if its process had exited, so a worker that
// still reaches it takes the server's share once the server's calls must
// have ended. The server, which read the end of its lock's connection,
// sends nothing on its safe share: the provider never sees more than the
// cap. (A server that kept its safe share would send up to 6 beside the
// worker's 12.)
func TestBudgetSessionsClosedByAProxy(t *testing.T) {
	db, viaProxy, px := proxiedDB(t)
	mustRun(t, qenv(db), "budget", "set", "b", "--cap", "12")
	pushBatch(t, db, "closed", rowsOf(20000), "--global-cap", "100")
	f := startFleet(t, db, "b", "closed", 50*time.Millisecond, 0, 1)
	s := startServe(t, "--endpoint", f.srv.URL, "-c", "12", "--timeout", "2s", "--no-cache", "--retries", "0",
		"--budget", "b", "--db", viaProxy)
	sm := sample(f.meter)
	defer sm.close()
	l := startLoad(s, 6)
	defer l.end()
	time.Sleep(3 * time.Second)
	px.SetDown(true)
	cut := time.Now()
	time.Sleep(8 * time.Second)
	codes, _, _, _ := l.snapshot()
	px.SetDown(false)
	mean, most := sm.window(cut, time.Now())
	t.Logf("server's sessions closed by a proxy 8 s: the provider's mean in flight %.2f, most %d of 12; the server answered %v", mean, most, codes)
	if most > 12 {
		t.Fatalf("the provider saw %d calls at once, cap 12\n%s", most, s.log())
	}
}
