package budget

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// A server's headroom reaches a batch member at the member's first renewal
// after the server gave it up, and comes back to the server one renewal of
// the batch member after the server's demand rose: the member applies lent
// slots only until it asks again, so it is not charged for them after.
func TestHeadroomLentAndReclaimedWithinARenewal(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	if _, _, err := s.Set(ctx, "b", 12, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	step := 0
	renew := func(r Report, share, lent int) {
		t.Helper()
		step++
		g, err := s.Renew(ctx, "b", r)
		if err != nil {
			t.Fatal(err)
		}
		if g.Share != share || g.Lent != lent {
			t.Fatalf("step %d, %s: share %d lent %d, want %d lent %d", step, r.Member, g.Share, g.Lent, share, lent)
		}
	}
	renew(report("s", KindServe, 2, 0, 0), 3, 0)    // alone: its 2 and 1 of headroom
	renew(report("w", KindWorker, 12, 0, 0), 9, 0)  // ideal 10, but s is charged 3
	renew(report("s", KindServe, 2, 2, 3), 2, 0)    // its headroom is lent: told 2, charged 3 until it renews
	renew(report("w", KindWorker, 12, 9, 9), 9, 0)  // s still charged 3
	renew(report("s", KindServe, 2, 2, 2), 2, 0)    // charged 2 now
	renew(report("w", KindWorker, 12, 9, 9), 10, 1) // the headroom reaches the batch: within one renewal
	// The server's traffic rises to 4: it is told its ideal 4 less what w
	// is charged (10).
	renew(report("s", KindServe, 4, 2, 2), 2, 0)
	// w asks with its lent slot returned (applied 9, 9 in flight): told 8
	// (1 of it lent again), charged 9, not 10.
	renew(report("w", KindWorker, 12, 9, 9), 8, 1)
	renew(report("s", KindServe, 4, 2, 2), 3, 0) // the headroom is back at the server after one renewal of w
	renew(report("w", KindWorker, 12, 7, 7), 8, 1)
	renew(report("s", KindServe, 4, 3, 3), 4, 0)
	st, err := s.Status(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	shares, charges := 0, 0
	for _, m := range st.Members {
		shares += m.Share
		charges += m.Charge
	}
	if shares > 12 || charges > 12 {
		t.Fatalf("shares %d, charges %d over the cap: %+v", shares, charges, st.Members)
	}
}

// recGuard records every share a member applies, in order.
type recGuard struct {
	fakeGuard
	mu     sync.Mutex
	shares []int
}

func (g *recGuard) SetShare(n int, rps float64, until time.Time) {
	g.fakeGuard.SetShare(n, rps, until)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shares = append(g.shares, n)
}

// A batch member stops applying its lent slots as it asks for its next
// renewal, and reports the share it applies then as its own part only.
func TestMemberReturnsLentSlotsWhenItAsks(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	if _, _, err := s.Set(ctx, "b", 12, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	// A server wanting 4, alone: 4 and 1 of headroom, charged 5.
	if _, err := s.Renew(ctx, "b", Report{Member: "srv", Host: "h", PID: 2, Kind: KindServe, Max: 12, Demand: 4, InFlight: 4, Applied: 4,
		Timeout: time.Minute, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	m, err := Join(ctx, s, MemberConfig{Budget: "b", Kind: KindWorker, Max: 12, Timeout: time.Second, Lease: time.Minute, Every: 30 * time.Second, Host: "h", PID: 1})
	if err != nil {
		t.Fatal(err)
	}
	g := &recGuard{fakeGuard: *newFakeGuard()}
	g.inFlight, g.demand = 8, 12
	// Its renewals one by one, as its loop makes them (Start would add the
	// loop's own).
	m.g = g
	if err := m.renew(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Close(true)
	// The server renews beside it: its headroom is lent, it is charged 4.
	if _, err := s.Renew(ctx, "b", Report{Member: "srv", Host: "h", PID: 2, Kind: KindServe, Max: 12, Demand: 4, InFlight: 4, Applied: 4,
		Timeout: time.Minute, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := m.renew(ctx); err != nil {
		t.Fatal(err)
	}
	if snap := m.Snapshot(); snap.Share != 8 || snap.Lent != 1 {
		t.Fatalf("share %d lent %d, want 8 with 1 lent (12 less the server's 4)", snap.Share, snap.Lent)
	}
	if err := m.renew(ctx); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	got := fmt.Sprint(g.shares)
	g.mu.Unlock()
	if got != "[7 8 7 8]" {
		t.Fatalf("shares applied %s, want [7 8 7 8]: the lent slot returned as it asked, then granted again", got)
	}
	st, err := s.Status(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range st.Members {
		if r.ID == m.ID() && r.Charge != 8 {
			t.Fatalf("charged %d, want 8 (its new share; it applied 7 and had 8 in flight when it asked)", r.Charge)
		}
	}
}
