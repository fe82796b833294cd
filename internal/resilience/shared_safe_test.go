package resilience

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// Once its lease passes, a member of a fleet budget sends on its safe share
// (SetSafe): rows waiting at the lease's end are granted on it then, at
// most the safe share at once; past the safe share's end, nothing.
func TestSharedGuardFallsBackToItsSafeShare(t *testing.T) {
	prim := &stub{model: "m", latency: 30 * time.Millisecond}
	g := Build(prim, Config{Concurrency: 8, Shared: true, BreakerMinCalls: 1000})
	lease := time.Now().Add(150 * time.Millisecond)
	g.SetSafe(2, lease.Add(600*time.Millisecond))
	g.SetShare(0, -1, lease) // a share of 0: nothing until the lease ends
	done := make(chan error, 8)
	for range 8 {
		go func() { _, _, err := classifyRow(g, 10*time.Second); done <- err }()
	}
	time.Sleep(100 * time.Millisecond)
	if n := prim.calls.Load(); n != 0 || g.OnSafe() {
		t.Fatalf("%d calls sent on a share of 0 before the lease ended (on the safe share: %t)", n, g.OnSafe())
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if m := prim.maxIn.Load(); m != 2 {
		t.Fatalf("%d calls at once on a safe share of 2 (-c 8)", m)
	}
	if !g.OnSafe() || !g.ShareHeld() {
		t.Fatal("the guard does not say it is on its safe share")
	}
	// Past the safe share's end: nothing, until a renewal.
	time.Sleep(time.Until(lease.Add(650 * time.Millisecond)))
	if g.OnSafe() || g.ShareHeld() {
		t.Fatal("the safe share still holds past its end")
	}
	calls := prim.calls.Load()
	go func() { _, _, err := classifyRow(g, 10*time.Second); done <- err }()
	time.Sleep(100 * time.Millisecond)
	if prim.calls.Load() != calls {
		t.Fatal("a call was sent past the safe share's end")
	}
	g.SetShare(4, -1, time.Now().Add(time.Hour))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A slot granted under the share, above the safe share, whose call was not
// sent before the lease passed (it waited for the rate limit, or the process
// was stopped) waits until the calls held are within the safe share.
func TestSafeShareHoldsBackASlotGrantedAboveIt(t *testing.T) {
	s := NewSlots(8, false, nil)
	lease := time.Now().Add(50 * time.Millisecond)
	s.SetSafe(1, lease.Add(time.Hour))
	s.SetShare(3, lease)
	var ps []*Permit
	for range 3 {
		p, err := s.Acquire(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	time.Sleep(time.Until(lease.Add(10 * time.Millisecond)))
	sent := make(chan error, 1)
	go func() { sent <- s.waitLease(t.Context(), nil, false) }()
	select {
	case <-sent:
		t.Fatal("a slot above the safe share sent with 3 held on a safe share of 1")
	case <-time.After(100 * time.Millisecond):
	}
	ps[0].Release(nil)
	select {
	case <-sent:
		t.Fatal("a slot above the safe share sent with 2 held on a safe share of 1")
	case <-time.After(100 * time.Millisecond):
	}
	ps[1].Release(nil)
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}

// A row granted its slot under the lease, held by the rate limit until the
// lease lapsed (no safe share), says the lease lapsed and why, not the rate
// limit: CI's serve answered "the rate limit (--rps 0) had no turn" after
// holding a request 15 s. A FailFast row (serve) ends at once, not at its
// deadline.
func TestARowHeldPastItsLeaseSaysItLapsed(t *testing.T) {
	for _, failFast := range []bool{false, true} {
		prim := &stub{model: "m"}
		g := Build(prim, Config{Concurrency: 8, Shared: true, BreakerMinCalls: 1000})
		g.SetLapse("its database cannot be reached")
		// One call a second: the second row waits a second for its turn,
		// past the lease's 200 ms.
		g.SetShare(4, 1, time.Now().Add(200*time.Millisecond))
		if _, _, err := classifyRow(g, time.Second); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		start := time.Now()
		_, err := g.Classify(ctx, &Row{FailFast: failFast}, []string{"it works"})
		took := time.Since(start)
		cancel()
		pe, ok := provider.AsError(err)
		if !ok || pe.Outcome != outcome.LocalCapacity || !strings.Contains(pe.Msg, "fleet budget (--budget) lapsed: its database cannot be reached") {
			t.Fatalf("failFast=%t: %v, want local_capacity saying the budget's lease lapsed and why", failFast, err)
		}
		if n := prim.calls.Load(); n != 1 {
			t.Fatalf("failFast=%t: %d calls, want 1 (none once the lease lapsed)", failFast, n)
		}
		if failFast && took > 2*time.Second {
			t.Fatalf("a FailFast row waited %s for a lease that lapsed, want its end once its turn came (about 1 s)", took)
		}
	}
}
