package resilience

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// TestFailFastDoesNotWaitPastTheDeadline: with Row.FailFast (a server), a
// retry whose wait (here a 429's Retry-After) ends past the row's deadline
// is not waited for: the row ends at once with the provider's answer and
// its Retry-After.
func TestFailFastDoesNotWaitPastTheDeadline(t *testing.T) {
	f := &fakehf.Fake{Script: func(int64, []string, *http.Request) fakehf.Reply {
		return fakehf.Reply{Status: 429, Header: map[string]string{"Retry-After": "30"}}
	}}
	g := Build(startFake(t, f), Config{Retries: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	begin := time.Now()
	_, err := g.Classify(ctx, &Row{FailFast: true}, []string{"it works"})
	pe, ok := provider.AsError(err)
	if !ok || pe.Outcome != outcome.UpstreamRateLimited || pe.RetryAfter != 30*time.Second {
		t.Fatalf("err %v, want upstream_rate_limited with Retry-After 30s", err)
	}
	if took := time.Since(begin); took > 5*time.Second || f.Calls() != 1 {
		t.Fatalf("ended after %s and %d calls: the wait could not fit the deadline", took, f.Calls())
	}
}
