package budget

import (
	"context"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/spend"
)

// TestFleetSpend: members with a ledger add what they spent to the
// budget's at their renewals, and each is held to the budget's
// --max-spend less what the others spent: once the fleet's spend reaches
// it, a member's next call is refused.
func TestFleetSpend(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	limit := 1.0
	if _, _, err := s.Set(ctx, "b", 4, nil, nil, &limit); err != nil {
		t.Fatal(err)
	}
	prices := spend.Flat(1e6, 0) // $1 a prompt token
	cfg := MemberConfig{Budget: "b", Kind: KindWorker, Max: 2, Timeout: time.Second, Lease: 400 * time.Millisecond, Host: "h", PID: 1}
	la, lb := spend.NewLedger(prices, 0), spend.NewLedger(prices, 0)
	for _, l := range []*spend.Ledger{la, lb} {
		c := cfg
		c.Ledger = l
		m, err := Join(ctx, s, c)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Start(ctx, newFakeGuard()); err != nil {
			t.Fatal(err)
		}
		defer m.Close(true)
	}
	// The first renewal (in Start) told the ledgers the fleet's limit.
	if la.Totals().FleetLimit != 1 || lb.Totals().FleetLimit != 1 {
		t.Fatalf("the ledgers do not know the fleet's limit: %+v", la.Totals())
	}
	// a spends 0.6 (a call whose server reported its cost).
	r, ok := la.Reserve(0.6)
	if !ok {
		t.Fatal("a refused 0.6 of 1.0")
	}
	r.Settle("m", provider.Usage{Cost: 0.6, Costed: true})
	deadline := time.Now().Add(5 * time.Second)
	for lb.Totals().FleetOthers < 0.6 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := lb.Totals().FleetOthers; got < 0.6 {
		t.Fatalf("b heard the others spent %g", got)
	}
	if _, ok := lb.Reserve(0.5); ok {
		t.Fatal("b granted 0.5 with 0.6 of the fleet's 1.0 spent")
	}
	b, err := s.Get(ctx, "b")
	if err != nil || b.MaxSpend != 1 || b.Spent < 0.6 || b.Spent > 0.6+1e-9 {
		t.Fatalf("budget %+v, %v", b, err)
	}
}
