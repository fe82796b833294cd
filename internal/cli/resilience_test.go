package cli

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// These tests drive `hfsent classify` through Main against the fake
// provider on loopback, with the real HF client and real files.

func writeRows(t *testing.T, n int) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("request_id,text\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "r%d,order %d arrived on time and works well\n", i, i)
	}
	p := filepath.Join(t.TempDir(), "in.csv")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

type runResult struct {
	code    int
	stderr  string
	rows    []map[string]string
	summary map[string]any
}

func (r runResult) count(col, val string) int {
	n := 0
	for _, row := range r.rows {
		if row[col] == val {
			n++
		}
	}
	return n
}

func (r runResult) attempts(t *testing.T) int {
	n := 0
	for _, row := range r.rows {
		a, err := strconv.Atoi(row["attempts"])
		if err != nil {
			t.Fatalf("attempts %q: %v", row["attempts"], err)
		}
		n += a
	}
	return n
}

func (r runResult) resilience(key string) float64 {
	m, _ := r.summary["resilience"].(map[string]any)
	v, _ := m[key].(float64)
	return v
}

// classify runs hfsent classify INPUT against srv with args.
func classify(t *testing.T, srvURL, input string, args ...string) runResult {
	t.Helper()
	dir := t.TempDir()
	out, sum := filepath.Join(dir, "out.csv"), filepath.Join(dir, "summary.json")
	var stdout, stderr bytes.Buffer
	ios := &IOStreams{In: strings.NewReader(""), Out: &stdout, ErrOut: &stderr,
		Getenv: func(string) string { return "" }, HardExit: func(int) {}}
	argv := append([]string{"classify", input, "--endpoint", srvURL + "/models/{model}", "-o", out,
		"--summary-json", sum, "--no-progress"}, args...)
	res := runResult{code: Main(argv, ios), stderr: stderr.String()}
	f, err := os.Open(out)
	if err != nil {
		t.Fatalf("exit %d, no output: %v\n%s", res.code, err, res.stderr)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs[1:] {
		row := map[string]string{}
		for i, col := range recs[0] {
			row[col] = rec[i]
		}
		res.rows = append(res.rows, row)
	}
	b, err := os.ReadFile(sum)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &res.summary); err != nil {
		t.Fatal(err)
	}
	return res
}

func TestStormFinishesWithFew429s(t *testing.T) {
	if testing.Short() {
		t.Skip("storm takes a few seconds")
	}
	var failed, rejected atomic.Int64
	f := &fakehf.Fake{Latency: 100 * time.Millisecond}
	f.Script = func(n int64, _ []string, _ *http.Request) fakehf.Reply {
		if n%33 == 0 { // 3% of calls
			failed.Add(1)
			return fakehf.Reply{Status: 503}
		}
		// A provider that holds 8 requests at once and refuses the rest.
		if f.InFlight() > 8 {
			rejected.Add(1)
			return fakehf.Reply{Status: 429}
		}
		return fakehf.Reply{}
	}
	srv := fakehf.Start(f)
	defer srv.Close()

	res := classify(t, srv.URL, writeRows(t, 340), "-c", "32", "--adaptive")
	if res.code != ExitOK || res.count("outcome", "success") != 340 {
		t.Fatalf("exit %d, %d of 340 success\n%s", res.code, res.count("outcome", "success"), res.stderr)
	}
	calls, r429 := f.Calls(), rejected.Load()
	t.Logf("429s: %d of %d calls", r429, calls)
	if share := float64(r429) / float64(calls); share >= 0.10 {
		t.Fatalf("429s were %d of %d calls (%.1f%%), want under 10%%", r429, calls, 100*share)
	}
	if got := res.attempts(t); int64(got) != calls {
		t.Fatalf("attempts column sums to %d, the fake got %d calls", got, calls)
	}
	if got := res.resilience("rate_limited_429s"); int64(got) != r429 {
		t.Fatalf("summary says %v 429s, the fake sent %d", got, r429)
	}
	if l := res.resilience("adaptive_limit"); l < 1 || l > 32 {
		t.Fatalf("adaptive_limit %v outside [1, 32]", l)
	}
	if !strings.Contains(res.stderr, "adaptive_limit=") || !strings.Contains(res.stderr, "429s=") {
		t.Fatalf("summary line lacks the counters:\n%s", res.stderr)
	}
	t.Logf("storm: %d calls, %d 429s, %d 503s, max in flight %d; %s", calls, r429, failed.Load(), f.MaxInFlight(),
		strings.TrimSpace(res.stderr[strings.LastIndex(strings.TrimSpace(res.stderr), "\n")+1:]))
}

// outageFake answers 500 to every call from `after` to `after+length`
// after its first call, and counts the calls that arrive in that window.
type outageFake struct {
	after, length time.Duration
	once          sync.Once
	first         time.Time
	during        atomic.Int64
}

func (o *outageFake) script(int64, []string, *http.Request) fakehf.Reply {
	o.once.Do(func() { o.first = time.Now() })
	if s := time.Since(o.first); s >= o.after && s < o.after+o.length {
		o.during.Add(1)
		return fakehf.Reply{Status: 500}
	}
	return fakehf.Reply{}
}

var breakerFlags = []string{"--breaker-window", "500ms", "--breaker-min-calls", "5", "--breaker-cooldown", "300ms"}

func TestOutageWithFallback(t *testing.T) {
	o := &outageFake{after: 500 * time.Millisecond, length: 1200 * time.Millisecond}
	f := &fakehf.Fake{Latency: 10 * time.Millisecond, Script: o.script}
	srv := fakehf.Start(f)
	defer srv.Close()

	args := append([]string{"-c", "8", "--rps", "100", "--fallback-model", "local"}, breakerFlags...)
	res := classify(t, srv.URL, writeRows(t, 300), args...)
	ok, fb := res.count("outcome", "success"), res.count("outcome", "fallback")
	if res.code != ExitOK || ok+fb != 300 {
		t.Fatalf("exit %d: %d success + %d fallback of 300\n%s", res.code, ok, fb, res.stderr)
	}
	// 1.2 s at 100 calls/s would be 120 calls into the outage.
	if n := o.during.Load(); n > 60 {
		t.Fatalf("%d calls reached the provider during its outage, want the breaker to hold them back", n)
	}
	if fb < 40 || ok < 100 {
		t.Fatalf("%d fallback and %d success rows: want the outage's share downgraded and the rest served", fb, ok)
	}
	if res.count("model", "local/vader") != fb {
		t.Fatalf("fallback rows must name the fallback model")
	}
	if !strings.Contains(res.stderr, "breaker open: ") || !strings.Contains(res.stderr, "breaker closed") {
		t.Fatalf("breaker state changes not logged:\n%s", res.stderr)
	}
	if res.resilience("fallback_rows") != float64(fb) || res.resilience("breaker_openings") < 1 {
		t.Fatalf("summary counters wrong: %v", res.summary["resilience"])
	}
	t.Logf("outage with fallback: %d calls during the outage, %d fallback rows", o.during.Load(), fb)
}

func TestOutageWithoutFallbackRowsWait(t *testing.T) {
	o := &outageFake{after: 300 * time.Millisecond, length: 1200 * time.Millisecond}
	f := &fakehf.Fake{Latency: 10 * time.Millisecond, Script: o.script}
	srv := fakehf.Start(f)
	defer srv.Close()

	args := append([]string{"-c", "8", "--rps", "100"}, breakerFlags...)
	res := classify(t, srv.URL, writeRows(t, 200), args...)
	if res.code != ExitOK || res.count("outcome", "success") != 200 {
		t.Fatalf("exit %d, %d of 200 success\n%s", res.code, res.count("outcome", "success"), res.stderr)
	}
	if n := o.during.Load(); n > 60 {
		t.Fatalf("%d calls reached the provider during its outage, want the breaker to hold them back", n)
	}
	t.Logf("outage without fallback: %d calls during the outage", o.during.Load())
}

func TestRPSPacesProviderCalls(t *testing.T) {
	var mu sync.Mutex
	var at []time.Time
	f := &fakehf.Fake{Latency: 5 * time.Millisecond, Script: func(int64, []string, *http.Request) fakehf.Reply {
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
		return fakehf.Reply{}
	}}
	srv := fakehf.Start(f)
	defer srv.Close()

	res := classify(t, srv.URL, writeRows(t, 150), "-c", "8", "--rps", "50")
	if res.code != ExitOK || len(at) != 150 {
		t.Fatalf("exit %d, %d calls\n%s", res.code, len(at), res.stderr)
	}
	// The rate the fake saw, from its own arrival times.
	rate := float64(len(at)-1) / at[len(at)-1].Sub(at[0]).Seconds()
	if rate < 45 || rate > 55 {
		t.Fatalf("the fake saw %.1f calls/s, want 50 ± 5", rate)
	}
	// And no second of it much above the limit (burst 1).
	for i := range at {
		j := i
		for j < len(at) && at[j].Sub(at[i]) < time.Second {
			j++
		}
		if j-i > 55 {
			t.Fatalf("%d calls within one second from call %d", j-i, i)
		}
	}
}

func TestResilienceFlagsValidate(t *testing.T) {
	for _, args := range [][]string{
		{"--fallback-model", " "},
		{"--model", "a/b", "--fallback-model", "a/b"},
		{"--rps", "-1"},
	} {
		var stderr bytes.Buffer
		ios := &IOStreams{In: strings.NewReader(""), Out: &bytes.Buffer{}, ErrOut: &stderr,
			Getenv: func(string) string { return "" }}
		argv := append([]string{"classify", writeRows(t, 1), "--endpoint", "http://127.0.0.1:1/x"}, args...)
		if code := Main(argv, ios); code != ExitUsage {
			t.Fatalf("%v: exit %d, want 2\n%s", args, code, stderr.String())
		}
	}
}
