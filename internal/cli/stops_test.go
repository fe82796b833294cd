package cli

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// A 402 (no credits) or a 404 (no such model) for every call stops sending,
// like a rejected token: the message says which, the rows not sent are
// not_attempted, and none of them is final for --resume, so that after
// topping up (or fixing --model) a resume redoes them all.
func TestAccountOrModelThatCannotServeStopsTheRun(t *testing.T) {
	for _, c := range []struct {
		status  int
		outcome string
		says    string
	}{
		{402, "upstream_quota", "402 Payment Required"},
		{404, "upstream_not_found", "404 Not Found"},
	} {
		t.Run(c.outcome, func(t *testing.T) {
			var broken atomic.Bool
			broken.Store(true)
			f := &fakehf.Fake{Latency: 5 * time.Millisecond, Script: func(int64, []string, *http.Request) fakehf.Reply {
				if broken.Load() {
					return fakehf.Reply{Status: c.status}
				}
				return fakehf.Reply{}
			}}
			srv := fakehf.Start(f)
			defer srv.Close()
			in := writeRows(t, 200)
			out := filepath.Join(t.TempDir(), "out.csv")
			r := runMain(t, nil, "", "classify", in, "--endpoint", srv.URL+"/models/{model}", "-o", out, "-c", "2", "--no-progress")
			if r.code != ExitRowsFailed || !strings.Contains(r.stderr, c.says) || !strings.Contains(r.stderr, "stopped sending") {
				t.Fatalf("exit %d, want 1 with a message naming %s:\n%s", r.code, c.says, r.stderr)
			}
			if f.Calls() > 10 {
				t.Fatalf("%d calls after the provider said %d", f.Calls(), c.status)
			}
			b, _ := os.ReadFile(out)
			rows := parseResults(t, string(b))
			if len(rows) != 200 || rows[0]["outcome"] != c.outcome || rows[199]["outcome"] != "not_attempted" {
				t.Fatalf("%d rows, first %s, last %s", len(rows), rows[0]["outcome"], rows[len(rows)-1]["outcome"])
			}
			broken.Store(false)
			calls := f.Calls()
			r = runMain(t, nil, "", "classify", in, "--endpoint", srv.URL+"/models/{model}", "-o", out, "-c", "2", "--no-progress", "--resume")
			if r.code != ExitOK || f.Calls()-calls != 200 {
				t.Fatalf("resume: exit %d after %d calls, want 0 after redoing all 200\n%s", r.code, f.Calls()-calls, r.stderr)
			}
		})
	}
}

// An endpoint where nothing listens: the run stops at once, naming the host
// and the cause, instead of waiting out the row deadline.
func TestUnreachableProviderStopsEarly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	in := writeRows(t, 100)
	out := filepath.Join(t.TempDir(), "out.csv")
	start := time.Now()
	r := runMain(t, nil, "", "classify", in, "--endpoint", "http://"+addr+"/m", "-o", out, "--no-progress")
	if r.code != ExitRowsFailed || !strings.Contains(r.stderr, "cannot connect to "+addr+": connection refused") {
		t.Fatalf("exit %d, want 1 naming %s and the cause:\n%s", r.code, addr, r.stderr)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("took %s to give up on an endpoint that refuses every connection", d)
	}
	b, _ := os.ReadFile(out)
	rows := parseResults(t, string(b))
	if len(rows) != 100 || rows[99]["outcome"] != "not_attempted" {
		t.Fatalf("%d rows, the last %s; want every row written, the rest not_attempted", len(rows), rows[len(rows)-1]["outcome"])
	}
}

// --max-duration is a deadline: no call that has not been sent is sent after
// it, however long the rate limit or a Retry-After would make rows wait.
func TestMaxDurationIsADeadline(t *testing.T) {
	for _, c := range []struct {
		name  string
		reply fakehf.Reply
		args  []string
	}{
		{"rate limit", fakehf.Reply{}, []string{"--rps", "0.05", "-c", "4", "--max-duration", "1s"}},
		{"Retry-After", fakehf.Reply{Status: 429, Header: map[string]string{"Retry-After": "3"}}, []string{"-c", "4", "--max-duration", "500ms"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakehf.Fake{Latency: 5 * time.Millisecond, Script: func(int64, []string, *http.Request) fakehf.Reply { return c.reply }}
			srv := fakehf.Start(f)
			defer srv.Close()
			start := time.Now()
			res := classify(t, srv.URL, writeRows(t, 40), c.args...)
			// Before, these took 80 s and 12.6 s.
			if d := time.Since(start); d > 8*time.Second {
				t.Fatalf("the run took %s with %v", d, c.args)
			}
			calls := f.Calls()
			if res.code != ExitRowsFailed || len(res.rows) != 40 || calls > 4 {
				t.Fatalf("exit %d, %d rows, %d calls", res.code, len(res.rows), calls)
			}
			if res.count("outcome", "not_attempted") < 36 {
				t.Fatalf("%d rows not_attempted, want the rows never sent", res.count("outcome", "not_attempted"))
			}
		})
	}
}

// A row that was never sent because its deadline passed while it waited
// for the rate limit is recorded for what held it (local_capacity), not as
// a provider timeout.
func TestRowNeverSentIsNotATimeout(t *testing.T) {
	srv := fakehf.Start(&fakehf.Fake{Latency: 5 * time.Millisecond})
	defer srv.Close()
	res := classify(t, srv.URL, writeRows(t, 3), "--rps", "0.2", "-c", "1", "--row-deadline", "500ms")
	if res.rows[0]["outcome"] != "success" {
		t.Fatalf("first row: %v", res.rows[0])
	}
	for _, r := range res.rows[1:] {
		if r["outcome"] != "local_capacity" || !strings.Contains(r["error"], "--rps") || r["attempts"] != "0" {
			t.Fatalf("a row held by the rate limit past its deadline: %v", r)
		}
	}
}

// The local fallback's answers are not provider calls.
func TestFallbackCallsAreNotProviderCalls(t *testing.T) {
	f := &fakehf.Fake{Script: func(int64, []string, *http.Request) fakehf.Reply { return fakehf.Reply{Status: 500} }}
	srv := fakehf.Start(f)
	defer srv.Close()
	res := classify(t, srv.URL, writeRows(t, 60), "--fallback-model", "local", "--retries", "0",
		"--breaker-min-calls", "4", "--breaker-window", "1m", "-c", "4")
	if int64(res.summary["calls"].(float64)) != f.Calls() {
		t.Fatalf("summary calls %v, the provider got %d", res.summary["calls"], f.Calls())
	}
	if fb := res.summary["fallback_calls"].(float64); fb < 50 || res.count("outcome", "fallback") < 50 {
		t.Fatalf("fallback_calls %v, %d fallback rows", fb, res.count("outcome", "fallback"))
	}
}
