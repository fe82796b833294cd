package budget

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hfsent/hfsent/internal/queue"
	"github.com/hfsent/hfsent/internal/queue/pgtest"
	"github.com/hfsent/hfsent/internal/resilience"
)

func openStore(t testing.TB) *Store {
	t.Helper()
	ctx := context.Background()
	db, err := queue.Open(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	if _, _, err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return NewStore(db.Pool)
}

func TestSetIsIdempotentAndKeepsWhatIsNotGiven(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	rps, floor := 20.0, 3
	if _, created, err := s.Set(ctx, "b", 12, &rps, &floor, nil); err != nil || !created {
		t.Fatalf("created=%v err=%v", created, err)
	}
	if _, created, err := s.Set(ctx, "b", 8, nil, nil, nil); err != nil || created {
		t.Fatalf("second set: created=%v err=%v", created, err)
	}
	b, err := s.Get(ctx, "b")
	if err != nil || b.Cap != 8 || b.RPS != 20 || b.BatchFloor != 3 {
		t.Fatalf("budget %+v err %v: want cap 8, rps 20 and floor 3 kept", b, err)
	}
	if _, err := s.Get(ctx, "nope"); !errors.Is(err, ErrNoBudget) {
		t.Fatalf("Get of no budget: %v", err)
	}
	if err := s.Drop(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := s.Drop(ctx, "b"); !errors.Is(err, ErrNoBudget) {
		t.Fatalf("second drop: %v", err)
	}
}

func report(id string, k Kind, demand, inFlight, applied int) Report {
	return Report{Member: id, Host: "h", PID: 1, Kind: k, Max: 12, Demand: demand, InFlight: inFlight, Applied: applied,
		Timeout: 500 * time.Millisecond, Lease: 300 * time.Millisecond}
}

// Renewals divide the cap: a server first, workers the rest; a shrinking
// worker's old share counts until it renews under the new one; a lapsed
// member's charge is handed on only after its lease and timeout.
func TestRenewDividesTheCap(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	if _, _, err := s.Set(ctx, "b", 12, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	renew := func(r Report) int {
		t.Helper()
		g, err := s.Renew(ctx, "b", r)
		if err != nil {
			t.Fatal(err)
		}
		return g.Share
	}
	if g := renew(report("w1", KindWorker, 12, 0, 0)); g != 12 {
		t.Fatalf("lone worker: %d, want 12", g)
	}
	// A server joins wanting 6: nothing is free until w1 shrinks.
	if g := renew(report("s1", KindServe, 5, 0, 0)); g != 0 {
		t.Fatalf("server before w1 shrank: %d, want 0", g)
	}
	// w1 is told 7 (12 less the server's 5; the server's headroom of 2 is
	// lent to it), but it applied 12 with 12 in flight: still charged 12.
	if g := renew(report("w1", KindWorker, 12, 12, 12)); g != 7 {
		t.Fatalf("w1 shrunk to %d, want 7", g)
	}
	if g := renew(report("s1", KindServe, 5, 0, 0)); g != 0 {
		t.Fatalf("server while w1's calls may still be out: %d, want 0", g)
	}
	// w1 renews with its lent 2 returned (applied 5) and 7 in flight:
	// charged 7.
	renew(report("w1", KindWorker, 12, 7, 5))
	if g := renew(report("s1", KindServe, 5, 0, 0)); g != 5 {
		t.Fatalf("server once w1 is within its share: %d, want 5 (its headroom is lent to w1)", g)
	}
	// w1 wants less: the server's headroom is its own again.
	renew(report("w1", KindWorker, 5, 5, 5))
	if g := renew(report("s1", KindServe, 5, 0, 5)); g != 7 {
		t.Fatalf("server once w1 wants 5: %d, want 7 (5 plus 2 headroom)", g)
	}
	st, err := s.Status(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, m := range st.Members {
		total += m.Share
	}
	if total > 12 || len(st.Members) != 2 {
		t.Fatalf("status %+v", st)
	}
	// s1 stops renewing: its charge holds for lease + timeout + grace.
	time.Sleep(300*time.Millisecond + 100*time.Millisecond)
	if g := renew(report("w1", KindWorker, 12, 5, 5)); g > 5 {
		t.Fatalf("w1 got %d while s1's lapsed charge may still be in flight", g)
	}
	time.Sleep(500*time.Millisecond + ReclaimGrace)
	if g := renew(report("w1", KindWorker, 12, 5, 5)); g != 12 {
		t.Fatalf("w1 got %d after s1 was reclaimed, want 12", g)
	}
	if _, err := s.Renew(ctx, "gone", report("x", KindWorker, 1, 0, 0)); !errors.Is(err, ErrNoBudget) {
		t.Fatalf("renewal in no budget: %v", err)
	}
}

// fakeGuard records what a member applies.
type fakeGuard struct {
	mu                 sync.Mutex
	share              int
	rps                float64
	safe               int
	safeUntil          time.Time
	until              time.Time
	paused, open       time.Time
	inFlight, demand   int
	pausedCh, openedCh chan struct{}
}

func newFakeGuard() *fakeGuard {
	return &fakeGuard{pausedCh: make(chan struct{}, 1), openedCh: make(chan struct{}, 1)}
}

func (g *fakeGuard) SetShare(n int, rps float64, until time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.share, g.rps, g.until = n, rps, until
}

func (g *fakeGuard) SetLapse(string) {}

func (g *fakeGuard) SetSafe(n int, until time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.safe, g.safeUntil = n, until
}

func (g *fakeGuard) Demand() (int, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inFlight, g.demand
}

func (g *fakeGuard) PauseUntil(t time.Time) {
	g.mu.Lock()
	g.paused = t
	g.mu.Unlock()
	select {
	case g.pausedCh <- struct{}{}:
	default:
	}
}

func (g *fakeGuard) OpenUntil(t time.Time) {
	g.mu.Lock()
	g.open = t
	g.mu.Unlock()
	select {
	case g.openedCh <- struct{}{}:
	default:
	}
}

// tuneHooks are the two hooks m.Tune chains.
func tuneHooks(m *Member) (onPause, onOpen func(time.Time)) {
	var c resilience.Config
	m.Tune(&c)
	return c.OnPause, c.OnOpen
}

func (g *fakeGuard) get() (int, time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.share, g.until
}

// A pause or an open breaker seen by one member reaches another within a
// fraction of a second (a notification, not the next renewal), and the
// member that opened the breaker is not held by its own opening.
func TestPauseAndBreakerReachEveryMember(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	if _, _, err := s.Set(ctx, "b", 4, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	// Long renewals, so that only the notification can be what tells.
	cfg := MemberConfig{Budget: "b", Kind: KindWorker, Max: 4, Timeout: time.Second, Lease: time.Minute, Every: 30 * time.Second, Host: "h", PID: 1}
	a, err := Join(ctx, s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Join(ctx, s, cfg)
	ga, gb := newFakeGuard(), newFakeGuard()
	ga.demand = 4
	if err := a.Start(ctx, ga); err != nil {
		t.Fatal(err)
	}
	defer a.Close(true)
	if err := b.Start(ctx, gb); err != nil {
		t.Fatal(err)
	}
	defer b.Close(true)
	if share, until := ga.get(); share != 4 || time.Until(until) < 50*time.Second {
		t.Fatalf("a: share %d until %s", share, time.Until(until))
	}
	time.Sleep(200 * time.Millisecond) // both listening
	onPause, onOpen := tuneHooks(a)
	start := time.Now()
	onPause(time.Now().Add(5 * time.Second))
	select {
	case <-gb.pausedCh:
	case <-time.After(time.Second):
		t.Fatal("b was not paused within 1s of a's 429")
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("the pause took %s to reach b", d)
	}
	onOpen(time.Now().Add(3 * time.Second))
	select {
	case <-gb.openedCh:
	case <-time.After(time.Second):
		t.Fatal("b's breaker was not opened within 1s of a's")
	}
	select {
	case <-ga.openedCh:
		t.Fatal("a was held by its own opening: it is the one that probes")
	case <-time.After(200 * time.Millisecond):
	}
	gb.mu.Lock()
	open := time.Until(gb.open)
	gb.mu.Unlock()
	if open < 3*time.Second || open > 3*time.Second+ProbeMargin+200*time.Millisecond {
		t.Fatalf("b is open for %s, want a's 3s plus the probe margin", open)
	}
}

// A member stopped between its renewal's two round trips, holding the
// budget row, does not hold the other members' renewals past the idle
// timeout: its session is ended, the row released. Before, they waited as
// long as it was stopped (CI: a whole fleet on its safe shares).
func TestAStoppedRenewalDoesNotHoldTheOthers(t *testing.T) {
	other := openStore(t)
	ctx := context.Background()
	// Another pool on the same database: a second member.
	pool, err := pgxpool.New(ctx, other.pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	stopped := NewStore(pool)
	if _, _, err := other.Set(ctx, "b", 12, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	locked, release := make(chan struct{}), make(chan struct{})
	stopped.afterLock = func() { close(locked); <-release }
	failed := make(chan error, 1)
	go func() {
		_, err := stopped.Renew(ctx, "b", report("stopped", KindWorker, 4, 0, 0))
		failed <- err
	}()
	select {
	case <-locked:
	case err := <-failed:
		t.Fatalf("the first renewal ended before it held the row: %v", err)
	}
	// Without the timeout the other renewal would wait for the stopped one
	// as long as it is stopped: released after 5 s, it fails the test.
	go func() {
		time.Sleep(5 * time.Second)
		close(release)
	}()
	start := time.Now()
	if _, err := other.Renew(ctx, "b", report("other", KindWorker, 4, 0, 0)); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > renewIdleTimeout+2*time.Second {
		t.Fatalf("a renewal waited %s behind a stopped one, want about %s at most", took, renewIdleTimeout)
	}
}
