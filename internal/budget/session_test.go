package budget

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// lockSession takes member's session lock on a connection of its own, as
// the member's hold does: closing it is the member's process ending.
func lockSession(t *testing.T, s *Store, member string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := pc.Hijack()
	t.Cleanup(func() { _ = c.Close(ctx) })
	ok, err := s.SessionLock(ctx, c, "b", member, time.Minute)
	if err != nil || !ok {
		t.Fatalf("session lock: %v %v", ok, err)
	}
	return c
}

// sessionCase: w1 (a worker on a safe share of 6 of 12, its lock held)
// stops renewing; gone says what becomes of its session before s1 renews
// on. It returns s1's share once w1's lease, timeout and grace have passed
// (12 if w1 was reclaimed, 6 if its safe share was kept) and w1's row.
func sessionCase(t *testing.T, gone func(s *Store, lock *pgx.Conn)) (int, *MemberRow) {
	t.Helper()
	s := openStore(t)
	ctx := context.Background()
	if _, _, err := s.Set(ctx, "b", 12, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	renew := func(r Report) Renewal {
		t.Helper()
		r.SafeFor = 30 * time.Second
		g, err := s.Renew(ctx, "b", r)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	lock := lockSession(t, s, "w1")
	renew(report("s1", KindServe, 1, 0, 0))
	w := renew(report("w1", KindWorker, 12, 0, 0))
	if !w.Locked || w.Safe != 6 {
		t.Fatalf("w1's renewal %+v: want its lock seen held and a safe share of 6", w)
	}
	gone(s, lock)
	var g Renewal
	deadline := time.Now().Add(300*time.Millisecond + 500*time.Millisecond + ReclaimGrace + 600*time.Millisecond)
	for time.Now().Before(deadline) {
		g = renew(report("s1", KindServe, 12, 0, g.Share))
		time.Sleep(100 * time.Millisecond)
	}
	g = renew(report("s1", KindServe, 12, 0, g.Share))
	st, err := s.Status(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range st.Members {
		if m.ID == "w1" {
			return g.Share, &m
		}
	}
	return g.Share, nil
}

// Issue 31 item 6: a member whose session ended while the server is up (its
// process exited: kill -9 closes its connection) is reclaimed once its
// calls must have ended, its safe share not kept for --budget-safe-for.
func TestAMemberWhoseSessionEndedIsReclaimedWithoutItsSafeShare(t *testing.T) {
	share, w1 := sessionCase(t, func(_ *Store, lock *pgx.Conn) { _ = lock.Close(context.Background()) })
	if share != 12 || w1 != nil {
		t.Fatalf("s1 got %d, w1's row %+v: want w1 reclaimed and s1 the whole cap of 12", share, w1)
	}
}

// A stopped or cut-off member keeps its session, and so its safe share.
func TestAStoppedMemberKeepsItsSafeShare(t *testing.T) {
	share, w1 := sessionCase(t, func(*Store, *pgx.Conn) {})
	if share != 6 || w1 == nil || w1.Charge != 6 || !w1.OnSafe {
		t.Fatalf("s1 got %d, w1's row %+v: want w1's safe share of 6 kept", share, w1)
	}
}

// A restart or a crash recovery ends every session: a member that renewed
// before the server's incarnation began keeps its safe share. Crash
// recovery empties the unlogged incarnation table (a restart moves
// pg_postmaster_start_time()): emptied here, as crash recovery does, with
// the session ended.
func TestARestartEndsSessionsWithoutReclaim(t *testing.T) {
	share, w1 := sessionCase(t, func(s *Store, lock *pgx.Conn) {
		ctx := context.Background()
		_ = lock.Close(ctx)
		time.Sleep(10 * time.Millisecond) // the incarnation begins after w1's renewal
		if _, err := s.pool.Exec(ctx, "truncate hfsent.budget_incarnation"); err != nil {
			t.Fatal(err)
		}
	})
	if share != 6 || w1 == nil || w1.Charge != 6 {
		t.Fatalf("s1 got %d, w1's row %+v: want w1's safe share of 6 kept through a restart", share, w1)
	}
}
