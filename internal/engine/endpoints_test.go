package engine

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/resilience"
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
// a 404 does, after the first three texts and one harmless sample; no row
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
