package resilience

import (
	"sync"
	"testing"
	"time"
)

// A guard that is a member of a fleet budget (Shared) sends nothing before
// its first share, at most its share at once, and nothing once its lease
// has passed; a renewal lets the waiting calls go.
func TestSharedGuardKeepsItsShare(t *testing.T) {
	prim := &stub{model: "m", latency: 20 * time.Millisecond}
	g := Build(prim, Config{Concurrency: 8, Shared: true, BreakerMinCalls: 1000})
	if _, held := g.Slots().Share(); held {
		t.Fatal("a Shared guard holds a lease before its first share")
	}
	done := make(chan error, 6)
	for range 6 {
		go func() { _, _, err := classifyRow(g, 10*time.Second); done <- err }()
	}
	time.Sleep(100 * time.Millisecond)
	if n := prim.calls.Load(); n != 0 {
		t.Fatalf("%d calls sent before the first share", n)
	}
	g.SetShare(2, -1, time.Now().Add(time.Hour))
	for range 6 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if m := prim.maxIn.Load(); m != 2 {
		t.Fatalf("%d calls at once under a share of 2 (-c 8)", m)
	}
	// The lease passes: a row waits, and goes once it is renewed.
	g.SetShare(4, -1, time.Now().Add(-time.Millisecond))
	calls := prim.calls.Load()
	go func() { _, _, err := classifyRow(g, 10*time.Second); done <- err }()
	time.Sleep(100 * time.Millisecond)
	if prim.calls.Load() != calls {
		t.Fatal("a call was sent after the lease passed")
	}
	g.SetShare(4, -1, time.Now().Add(time.Hour))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// The demand is the peak of calls in flight plus rows waiting since the
// last reading.
func TestSharedGuardDemand(t *testing.T) {
	prim := &stub{model: "m", latency: 50 * time.Millisecond}
	g := Build(prim, Config{Concurrency: 8, Shared: true, BreakerMinCalls: 1000})
	g.SetShare(3, -1, time.Now().Add(time.Hour))
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() { defer wg.Done(); _, _, _ = classifyRow(g, 10*time.Second) }()
	}
	time.Sleep(20 * time.Millisecond)
	if in, peak := g.Demand(); in != 3 || peak != 5 {
		t.Fatalf("in flight %d, peak %d: want 3 and 5", in, peak)
	}
	wg.Wait()
	// The interval since the last reading began with 3 in flight and 2
	// waiting.
	if in, peak := g.Demand(); in != 0 || peak != 5 {
		t.Fatalf("after: in flight %d, peak %d: want 0 and 5", in, peak)
	}
	if _, peak := g.Demand(); peak != 0 {
		t.Fatalf("idle: peak %d", peak)
	}
}

// A member granted no rate (0 calls a second) waits, and goes as soon as a
// renewal gives it one: the turn it was refused under the old limit is
// asked again under the new one.
func TestSharedRateFollowsTheShare(t *testing.T) {
	prim := &stub{model: "m"}
	g := Build(prim, Config{Concurrency: 4, Shared: true, BreakerMinCalls: 1000})
	g.SetShare(4, 0, time.Now().Add(time.Hour))
	// The first call takes the bucket's one token; the second waits.
	if _, _, err := classifyRow(g, time.Second); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, _, err := classifyRow(g, 10*time.Second); done <- err }()
	time.Sleep(100 * time.Millisecond)
	if n := prim.calls.Load(); n != 1 {
		t.Fatalf("%d calls at a rate of 0", n)
	}
	start := time.Now()
	g.SetShare(4, 1000, time.Now().Add(time.Hour))
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the call still waits for a turn after the rate was raised")
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("it went %s after the rate was raised", d)
	}
}
