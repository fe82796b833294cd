package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/queue/pgtest"
)

// scrape reads one series' value from a /metrics page (-1: not there).
func scrape(page, name string) float64 {
	for line := range strings.Lines(page) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// A worker with --metrics-addr serves /metrics while it runs: its claims,
// its provider's counters and the token rate it learnt from a provider
// that refuses by a limit it sends no header for. A busy port is a usage
// error naming the flag, before any call.
func TestWorkerMetricsAddr(t *testing.T) {
	db := pgtest.URL(t)
	const rate = 6000.0 // tokens a second
	f := &fakehf.Chat{Latency: 20 * time.Millisecond, Bucket: fakehf.Bucket{Rate: rate, Burst: rate},
		NoLimitHeaders: true, RetryAfterMs: true}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	rows := clientRows("m", 160)
	for i := range rows {
		rows[i][1] = fmt.Sprintf("review %d: %s", i, strings.Repeat("the service was fine and quick ", 9))
	}
	pushBatch(t, db, "m", rows, "--provider", "chat", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--labels", "positive,negative")

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := runBin(t, append(qenv(db), "HF_TOKEN=hf_x"), append([]string{"worker", "--batch", "m", "--exit-when-done", "--no-progress",
		"--metrics-addr", busy.Addr().String()}, chatFlags(srv.URL)...)...)
	busy.Close()
	if r.code != 2 || !strings.Contains(r.stderr, "--metrics-addr") || f.Calls() != 0 {
		t.Fatalf("busy --metrics-addr: exit %d, %d calls\n%s", r.code, f.Calls(), r.stderr)
	}

	addr := "127.0.0.1:" + freePort(t)
	w := startWorker(t, db, append([]string{"--batch", "m", "--exit-when-done", "-c", "16", "--metrics-addr", addr}, chatFlags(srv.URL)...)...)
	var page string
	learnt := 0.0
	for learnt <= 0 {
		select {
		case <-w.done:
			t.Fatalf("the worker ended (exit %d) before /metrics showed a learnt rate; last page:\n%s\n%s", w.code, page, w.stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			continue // not serving yet
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		page = string(b)
		learnt = scrape(page, "hfsent_learnt_tokens_per_minute")
	}
	if code := w.wait(t); code != 0 {
		t.Fatalf("worker exit %d\n%s", code, w.stderr.String())
	}
	t.Logf("%d calls, %d 429s; /metrics showed %.0f tokens/min learnt, the provider's %.0f", f.Calls(), f.Rejected(), learnt, rate*60)
	if learnt < rate*60/3 || learnt > rate*60*3 {
		t.Fatalf("hfsent_learnt_tokens_per_minute %v, want near %v", learnt, rate*60)
	}
	for _, name := range []string{"hfsent_provider_calls_total", "hfsent_provider_rate_limited_total", "hfsent_worker_claims_total", "hfsent_slots_max"} {
		if scrape(page, name) <= 0 {
			t.Errorf("/metrics: %s missing or 0", name)
		}
	}
	if !strings.Contains(w.stderr.String(), "learnt_tokens_per_minute=") {
		t.Errorf("the summary line lacks the learnt rate:\n%s", w.stderr.String())
	}
}
