package engine

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/input"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/resilience"
	"github.com/hfsent/hfsent/internal/results"
)

// listSource yields the given texts as rows id0, id1, ...
type listSource struct {
	texts []string
	next  int
}

func (l *listSource) Next() (input.Row, error) {
	if l.next == len(l.texts) {
		return input.Row{}, io.EOF
	}
	i := l.next
	l.next++
	return input.Row{Seq: int64(i), Line: i + 2, ID: fmt.Sprint("id", i), Text: l.texts[i]}, nil
}

// keepSink keeps every row written.
type keepSink struct {
	mu   sync.Mutex
	rows []results.Row
}

func (k *keepSink) Write(rows []results.Row) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.rows = append(k.rows, rows...)
	return nil
}

func guarded(t testing.TB, url string, cfg resilience.Config) *resilience.Guard {
	t.Helper()
	return resilience.Build(hfClient(t, url, cfg.Concurrency), cfg)
}

// When the call for a text fails, the rows waiting on the same text do not
// each send their own: the text passes to one of them, and the rest wait for
// its answer. 50 identical texts and one 503 make two calls.
func TestDedupeHandsAFailedTextToOneWaiter(t *testing.T) {
	fake := &fakehf.Fake{Latency: 20 * time.Millisecond, Script: func(n int64, _ []string, _ *http.Request) fakehf.Reply {
		if n == 1 {
			return fakehf.Reply{Status: 503}
		}
		return fakehf.Reply{}
	}}
	srv := fakehf.Start(fake)
	defer srv.Close()
	texts := make([]string, 50)
	for i := range texts {
		texts[i] = "the same text"
	}
	sink := &keepSink{}
	cls := guarded(t, srv.URL, resilience.Config{Retries: 0, Concurrency: 8})
	sum, err := Run(context.Background(), &listSource{texts: texts}, sink, cls, Config{Dedupe: true})
	if err != nil {
		t.Fatal(err)
	}
	if fake.Calls() != 2 {
		t.Fatalf("the fake got %d calls for 50 identical texts and one 503, want 2", fake.Calls())
	}
	if sum.Counts[outcome.Success] != 49 || sum.Counts[outcome.UpstreamFailed] != 1 {
		t.Fatalf("outcomes %v, want 49 success and the one 503", sum.Counts)
	}
}

// -c bounds calls in flight, not rows: rows backing off before a retry hold
// no slot, so at -c 2 two rows that keep failing do not stop the others.
func TestRowsInRetryHoldNoSlot(t *testing.T) {
	fake := &fakehf.Fake{Latency: 10 * time.Millisecond, Script: func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
		if strings.HasPrefix(texts[0], "poison") {
			return fakehf.Reply{Status: 503}
		}
		return fakehf.Reply{}
	}}
	srv := fakehf.Start(fake)
	defer srv.Close()
	texts := []string{"poison a", "poison b"}
	for i := range 40 {
		texts = append(texts, fmt.Sprint("good text ", i))
	}
	sink := &keepSink{}
	cls := guarded(t, srv.URL, resilience.Config{Retries: 4, BackoffBase: 400 * time.Millisecond, Concurrency: 2, BreakerMinCalls: 1000})
	if _, err := Run(context.Background(), &listSource{texts: texts}, sink, cls, Config{}); err != nil {
		t.Fatal(err)
	}
	if fake.MaxInFlight() > 2 {
		t.Fatalf("%d calls in flight at -c 2", fake.MaxInFlight())
	}
	var poisonEnd, goodEnd int64
	for _, r := range sink.rows {
		if r.Outcome != outcome.Success {
			poisonEnd = max(poisonEnd, r.FinishedMs)
		} else {
			goodEnd = max(goodEnd, r.FinishedMs)
		}
	}
	// The poison rows back off at least 0.2+0.4+0.8+1.6 s; the good rows
	// need 40 x 10 ms over two slots, once the poison rows give theirs back.
	if poisonEnd < 2000 || goodEnd > poisonEnd/2 {
		t.Fatalf("good rows done at %d ms, poison rows at %d ms: the rows in backoff held the slots", goodEnd, poisonEnd)
	}
}

// panicky panics on one text.
type panicky struct{ provider.Classifier }

func (p panicky) Classify(ctx context.Context, call provider.Call) (provider.Answer, error) {
	if call.Texts[0] == "boom" {
		panic("a bug in a classifier")
	}
	return p.Classifier.Classify(ctx, call)
}

// A panic in a classifier ends its row upstream_failed; the rows around it,
// waiting to be written, are not lost with it.
func TestClassifierPanicEndsOnlyItsRow(t *testing.T) {
	srv := fakehf.Start(&fakehf.Fake{})
	defer srv.Close()
	sink := &keepSink{}
	texts := []string{"one", "boom", "three", "four"}
	sum, err := Run(context.Background(), &listSource{texts: texts}, sink, plain(panicky{hfClient(t, srv.URL, 2)}, 2), Config{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Rows != 4 || sum.Counts[outcome.Success] != 3 || sum.Counts[outcome.UpstreamFailed] != 1 {
		t.Fatalf("rows %d, outcomes %v; want 3 success and the panicking row upstream_failed", sum.Rows, sum.Counts)
	}
	if sink.rows[1].Outcome != outcome.UpstreamFailed || !strings.Contains(sink.rows[1].Error, "internal error") {
		t.Fatalf("row 1: %+v", sink.rows[1])
	}
}

// After a write error, every row still gets an outcome and is counted, as
// written or lost: the counts add up.
func TestCountsAddUpAfterAWriteError(t *testing.T) {
	srv := fakehf.Start(&fakehf.Fake{Latency: 2 * time.Millisecond})
	defer srv.Close()
	texts := make([]string, 300)
	for i := range texts {
		texts[i] = fmt.Sprint("text ", i)
	}
	sink := &failingSink{after: 100}
	sum, err := Run(context.Background(), &listSource{texts: texts}, sink, plain(hfClient(t, srv.URL, 4), 4), Config{})
	if err == nil {
		t.Fatal("no write error")
	}
	var counted int64
	for _, n := range sum.Counts {
		counted += n
	}
	if sum.Written != int64(sink.n) || sum.Lost == 0 || sum.Rows != sum.Written+sum.Lost || counted != sum.Rows {
		t.Fatalf("rows %d = written %d + lost %d? counts add to %d", sum.Rows, sum.Written, sum.Lost, counted)
	}
}

type failingSink struct{ after, n int }

func (f *failingSink) Write(rows []results.Row) error {
	if f.n+len(rows) > f.after {
		return fmt.Errorf("disk full")
	}
	f.n += len(rows)
	return nil
}

// A request that finds no slot because the provider asked everyone to
// pause (a 429's Retry-After) is told so, with the time left, not just
// "no capacity".
func TestNoSlotDuringAPauseIsRateLimited(t *testing.T) {
	srv := fakehf.Start(&fakehf.Fake{})
	defer srv.Close()
	g := guarded(t, srv.URL, resilience.Config{Concurrency: 2})
	g.PauseUntil(time.Now().Add(3 * time.Second))
	p := NewPipeline(context.Background(), g, Config{AdmissionWait: 50 * time.Millisecond, FailFast: true})
	defer p.Close()
	got := make(chan results.Row, 1)
	p.Submit(&Job{Row: input.Row{ID: "a", Text: "fine"}, Done: func(r results.Row) { got <- r }})
	r := <-got
	if r.Outcome != outcome.UpstreamRateLimited || r.RetryAfter < 2*time.Second || r.Attempts != 0 {
		t.Fatalf("got %s after %d attempts, Retry-After %s; want upstream_rate_limited, not sent, about 3s", r.Outcome, r.Attempts, r.RetryAfter)
	}
}
