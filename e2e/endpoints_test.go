package e2e

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// switchable answers with broken until it is mended, then as a healthy
// provider: the same endpoint before and after the operator fixes it.
func switchable(broken func(n int64, texts []string, r *http.Request) fakehf.Reply) (*fakehf.Fake, *atomic.Bool) {
	var mended atomic.Bool
	return &fakehf.Fake{Latency: 2 * time.Millisecond, Script: func(n int64, texts []string, r *http.Request) fakehf.Reply {
		if mended.Load() {
			return fakehf.Reply{}
		}
		return broken(n, texts, r)
	}}, &mended
}

// resumeRedoesAll runs --resume against the mended endpoint and checks that
// every row is asked again and ends success: none was recorded final for a
// fault of the endpoint.
func resumeRedoesAll(t *testing.T, f *fakehf.Fake, mended *atomic.Bool, n int, args ...string) {
	t.Helper()
	mended.Store(true)
	before := f.Calls()
	code, stderr := run(t, append(args, "--resume")...)
	if code != 0 || f.Calls()-before != int64(n) {
		t.Fatalf("--resume against the mended endpoint: exit %d after %d calls, want 0 after redoing all %d\n%s", code, f.Calls()-before, n, stderr)
	}
}

// An endpoint that refuses every call (an old URL's 410, a model for
// another task that answers every call the same 422, a redirect that would
// make the POST a GET) stops the run as a 404 does: exit 1, a message
// naming it, a handful of calls instead of one or two per row, and no row
// recorded final, so a --resume against the corrected endpoint redoes them
// all.
func TestEndpointThatRefusesEveryCallStopsTheRun(t *testing.T) {
	const n = 200
	for _, c := range []struct {
		name  string
		reply func(n int64, texts []string, r *http.Request) fakehf.Reply
		says  string
		calls int64 // at most: the calls in flight when the answer came, and the slots they freed
	}{
		{"410 Gone", fakehf.Load("endpoint_410_gone").Script(), "gone: the endpoint no longer exists", 2 * 4},
		{"the same 422 for every call", fakehf.Load("router_422_text_plain").Script(), "refuses every call", 3 + 1 + 2*4},
		{"301 to a new URL", func(int64, []string, *http.Request) fakehf.Reply {
			return fakehf.Reply{Status: 301, Header: map[string]string{"Location": "https://user:PWSECRET@new.example/m?api_key=QSECRET"}, NoBody: true}
		}, "redirected to https://REDACTED@new.example/m?api_key=REDACTED", 2 * 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, mended := switchable(c.reply)
			srv := fakehf.Start(f)
			defer srv.Close()
			dir := t.TempDir()
			in := writeInput(t, dir, n, uniqText)
			out := filepath.Join(dir, "out.csv")
			args := []string{"classify", in, "-o", out, "--endpoint", srv.URL, "-c", "4", "--no-progress"}
			code, stderr := run(t, args...)
			if code != 1 || !strings.Contains(stderr, "stopped sending (endpoint refuses every call)") || !strings.Contains(stderr, c.says) {
				t.Fatalf("exit %d, want 1 naming the endpoint's refusal:\n%s", code, stderr)
			}
			if strings.Contains(stderr, "SECRET") {
				t.Fatalf("a credential shown:\n%s", stderr)
			}
			t.Logf("%s: %d calls for %d rows", c.name, f.Calls(), n)
			if f.Calls() > c.calls {
				t.Fatalf("the endpoint got %d calls, want at most %d", f.Calls(), c.calls)
			}
			rows := readResults(t, out)
			if len(rows) != n {
				t.Fatalf("%d rows written, want %d", len(rows), n)
			}
			for _, r := range rows {
				if o := r["outcome"]; o != "upstream_endpoint" && o != "not_attempted" {
					t.Fatalf("row %s: %s (%s): a fault of the endpoint recorded as the text's", r["request_id"], o, r["error"])
				}
			}
			resumeRedoesAll(t, f, mended, n, args...)
		})
	}
}

// The same 400 for every call (a model for another task) at --batch-size
// 4 and 16 stops the run as at --batch-size 1: exit 1, at most 2 × -c
// calls (before, each refused batch was split down to its single texts:
// 29 calls at -c 4 --batch-size 4), the rows sent upstream_endpoint, the
// rest not_attempted and counted so in the summary, none final; --resume
// against the mended endpoint redoes them all.
func TestEndpointRefusingEveryBatchStopsTheRun(t *testing.T) {
	const n = 200
	for _, bs := range []string{"4", "16"} {
		t.Run("--batch-size "+bs, func(t *testing.T) {
			f, mended := switchable(func(int64, []string, *http.Request) fakehf.Reply {
				return fakehf.Reply{Status: 400, Body: `{"error":"The model is not supported for task text-classification"}`}
			})
			srv := fakehf.Start(f)
			defer srv.Close()
			dir := t.TempDir()
			in := writeInput(t, dir, n, uniqText)
			out := filepath.Join(dir, "out.csv")
			args := []string{"classify", in, "-o", out, "--endpoint", srv.URL, "-c", "4", "--batch-size", bs, "--no-progress"}
			code, stderr := run(t, args...)
			if code != 1 || !strings.Contains(stderr, "stopped sending (endpoint refuses every call)") || !strings.Contains(stderr, "not supported for task") {
				t.Fatalf("exit %d, want 1 naming the endpoint's refusal:\n%s", code, stderr)
			}
			t.Logf("%d calls for %d rows", f.Calls(), n)
			if f.Calls() > 2*4 {
				t.Fatalf("the endpoint got %d calls, want at most 2 × -c = 8", f.Calls())
			}
			rows := readResults(t, out)
			counts := map[string]int{}
			for _, r := range rows {
				counts[r["outcome"]]++
				sent := r["attempts"] != "0"
				if o := r["outcome"]; sent != (o == "upstream_endpoint") || o != "upstream_endpoint" && o != "not_attempted" {
					t.Fatalf("row %s: %s after %s attempts (%s)", r["request_id"], o, r["attempts"], r["error"])
				}
			}
			if len(rows) != n || !strings.Contains(stderr, fmt.Sprintf("upstream_endpoint=%d ", counts["upstream_endpoint"])) ||
				!strings.Contains(stderr, fmt.Sprintf("not_attempted=%d ", counts["not_attempted"])) || !strings.Contains(stderr, fmt.Sprintf("calls=%d ", f.Calls())) {
				t.Fatalf("%d rows %v; the summary does not count them, or the calls (%d):\n%s", len(rows), counts, f.Calls(), stderr)
			}
			mended.Store(true)
			if code, stderr := run(t, append(args, "--resume")...); code != 0 {
				t.Fatalf("--resume against the mended endpoint: exit %d\n%s", code, stderr)
			}
			checkComplete(t, readResults(t, out), n)
		})
	}
}

// A model that is down for good (the router's HTML 503 for every call):
// nothing has succeeded since the start, and once a breaker window has
// passed and the breaker's probes fail too, the run stops: exit 1, the
// cause named, in seconds rather than a row deadline per window of rows.
// The rows not done are not final: --resume redoes them.
func TestProviderDownSinceTheStartStopsTheRun(t *testing.T) {
	const n = 300
	f, mended := switchable(fakehf.Load("router_503_html").Script())
	srv := fakehf.Start(f)
	defer srv.Close()
	dir := t.TempDir()
	in := writeInput(t, dir, n, uniqText)
	out := filepath.Join(dir, "out.csv")
	args := []string{"classify", in, "-o", out, "--endpoint", srv.URL, "-c", "4", "--no-progress",
		"--breaker-window", "2s", "--breaker-cooldown", "500ms", "--breaker-min-calls", "4"}
	start := time.Now()
	code, stderr := run(t, args...)
	took := time.Since(start)
	if code != 1 || !strings.Contains(stderr, "stopped sending (provider down)") || !strings.Contains(stderr, "HTTP 503") {
		t.Fatalf("exit %d after %s, want 1 naming the provider down:\n%s", code, took, stderr)
	}
	t.Logf("stopped after %s and %d calls for %d rows", took.Round(time.Millisecond), f.Calls(), n)
	if took > 30*time.Second || f.Calls() > n/2 {
		t.Fatalf("took %s and %d calls to stop", took, f.Calls())
	}
	rows := readResults(t, out)
	if len(rows) != n {
		t.Fatalf("%d rows", len(rows))
	}
	for _, r := range rows {
		switch r["outcome"] {
		case "success", "fallback", "invalid_input", "upstream_request_rejected":
			t.Fatalf("row %s recorded final (%s) though the provider was down", r["request_id"], r["outcome"])
		}
	}
	resumeRedoesAll(t, f, mended, n, args...)
}

// A bad day does not stop: an outage of the same 503s after the run has
// had successes is waited out (the breaker opens, its probes fail, it closes
// when the provider is back), whatever the breaker window.
func TestOutageAfterSuccessesIsWaitedOut(t *testing.T) {
	const n = 300
	var firstFail atomic.Int64
	f := &fakehf.Fake{Latency: 2 * time.Millisecond, Script: func(k int64, _ []string, _ *http.Request) fakehf.Reply {
		if k == 50 {
			firstFail.Store(time.Now().UnixNano())
		}
		if at := firstFail.Load(); at != 0 && time.Since(time.Unix(0, at)) < 4*time.Second {
			return fakehf.Load("router_503_html").Exchanges[0].Reply()
		}
		return fakehf.Reply{}
	}}
	srv := fakehf.Start(f)
	defer srv.Close()
	dir := t.TempDir()
	in := writeInput(t, dir, n, uniqText)
	out := filepath.Join(dir, "out.csv")
	code, stderr := run(t, "classify", in, "-o", out, "--endpoint", srv.URL, "-c", "4", "--no-progress", "--retries", "20",
		"--breaker-window", "1s", "--breaker-cooldown", "500ms", "--breaker-min-calls", "4")
	if code != 0 {
		t.Fatalf("exit %d on a bad day:\n%s", code, stderr)
	}
	checkComplete(t, readResults(t, out), n)
	if !strings.Contains(stderr, "breaker open") {
		t.Fatalf("the outage was not an outage:\n%s", stderr)
	}
}
