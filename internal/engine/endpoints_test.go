package engine

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/resilience"
	"github.com/hfsent/hfsent/internal/results"
)

// sentiment texts: even rows read positive, odd rows negative (fakehf.Label).
func mixedTexts(n int) ([]string, []string) {
	texts, want := make([]string, n), make([]string, n)
	for i := range texts {
		if i%2 == 0 {
			texts[i], want[i] = fmt.Sprintf("text %d: a lovely repair", i), "POSITIVE"
		} else {
			texts[i], want[i] = fmt.Sprintf("text %d: a terrible repair", i), "NEGATIVE"
		}
	}
	return texts, want
}

// At --batch-size 2, a text-embeddings-inference server reads each batch
// sent in the Hugging Face form as one pair and answers one flat list of the
// pair's labels: before, the first text of each pair got the pair's label
// and the second the least likely one, every row success. Now such an
// answer is split and each text asked alone, and every label is right; in
// TEI's own form (--provider tei, or a URL ending in /predict) one call
// answers each batch.
func TestTEIBatchesGetEveryLabelRight(t *testing.T) {
	const n = 40
	texts, want := mixedTexts(n)
	for _, c := range []struct {
		name      string
		path, api string
		calls     int64 // at most
	}{
		{"hf form to TEI's POST /", "/", "", 3 * n / 2},
		{"tei form", "/", provider.APITEI, n / 2},
		{"a URL ending in /predict", "/predict", "", n / 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			tei := &fakehf.TEI{}
			srv := httptest.NewServer(tei)
			defer srv.Close()
			hf, err := provider.NewHF(provider.HFConfig{Endpoint: srv.URL + c.path, API: c.api, Concurrency: 4, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			sink := &keepSink{}
			sum, err := Run(context.Background(), &listSource{texts: texts}, sink, resilience.Build(hf, resilience.Config{Concurrency: 4}),
				Config{BatchSize: 2})
			if err != nil {
				t.Fatal(err)
			}
			if sum.Counts[outcome.Success] != n {
				t.Fatalf("outcomes %v", sum.Counts)
			}
			for _, r := range sink.rows {
				if r.Label != want[r.Seq] {
					t.Fatalf("row %d (%q) labelled %s %.4f, want %s", r.Seq, texts[r.Seq], r.Label, r.Score, want[r.Seq])
				}
			}
			if tei.Calls() > c.calls {
				t.Fatalf("%d calls for %d rows, want at most %d", tei.Calls(), n, c.calls)
			}
		})
	}
}

func guardedURL(t *testing.T, url string, c int, cfg resilience.Config) *resilience.Guard {
	t.Helper()
	cfg.Concurrency = c
	return resilience.Build(hfClient(t, url, c), cfg)
}

// An endpoint that refuses every call with the same 4xx (a model for
// another task: the recorded 422 "missing field `inputs`") stops the run as
// a 404 does, after the first three calls and one harmless sample; no row
// is recorded final, so a --resume against the corrected endpoint redoes
// them all.
func TestEndpointRefusingEveryCallStopsTheRun(t *testing.T) {
	for _, c := range []int{1, 4} {
		t.Run(fmt.Sprint("-c ", c), func(t *testing.T) {
			f := &fakehf.Fake{Script: fakehf.Load("router_422_text_plain").Script()}
			srv := fakehf.Start(f)
			defer srv.Close()
			texts, _ := mixedTexts(100)
			sink := &keepSink{}
			sum, err := Run(context.Background(), &listSource{texts: texts}, sink, guardedURL(t, srv.URL, c, resilience.Config{}), Config{})
			if err != nil {
				t.Fatal(err)
			}
			if sum.Stop != StopEndpoint || !sum.Stop.ProviderStop() || !strings.Contains(sum.StopDetail, "refuses every call") ||
				!strings.Contains(sum.StopDetail, "missing field `inputs`") {
				t.Fatalf("stop %q: %s", sum.Stop, sum.StopDetail)
			}
			// Three texts, the sample, and the calls already on their way
			// (a row held for the verdict holds no slot).
			t.Logf("-c %d: %d calls for 100 rows", c, f.Calls())
			if f.Calls() > int64(resilience.RefusedAfter+1+c) {
				t.Fatalf("%d calls", f.Calls())
			}
			if len(sink.rows) != 100 {
				t.Fatalf("%d rows written", len(sink.rows))
			}
			for _, r := range sink.rows {
				if r.Outcome.Final() || r.Outcome != outcome.UpstreamEndpoint && r.Outcome != outcome.NotAttempted {
					t.Fatalf("row %d: %s (%s): a fault of the endpoint recorded as the text's", r.Seq, r.Outcome, r.Error)
				}
			}
		})
	}
}

// The same 4xx for the first texts because they are bad (poison rows at
// the start of a healthy run): the sample succeeds, the run goes on, and
// the bad rows are upstream_request_rejected, final, as always. They were
// held (no slot) until the verdict, so that outcome does not depend on
// which answer came first.
func TestPoisonTextsFirstDoNotStopTheRun(t *testing.T) {
	f := &fakehf.Fake{Script: func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
		if strings.HasPrefix(texts[0], "poison") {
			return fakehf.Load("toolkit_400_too_long").Exchanges[0].Reply()
		}
		return fakehf.Reply{}
	}}
	srv := fakehf.Start(f)
	defer srv.Close()
	texts := []string{"poison a", "poison b", "poison c", "poison d"}
	for i := range 30 {
		texts = append(texts, fmt.Sprint("a fine text ", i))
	}
	for _, c := range []int{1, 8} {
		sink := &keepSink{}
		sum, err := Run(context.Background(), &listSource{texts: texts}, sink, guardedURL(t, srv.URL, c, resilience.Config{}), Config{})
		if err != nil {
			t.Fatal(err)
		}
		if sum.Stop != StopNone || sum.Counts[outcome.UpstreamRequestRejected] != 4 || sum.Counts[outcome.Success] != 30 {
			t.Fatalf("-c %d: stop %q, outcomes %v", c, sum.Stop, sum.Counts)
		}
		if r := sink.rows[0]; !strings.Contains(r.Error, "The size of tensor a (664)") {
			t.Fatalf("-c %d: the server's reason is not in the error: %q", c, r.Error)
		}
	}
}

// Batches refused for one poison text each, before any call succeeded:
// each refused batch is held for the verdict, the third completes the
// streak, the sample succeeds, and only then are the batches split, so
// that each poison row ends alone, upstream_request_rejected, and its
// neighbours succeed; the run goes on.
func TestPoisonBatchesFirstDoNotStopTheRun(t *testing.T) {
	const bs = 4
	f := &fakehf.Fake{Latency: 5 * time.Millisecond, Script: func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
		if slices.ContainsFunc(texts, func(s string) bool { return strings.HasPrefix(s, "poison") }) {
			return fakehf.Load("toolkit_400_too_long").Exchanges[0].Reply()
		}
		return fakehf.Reply{}
	}}
	srv := fakehf.Start(f)
	defer srv.Close()
	var texts []string
	for i := range 40 {
		if i%bs == 1 && i < 4*bs {
			texts = append(texts, fmt.Sprint("poison ", i)) // one in each of the first four batches
		} else {
			texts = append(texts, fmt.Sprint("a fine text ", i))
		}
	}
	for _, c := range []int{1, 4} {
		sink := &keepSink{}
		before := f.Calls()
		sum, err := Run(context.Background(), &listSource{texts: texts}, sink, guardedURL(t, srv.URL, c, resilience.Config{}),
			Config{BatchSize: bs, RowDeadline: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("-c %d: %d calls", c, f.Calls()-before)
		if sum.Stop != StopNone || sum.Counts[outcome.UpstreamRequestRejected] != 4 || sum.Counts[outcome.Success] != 36 {
			t.Fatalf("-c %d: stop %q (%s), outcomes %v", c, sum.Stop, sum.StopDetail, sum.Counts)
		}
		for _, r := range sink.rows {
			if poison := strings.HasPrefix(texts[r.Seq], "poison"); poison != (r.Outcome == outcome.UpstreamRequestRejected) {
				t.Fatalf("-c %d: row %d (%q): %s (%s)", c, r.Seq, texts[r.Seq], r.Outcome, r.Error)
			}
		}
	}
}

// Fewer rows than it takes to judge the endpoint, all refused: nothing more
// can come, so the rows are not held for ever; they end as the text's
// fault, as the evidence stands.
func TestFewRowsAllRefusedAreNotHeld(t *testing.T) {
	f := &fakehf.Fake{Script: func(int64, []string, *http.Request) fakehf.Reply { return fakehf.Reply{Status: 400} }}
	srv := fakehf.Start(f)
	defer srv.Close()
	done := make(chan Summary, 1)
	go func() {
		sum, _ := Run(context.Background(), &listSource{texts: []string{"a", "b"}}, &keepSink{}, guardedURL(t, srv.URL, 4, resilience.Config{}),
			Config{RowDeadline: time.Minute})
		done <- sum
	}()
	select {
	case sum := <-done:
		if sum.Counts[outcome.UpstreamRequestRejected] != 2 {
			t.Fatalf("outcomes %v", sum.Counts)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("two refused rows held with nothing more to come")
	}
}

// A provider that has failed every call since the start (the router's HTML
// 503 for a model down for good), the breaker's probes included, for a
// whole breaker window, stops the run: it does not wait out every row's
// deadline. The rows not done are not final.
func TestProviderDownSinceTheStartStopsTheRun(t *testing.T) {
	f := &fakehf.Fake{Script: fakehf.Load("router_503_html").Script()}
	srv := fakehf.Start(f)
	defer srv.Close()
	texts, _ := mixedTexts(200)
	sink := &keepSink{}
	cfg := resilience.Config{BreakerWindow: time.Second, BreakerCooldown: 300 * time.Millisecond, BreakerMinCalls: 4, BackoffBase: 50 * time.Millisecond}
	start := time.Now()
	sum, err := Run(context.Background(), &listSource{texts: texts}, sink, guardedURL(t, srv.URL, 4, cfg), Config{RowDeadline: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Stop != StopDown || !strings.Contains(sum.StopDetail, "HTTP 503") {
		t.Fatalf("stop %q: %s", sum.Stop, sum.StopDetail)
	}
	if d := time.Since(start); d > time.Minute {
		t.Fatalf("took %s", d)
	}
	for _, r := range sink.rows {
		if r.Outcome.Final() {
			t.Fatalf("row %d recorded final: %s", r.Seq, r.Outcome)
		}
	}
	if sum.Counts[outcome.NotAttempted] < 150 {
		t.Fatalf("outcomes %v: want most rows never sent", sum.Counts)
	}
}

// A dedicated endpoint scaled to zero answers 503 until a replica is up:
// the rows that got it ask again with X-Scale-Up-Timeout, which makes the
// proxy hold them until it is, and wait that long (within the row's
// deadline) where they gave up after about 3.5 s. With more rows failing at
// once than the breaker lets pass (-c 32), the breaker opens and its probes
// are held too, and close it.
func TestScaledToZeroEndpointServesTheRun(t *testing.T) {
	for _, c := range []int{8, 32} {
		t.Run(fmt.Sprint("-c ", c), func(t *testing.T) {
			proxy := &fakehf.ScaledToZero{Inner: fakehf.Handler(&fakehf.Fake{}), StartUp: 2 * time.Second}
			srv := httptest.NewServer(proxy)
			defer srv.Close()
			hf, err := provider.NewHF(provider.HFConfig{Endpoint: srv.URL, Concurrency: c, Timeout: 500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			texts, want := mixedTexts(60)
			sink := &keepSink{}
			g := resilience.Build(hf, resilience.Config{Concurrency: c, Retries: 4, BreakerCooldown: time.Second, BreakerWindow: 30 * time.Second})
			sum, err := Run(context.Background(), &listSource{texts: texts}, sink, g, Config{RowDeadline: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if sum.Counts[outcome.Success] != 60 || sum.Stop != StopNone {
				t.Fatalf("outcomes %v, stop %q; the proxy refused %d calls and held %d", sum.Counts, sum.Stop, proxy.Refused(), proxy.Held())
			}
			for _, r := range sink.rows {
				if r.Label != want[r.Seq] {
					t.Fatalf("row %d: %s", r.Seq, r.Label)
				}
			}
			if proxy.Held() == 0 {
				t.Fatal("no call was held: X-Scale-Up-Timeout was not sent")
			}
		})
	}
}

// The same refusal for every call stops the run within 2 × -c calls
// whatever --batch-size is: a batch the endpoint refuses is one call of
// evidence, held (no slot) until the verdict, and split only if the
// endpoint is found to serve. Before, each refused batch of b texts was
// split down to its single texts (up to 2b-1 calls) before the verdict
// could come: 32 calls at -c 4 --batch-size 4, 41 at 8, 57 at 16; now 8,
// RefusedAfter + 1 + c, as at --batch-size 1. Rows sent end
// upstream_endpoint, the others not_attempted, none final, and the
// summary counts what was sent.
func TestEndpointRefusingEveryBatchStopsTheRun(t *testing.T) {
	const c, n = 4, 200
	wrongTask := fakehf.Reply{Status: 400, Header: map[string]string{"Content-Type": "application/json"},
		Body: `{"error":"The model is not supported for task text-classification"}`}
	for _, r := range []struct {
		name  string
		reply fakehf.Reply
		says  string
	}{
		{"400 wrong task", wrongTask, "not supported for task text-classification"},
		{"405", fakehf.Reply{Status: 405}, "405"},
		{"410", fakehf.Load("endpoint_410_gone").Exchanges[0].Reply(), "gone"},
	} {
		for _, bs := range []int{1, 4, 8, 16} {
			t.Run(fmt.Sprintf("%s/--batch-size %d", r.name, bs), func(t *testing.T) {
				f := &fakehf.Fake{Latency: 5 * time.Millisecond, Script: func(int64, []string, *http.Request) fakehf.Reply { return r.reply }}
				srv := fakehf.Start(f)
				defer srv.Close()
				texts, _ := mixedTexts(n)
				sink := &keepSink{}
				sum, err := Run(context.Background(), &listSource{texts: texts}, sink, guardedURL(t, srv.URL, c, resilience.Config{}),
					Config{BatchSize: bs, RowDeadline: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%d calls for %d rows; outcomes %v", f.Calls(), n, sum.Counts)
				if sum.Stop != StopEndpoint || !sum.Stop.ProviderStop() || !strings.Contains(sum.StopDetail, r.says) {
					t.Fatalf("stop %q: %s", sum.Stop, sum.StopDetail)
				}
				if f.Calls() > 2*c {
					t.Fatalf("%d calls before the run stopped, want at most 2 × -c = %d", f.Calls(), 2*c)
				}
				checkStoppedRows(t, sum, sink.rows, n, f.Calls())
			})
		}
	}
}

// checkStoppedRows checks the rows of a run the endpoint stopped: each row
// once, upstream_endpoint if it was sent, not_attempted (no attempt, no
// start) if not, none final; and the summary counts them and the calls.
func checkStoppedRows(t *testing.T, sum Summary, rows []results.Row, n int, calls int64) {
	t.Helper()
	if len(rows) != n || sum.Rows != int64(n) {
		t.Fatalf("%d rows written, %d in the summary, want %d", len(rows), sum.Rows, n)
	}
	var sent, unsent int64
	for _, row := range rows {
		switch {
		case row.Outcome.Final():
			t.Fatalf("row %d: %s (%s): a fault of the endpoint recorded final", row.Seq, row.Outcome, row.Error)
		case row.Outcome == outcome.UpstreamEndpoint && row.Attempts > 0 && row.StartedMs >= 0:
			sent++
		case row.Outcome == outcome.NotAttempted && row.Attempts == 0 && row.StartedMs == -1:
			unsent++
		default:
			t.Fatalf("row %d: %s after %d attempts, started at %d ms (%s)", row.Seq, row.Outcome, row.Attempts, row.StartedMs, row.Error)
		}
	}
	if sum.Counts[outcome.UpstreamEndpoint] != sent || sum.Counts[outcome.NotAttempted] != unsent || sent+unsent != int64(n) {
		t.Fatalf("summary counts %v, rows: %d sent, %d never sent", sum.Counts, sent, unsent)
	}
	if sum.Provider.Calls != calls {
		t.Fatalf("summary counts %d calls, the provider got %d", sum.Provider.Calls, calls)
	}
}
