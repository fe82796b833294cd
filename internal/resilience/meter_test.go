package resilience

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/provider"
)

// Every call a row sends is counted once, where the guard sends it (its
// meter), whatever the provider: a client records nothing itself. An HF
// row asked three times has three attempts, as many as the provider got and
// the counters hold; the embedded model, guarded Plain, has one per row; a
// row whose context ended before its call has none.
func TestAttemptsCountedOnTheRow(t *testing.T) {
	f := &fakehf.Fake{Script: func(n int64, _ []string, _ *http.Request) fakehf.Reply {
		if n <= 2 {
			return fakehf.Reply{Status: 503}
		}
		return fakehf.Reply{}
	}}
	c := &Counters{}
	g := Build(startFake(t, f), Config{Retries: 4, BackoffBase: time.Millisecond, Counters: c})
	ans, attempts, err := classifyRow(g, 10*time.Second)
	if err != nil || len(ans.Predictions) != 1 {
		t.Fatalf("got %+v, %v; want an answer after two 503s", ans, err)
	}
	if s := c.Snapshot(time.Second); attempts != 3 || f.Calls() != 3 || s.Calls != 3 || s.Retries != 2 {
		t.Fatalf("attempts %d, provider calls %d, counters %+v: want 3 of each and 2 retries", attempts, f.Calls(), s)
	}

	lc := &Counters{}
	local := Build(provider.NewLocal(), Config{Plain: true, Concurrency: 2, Counters: lc})
	for range 3 {
		row := &Row{}
		if _, err := local.Classify(context.Background(), row, []string{"Great service, thank you!"}); err != nil {
			t.Fatal(err)
		}
		if at, ok := row.FirstAttempt(); row.Attempts() != 1 || !ok || time.Since(at) > time.Minute {
			t.Fatalf("local row: %d attempts, first at %v (%v); want 1, just now", row.Attempts(), at, ok)
		}
	}
	if s := local.Stats(time.Second); s.Calls != 3 || s.Policies {
		t.Fatalf("local stats %+v: want 3 calls, and no policies", s)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	row := &Row{}
	if _, err := local.Classify(ctx, row, []string{"never sent"}); !errors.Is(err, context.Canceled) || row.Attempts() != 0 || lc.Calls.Load() != 3 {
		t.Fatalf("a row whose context ended: err %v, %d attempts, %d calls counted; want the context's error and nothing counted", err, row.Attempts(), lc.Calls.Load())
	}
}
