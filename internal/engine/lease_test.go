package engine

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/input"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/resilience"
	"github.com/hfsent/hfsent/internal/results"
)

// lease is a Job.Lease the test ends.
type lease struct{ lapsed atomic.Bool }

func (l *lease) Held() bool { return !l.lapsed.Load() }

// A row is sent only while its lease holds, asked just before each call:
// one whose lease lapsed while it waited for its retry's backoff is not
// sent again, and ends not_attempted (its queue gives it back), not with
// the failure it had; one that lapsed before its first call is never sent.
func TestJobLeaseCheckedBeforeEachCall(t *testing.T) {
	l := &lease{}
	fake := &fakehf.Fake{Script: func(n int64, _ []string, _ *http.Request) fakehf.Reply {
		l.lapsed.Store(true) // while the row waits for its retry
		return fakehf.Reply{Status: 503}
	}}
	srv := fakehf.Start(fake)
	defer srv.Close()
	g := guarded(t, srv.URL, resilience.Config{Concurrency: 2, Retries: 3, BackoffBase: 20 * time.Millisecond})
	p := NewPipeline(context.Background(), g, Config{})
	defer p.Close()
	got := make(chan results.Row, 2)
	p.Submit(&Job{Row: input.Row{ID: "a", Text: "fine"}, Lease: l, Done: func(r results.Row) { got <- r }})
	if r := <-got; r.Outcome != outcome.NotAttempted || fake.Calls() != 1 {
		t.Fatalf("got %s (%s) after %d calls; want not_attempted after the first call only", r.Outcome, r.Error, fake.Calls())
	}
	p.Submit(&Job{Row: input.Row{ID: "b", Text: "fine too"}, Lease: l, Done: func(r results.Row) { got <- r }})
	if r := <-got; r.Outcome != outcome.NotAttempted || r.StartedMs != -1 || fake.Calls() != 1 {
		t.Fatalf("got %s (%s), started %d, after %d calls; want not_attempted, never sent", r.Outcome, r.Error, r.StartedMs, fake.Calls())
	}
}
