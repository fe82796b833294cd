package resilience

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/provider"
)

func TestBucketDebtAndHeaders(t *testing.T) {
	now := time.Now()
	b := bucket{known: true, level: 100, capacity: 100, rate: 100, at: now}
	if d := b.take(60, now); d != 0 {
		t.Fatalf("within the burst: wait %v", d)
	}
	if d := b.take(60, now); d != 200*time.Millisecond {
		t.Fatalf("20 owed at 100/s: wait %v, want 200ms", d)
	}
	b.give(30, now) // the call cost 30 less than reserved
	if math.Abs(b.level-10) > 1e-9 {
		t.Fatalf("level %v, want 10", b.level)
	}
	b.give(1000, now.Add(time.Hour))
	if b.level != 100 {
		t.Fatalf("a refund beyond the burst: level %v, want the capacity", b.level)
	}
	// What a server's headers say, less the calls in flight; the rate is
	// the limit's (1000 short of it, whole in 2s: 500/s).
	var h bucket
	h.set(9000, 300, 10000, 2*time.Second, now)
	if h.level != 8700 || h.capacity != 10000 || h.rate != 500 {
		t.Fatalf("%+v", h)
	}
	if d := h.take(8700+250, now); d != 500*time.Millisecond {
		t.Fatalf("wait %v, want 500ms", d)
	}
	// Spent, with no rate to go by: whole again at the reset.
	var z bucket
	z.set(0, 0, 0, 3*time.Second, now)
	if d := z.take(10, now); d != 3*time.Second {
		t.Fatalf("wait %v, want the 3s reset", d)
	}
}

// burst sends n rows at once through g; it returns how many failed.
func burst(g *Guard, n int) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := g.Classify(ctx, &Row{}, []string{"a review of the service, number " + string(rune('a'+i%26))}); err != nil {
				mu.Lock()
				failed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return failed
}

// Against a provider holding a token bucket, --tpm at its rate and the
// headers alone both keep the calls under it; with neither, the same
// calls are refused.
func TestTokenPacingKeepsUnderTheProvidersBucket(t *testing.T) {
	const rate = 1500 // tokens a second, one second's burst
	for _, tc := range []struct {
		name    string
		cfg     Config
		max429  int64
		paced   bool
		headers bool
	}{
		{"tpm", Config{TPM: rate * 60}, 0, true, true},
		{"headers", Config{PaceByHeaders: true}, 1, true, true},
		{"none", Config{}, -1, false, false},
	} {
		f := &fakehf.Chat{Bucket: fakehf.Bucket{Rate: rate, Burst: rate}, HeadersOn429Only: !tc.headers}
		cfg := tc.cfg
		cfg.Concurrency, cfg.Retries, cfg.BackoffBase, cfg.BreakerMinCalls = 8, 10, time.Millisecond, 1000
		cfg.MaxRetryAfter = 5 * time.Second
		g := Build(startChat(t, f), cfg)
		failed := burst(g, 48)
		switch {
		case tc.paced && failed > 0:
			t.Errorf("%s: %d rows failed", tc.name, failed)
		case tc.paced && f.Rejected() > tc.max429:
			t.Errorf("%s: %d 429s of %d calls, want at most %d", tc.name, f.Rejected(), f.Calls(), tc.max429)
		case !tc.paced && f.Rejected() == 0:
			t.Errorf("%s: no 429 without pacing: the test proves nothing", tc.name)
		}
		t.Logf("%s: %d calls, %d 429s, %d tokens", tc.name, f.Calls(), f.Rejected(), f.Tokens())
	}
}

// The chat client's estimate is above what the fake counts, so that a
// reservation covers the call.
func TestChatEstimateCoversTheCall(t *testing.T) {
	f := &fakehf.Chat{}
	c := startChat(t, f)
	for _, text := range []string{"x", "a long review " + string(make([]byte, 3000))} {
		ans, err := c.Classify(context.Background(), provider.Call{Texts: []string{text}})
		if err != nil {
			t.Fatal(err)
		}
		if u, est := ans.Usage(), c.EstimateTokens([]string{text}); est < u.Total() {
			t.Errorf("estimate %d below the usage %d", est, u.Total())
		}
	}
}
