package e2e

import (
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
)

func TestBatchCallsAndRows(t *testing.T) {
	fake := &fakehf.Fake{}
	srv := fakehf.Start(fake)
	defer srv.Close()
	dir := t.TempDir()
	in := writeInput(t, dir, 100, uniqText)
	out := filepath.Join(dir, "out.csv")
	code, e := run(t, "classify", in, "-o", out, "--endpoint", srv.URL, "--retries", "0", "--batch-size", "8", "--no-progress")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	checkComplete(t, readResults(t, out), 100)
	if got := fake.Calls(); got != 13 {
		t.Fatalf("100 rows at --batch-size 8 made %d calls, want 13", got)
	}
	if !strings.Contains(e, "rows=100 ") || !strings.Contains(e, "calls=13 ") {
		t.Fatalf("the summary does not count rows and calls apart: %s", e)
	}
}

// One row the provider refuses (400) sinks only itself: its batch is split
// until it is alone.
func TestBatchWithOneBadRow(t *testing.T) {
	const n = 40
	bad := uniqText(13)
	fake := &fakehf.Fake{Script: func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
		if slices.Contains(texts, bad) {
			return fakehf.Reply{Status: 400}
		}
		return fakehf.Reply{}
	}}
	srv := fakehf.Start(fake)
	defer srv.Close()
	dir := t.TempDir()
	in := writeInput(t, dir, n, uniqText)
	out := filepath.Join(dir, "out.csv")
	code, e := run(t, "classify", in, "-o", out, "--endpoint", srv.URL, "--retries", "0", "--batch-size", "8", "--no-progress")
	if code != 1 {
		t.Fatalf("exit %d, want 1: %s", code, e)
	}
	rows := readResults(t, out)
	if len(rows) != n {
		t.Fatalf("%d rows", len(rows))
	}
	for i, r := range rows {
		want := "success"
		if i == 13 {
			want = "upstream_request_rejected"
		}
		if r["request_id"] != id(i) || r["outcome"] != want {
			t.Fatalf("row %d: %s %s (%s), want %s", i, r["request_id"], r["outcome"], r["error"], want)
		}
	}
	// 5 batches, and the bad one split 8 -> 4 -> 2 -> 1: 6 more calls.
	if got := fake.Calls(); got != 11 {
		t.Errorf("%d calls, want 11", got)
	}
}

// The fake answers in random order with random latencies; the results are
// still in input order, batched or not.
func TestOrderUnderRandomLatency(t *testing.T) {
	for _, batch := range []string{"1", "5"} {
		t.Run("batch="+batch, func(t *testing.T) {
			const n = 300
			fake := &fakehf.Fake{Script: func(int64, []string, *http.Request) fakehf.Reply {
				return fakehf.Reply{Delay: time.Duration(rand.IntN(15)) * time.Millisecond}
			}}
			srv := fakehf.Start(fake)
			defer srv.Close()
			dir := t.TempDir()
			in := writeInput(t, dir, n, uniqText)
			out := filepath.Join(dir, "out.csv")
			code, e := run(t, "classify", in, "-o", out, "--endpoint", srv.URL, "--retries", "0", "-c", "16", "--batch-size", batch, "--no-progress")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, e)
			}
			checkComplete(t, readResults(t, out), n)
			if fake.MaxInFlight() < 4 {
				t.Fatalf("max in flight %d: answers never overlapped, so order was not tested", fake.MaxInFlight())
			}
		})
	}
}

// Identical texts are sent once, even when the duplicates arrive while the
// first is in flight; --no-dedupe sends every row.
func TestDedupe(t *testing.T) {
	const n, distinct = 200, 10
	text := func(i int) string { return uniqText(i % distinct) }
	var calls atomic.Int64
	fake := &fakehf.Fake{Latency: 20 * time.Millisecond, Script: func(int64, []string, *http.Request) fakehf.Reply {
		calls.Add(1)
		return fakehf.Reply{}
	}}
	srv := fakehf.Start(fake)
	defer srv.Close()
	dir := t.TempDir()
	in := writeInput(t, dir, n, text)
	out := filepath.Join(dir, "out.csv")
	code, e := run(t, "classify", in, "-o", out, "--endpoint", srv.URL, "--retries", "0", "-c", "8", "--no-progress")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	rows := readResults(t, out)
	checkComplete(t, rows, n)
	for i, r := range rows {
		if r["label"] != rows[i%distinct]["label"] {
			t.Fatalf("row %d got another text's label", i)
		}
	}
	for txt, c := range fake.Seen() {
		if c != 1 {
			t.Fatalf("%q sent %d times", txt, c)
		}
	}
	unsent := 0
	for _, r := range rows {
		if r["attempts"] == "0" {
			unsent++
			if r["started_ms"] != "" || r["latency_ms"] != "" {
				t.Fatalf("reused row %s has a start (%q) or latency (%q) though it was never sent", r["request_id"], r["started_ms"], r["latency_ms"])
			}
		}
	}
	if unsent != 190 {
		t.Fatalf("%d rows with no attempt, want the 190 reused", unsent)
	}
	if !strings.Contains(e, "reused=190") {
		t.Fatalf("summary does not count reused rows: %s", e)
	}
	calls.Store(0)
	// --no-cache too: the response cache would answer a text once its
	// first row's answer is stored.
	code, e = run(t, "classify", in, "-o", out, "--endpoint", srv.URL, "--retries", "0", "-c", "8", "--no-dedupe", "--no-cache", "--no-progress")
	if code != 0 || calls.Load() != n {
		t.Fatalf("--no-dedupe: exit %d, %d calls, want %d: %s", code, calls.Load(), n, e)
	}
}
