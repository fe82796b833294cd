package budget

import (
	"context"
	"testing"
	"time"
)

// Issue 31 item 7: a member that stopped renewing is listed with what it
// holds now (its charge, cut to its safe share once its calls must have
// ended), not its old share, so that status's shares (and list's sum) stay
// within the cap while the others take what it gave up.
func TestStatusListsALapsedMembersChargeAsItsShare(t *testing.T) {
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
	renew(report("s1", KindServe, 1, 0, 0))
	w := renew(report("w1", KindWorker, 12, 0, 0))
	if w.Safe >= w.Share {
		t.Fatalf("w1 share %d safe %d: the case needs a safe share below the share", w.Share, w.Safe)
	}
	// w1 stops renewing (SIGSTOP); s1 goes on and wants 6.
	deadline := time.Now().Add(300*time.Millisecond + 500*time.Millisecond + ReclaimGrace + 500*time.Millisecond)
	for time.Now().Before(deadline) {
		renew(report("s1", KindServe, 6, 0, 1))
		time.Sleep(100 * time.Millisecond)
	}
	if g := renew(report("s1", KindServe, 6, 0, 6)); g.Share != 6 {
		t.Fatalf("s1 got %d once w1 was cut to its safe share %d, want 6", g.Share, w.Safe)
	}
	st, err := s.Status(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	sum := 0
	for _, m := range st.Members {
		sum += m.Share
		if m.ID == "w1" && (m.Live || m.Share != m.Charge || m.Charge != w.Safe) {
			t.Fatalf("lapsed w1 listed %+v: want share = charge = its safe share %d", m, w.Safe)
		}
	}
	if sum > 12 {
		t.Fatalf("status lists shares summing to %d of a cap of 12: %+v", sum, st.Members)
	}
	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range list {
		if b.Name == "b" && b.Shares != sum {
			t.Fatalf("list sums %d, status %d", b.Shares, sum)
		}
	}
}
