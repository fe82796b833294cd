package e2e

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/queue/pgtest"
	"github.com/hfsent/hfsent/internal/tcpproxy"
)

// qenv is the environment that points hfsent at the test's database.
func qenv(db string) []string { return []string{"HFSENT_DB=" + db} }

// worker is a running hfsent worker process.
type worker struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	done   chan struct{}
	code   int
}

func startWorker(t *testing.T, db string, args ...string) *worker {
	t.Helper()
	return startWorkerBin(t, bin, db, args...)
}

// startWorkerBin is startWorker with another build of hfsent (plainBin).
func startWorkerBin(t *testing.T, path, db string, args ...string) *worker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	cmd, stderr := hfsent(t, ctx, append([]string{"worker", "--no-progress"}, args...)...)
	cmd.Path = path
	cmd.Env = append(cmd.Env, qenv(db)...)
	w := &worker{cmd: cmd, stderr: stderr, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer cancel()
		_ = cmd.Wait()
		w.code = cmd.ProcessState.ExitCode()
		close(w.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-w.done
	})
	return w
}

func (w *worker) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-w.done:
		return w.code
	case <-time.After(2 * time.Minute):
		t.Fatalf("worker still running:\n%s", w.stderr.String())
	}
	return -1
}

// queueCSV writes rows {id, text, client} under the header
// request_id,text,client.
func queueCSV(t *testing.T, dir, name string, rows [][3]string) string {
	t.Helper()
	var b strings.Builder
	w := csv.NewWriter(&b)
	_ = w.Write([]string{"request_id", "text", "client"})
	for _, r := range rows {
		_ = w.Write(r[:])
	}
	w.Flush()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func clientRows(client string, n int) [][3]string {
	out := make([][3]string, n)
	for i := range out {
		out[i] = [3]string{fmt.Sprintf("%s-%04d", client, i), fmt.Sprintf("c=%s row %d is fine", client, i), client}
	}
	return out
}

func mustRun(t *testing.T, env []string, args ...string) result {
	t.Helper()
	r := runBin(t, env, args...)
	if r.code != 0 {
		t.Fatalf("hfsent %v: exit %d\n%s", args, r.code, r.stderr)
	}
	return r
}

// pushBatch pushes rows into a new batch with the push flags given.
func pushBatch(t *testing.T, db, batch string, rows [][3]string, flags ...string) {
	t.Helper()
	in := queueCSV(t, t.TempDir(), "in.csv", rows)
	mustRun(t, qenv(db), append([]string{"queue", "push", in, "--batch", batch, "--no-progress"}, flags...)...)
}

// waitInFlight waits until the fake has n calls in flight from worker w.
func waitInFlight(t *testing.T, fake *fakehf.Fake, n int64, w *worker) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for fake.InFlight() < n {
		if time.Now().After(deadline) {
			t.Fatalf("the worker never had %d calls in flight:\n%s", n, w.stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// countDone reads how many rows of the batch are done.
func countDone(t *testing.T, db, batch string) int {
	t.Helper()
	return countItems(t, db, batch, "i.state = 'done'")
}

// countReserved reads how many rows of the batch are reserved: pending
// with a lease owner.
func countReserved(t *testing.T, db, batch string) int {
	t.Helper()
	return countItems(t, db, batch, "i.state = 'pending' and i.lease_owner is not null")
}

// countItems counts the batch's rows (item i) that match where.
func countItems(t *testing.T, db, batch, where string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var n int
	if err := c.QueryRow(ctx, `select count(*) from hfsent.item i join hfsent.batch b on b.id = i.batch_id
		where b.name = $1 and `+where, batch).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// swapped sums the swapped= counts of the workers' summaries.
func swapped(t *testing.T, ws []*worker) int {
	t.Helper()
	n := 0
	for _, w := range ws {
		m := regexp.MustCompile(`swapped=(\d+)`).FindStringSubmatch(w.stderr.String())
		if m == nil {
			t.Fatalf("no swapped= in the worker's summary:\n%s", w.stderr.String())
		}
		n += int(atoi(t, m[1]))
	}
	return n
}

func waitDone(t *testing.T, db, batch string, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for countDone(t, db, batch) < n {
		if time.Now().After(deadline) {
			t.Fatalf("batch %s never reached %d rows done", batch, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exportRows exports the batch and parses it.
func exportRows(t *testing.T, db, batch string) []map[string]string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "export.csv")
	mustRun(t, qenv(db), "queue", "export", "--batch", batch, "-o", out)
	return readResults(t, out)
}

// checkOnceEach asserts one success row per id, in the order given.
func checkOnceEach(t *testing.T, rows []map[string]string, ids []string) {
	t.Helper()
	if len(rows) != len(ids) {
		t.Fatalf("export has %d rows, want %d", len(rows), len(ids))
	}
	for i, r := range rows {
		if r["request_id"] != ids[i] || r["outcome"] != "success" {
			t.Fatalf("export row %d: %s %s (%s), want %s success", i, r["request_id"], r["outcome"], r["error"], ids[i])
		}
	}
}

func idsOf(rows [][3]string) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r[0]
	}
	return out
}

// meter wraps the fake provider to count calls in flight in all and per
// client (from the "c=NAME" the texts carry) and to note when each call
// started.
type meter struct {
	fake *fakehf.Fake
	h    http.Handler

	mu            sync.Mutex
	total, max    int
	per, maxPer   map[string]int
	starts        []time.Time
	clientOfTexts func(texts []string) string
	// area is the integral of total over time until changed (calls in
	// flight x seconds): the mean in flight between two readings, exactly
	// and without sampling (inFlightArea).
	area    time.Duration
	changed time.Time
}

// inFlightArea is the integral of calls in flight over time until now:
// (a2 - a1) / (t2 - t1) is the mean in flight between two readings.
func (m *meter) inFlightArea() (area time.Duration, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	at = time.Now()
	return m.areaLocked(at), at
}

// areaLocked brings area up to now. Requires m.mu.
func (m *meter) areaLocked(now time.Time) time.Duration {
	if !m.changed.IsZero() {
		m.area += time.Duration(m.total) * now.Sub(m.changed)
	}
	m.changed = now
	return m.area
}

func newMeter(f *fakehf.Fake) (*meter, *httptest.Server) {
	m := &meter{fake: f, h: fakehf.Handler(f), per: map[string]int{}, maxPer: map[string]int{}}
	return m, httptest.NewServer(m)
}

func (m *meter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req struct {
		Inputs json.RawMessage `json:"inputs"`
	}
	_ = json.Unmarshal(body, &req)
	var text string
	_ = json.Unmarshal(req.Inputs, &text)
	client := ""
	if f := strings.Fields(text); len(f) > 0 {
		client = strings.TrimPrefix(f[0], "c=")
	}
	m.mu.Lock()
	m.areaLocked(time.Now())
	m.total++
	m.per[client]++
	m.max = max(m.max, m.total)
	m.maxPer[client] = max(m.maxPer[client], m.per[client])
	m.starts = append(m.starts, time.Now())
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.areaLocked(time.Now())
		m.total--
		m.per[client]--
		m.mu.Unlock()
	}()
	r.Body = io.NopCloser(bytes.NewReader(body))
	m.h.ServeHTTP(w, r)
}

// threeUnderCapOf6 pushes rows into batch under --global-cap 6 (and the
// push flags given), runs three workers of -c 4 against a 20 ms fake until
// the batch is done, and checks that each exited 0 and that the provider
// saw at most 6 calls at once, and at least the given least (so the caps
// were tested).
func threeUnderCapOf6(t *testing.T, db, batch string, rows [][3]string, least int, pushFlags ...string) (*meter, []*worker) {
	t.Helper()
	m, srv := newMeter(&fakehf.Fake{Latency: 20 * time.Millisecond, NoRecord: true})
	t.Cleanup(srv.Close)
	pushBatch(t, db, batch, rows, append([]string{"--global-cap", "6"}, pushFlags...)...)
	var ws []*worker
	for range 3 {
		ws = append(ws, startWorker(t, db, "--batch", batch, "--endpoint", srv.URL, "-c", "4", "--retries", "0", "--exit-when-done"))
	}
	for i, w := range ws {
		if code := w.wait(t); code != 0 {
			t.Fatalf("worker %d: exit %d\n%s", i, code, w.stderr.String())
		}
	}
	if m.max > 6 {
		t.Fatalf("the provider saw %d calls at once; the global cap is 6", m.max)
	}
	if m.max < least {
		t.Fatalf("the provider saw at most %d calls at once, want at least %d: the caps were never approached, so not tested", m.max, least)
	}
	return m, ws
}

// Three workers with -c 4 against a global cap of 6 and a client cap of 2:
// the provider never sees more than 6 calls at once, nor more than 2 of one
// client, and a client with 5 rows, pushed last, finishes while the two
// with 500 still have hundreds to go.
func TestQueueCapsAcrossWorkers(t *testing.T) {
	db := pgtest.URL(t)
	rows := append(append(clientRows("big1", 500), clientRows("big2", 500)...), clientRows("small", 5)...)
	// Once the small client's 5 rows are done, the two big ones at their
	// client cap of 2 are 4 calls: above that only while the small one's
	// rows are out (CI once saw 4 at most).
	m, _ := threeUnderCapOf6(t, db, "caps", rows, 4, "--client-column", "client", "--client-cap", "2")
	for c, n := range m.maxPer {
		if n > 2 {
			t.Fatalf("client %s had %d calls at once; the client cap is 2", c, n)
		}
	}
	got := exportRows(t, db, "caps")
	checkOnceEach(t, got, idsOf(rows))
	smallEnd := int64(0)
	for _, r := range got[1000:] {
		smallEnd = max(smallEnd, atoi(t, r["finished_ms"]))
	}
	after := 0
	for _, r := range got[:1000] {
		if atoi(t, r["finished_ms"]) > smallEnd {
			after++
		}
	}
	if after < 500 {
		t.Fatalf("only %d of the big clients' rows finished after the small client's last: the small one waited behind them", after)
	}
}

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("%q is not a number", s)
	}
	return n
}

// A worker killed with -9 mid-run loses nothing: after its leases expire
// the others redo its rows; every id is exported once, all success, and the
// provider saw at most the killed worker's rows in flight twice.
func TestQueueKill9LosesNothing(t *testing.T) {
	db := pgtest.URL(t)
	// slow holds every call for seconds once the victim has done 20 rows,
	// so that it is killed with calls in flight (CI killed it once between
	// calls, with nothing to rescue); the other workers start after it.
	var slow atomic.Bool
	fake := &fakehf.Fake{Latency: 40 * time.Millisecond, Script: func(int64, []string, *http.Request) fakehf.Reply {
		if slow.Load() {
			return fakehf.Reply{Delay: 5 * time.Second}
		}
		return fakehf.Reply{}
	}}
	srv := fakehf.Start(fake)
	defer srv.Close()
	dir := t.TempDir()
	rows := clientRows("k", 300)
	in := queueCSV(t, dir, "in.csv", rows)
	mustRun(t, qenv(db), "queue", "push", in, "--batch", "k9", "--global-cap", "8", "--lease", "2s", "--no-progress")
	victim := startWorker(t, db, "--batch", "k9", "--endpoint", srv.URL, "-c", "4", "--retries", "0")
	waitDone(t, db, "k9", 20)
	slow.Store(true)
	waitUntil(t, "a slow call in flight", func() bool { return fake.InFlight() > 0 })
	time.Sleep(50 * time.Millisecond) // the fast calls of before end
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	victim.wait(t)
	slow.Store(false)
	others := []*worker{
		startWorker(t, db, "--batch", "k9", "--endpoint", srv.URL, "-c", "4", "--retries", "0", "--exit-when-done"),
		startWorker(t, db, "--batch", "k9", "--endpoint", srv.URL, "-c", "4", "--retries", "0", "--exit-when-done"),
	}
	for i, w := range others {
		if code := w.wait(t); code != 0 {
			t.Fatalf("worker %d: exit %d\n%s", i, code, w.stderr.String())
		}
	}
	checkOnceEach(t, exportRows(t, db, "k9"), idsOf(rows))
	twice := 0
	for text, n := range fake.Seen() {
		if n > 2 {
			t.Fatalf("%q was sent %d times", text, n)
		}
		if n == 2 {
			twice++
		}
	}
	if twice > 4 {
		t.Fatalf("%d rows were sent twice; the killed worker had at most 4 in flight", twice)
	}
	if twice == 0 {
		t.Fatalf("no row was sent twice: the killed worker had nothing in flight, so its rescue was not tested")
	}
}

// A worker stalled past its lease (SIGSTOP) cannot overwrite the rows
// another worker has since finished: on SIGCONT its late results are
// discarded.
func TestQueueStalledWorkerIsFenced(t *testing.T) {
	db := pgtest.URL(t)
	fake := &fakehf.Fake{Script: func(_ int64, _ []string, r *http.Request) fakehf.Reply {
		if strings.HasPrefix(r.URL.Path, "/a") {
			return fakehf.Reply{Delay: 400 * time.Millisecond, Body: `[[{"label":"A","score":0.9}]]`}
		}
		return fakehf.Reply{Delay: 5 * time.Millisecond, Body: `[[{"label":"B","score":0.9}]]`}
	}}
	srv := fakehf.Start(fake)
	defer srv.Close()
	rows := clientRows("f", 20)
	pushBatch(t, db, "fence", rows, "--global-cap", "4", "--lease", "1s")
	a := startWorker(t, db, "--batch", "fence", "--endpoint", srv.URL+"/a", "-c", "4", "--retries", "0", "--exit-when-done")
	waitInFlight(t, fake, 4, a)
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	b := startWorker(t, db, "--batch", "fence", "--endpoint", srv.URL+"/b", "-c", "4", "--retries", "0", "--exit-when-done")
	if code := b.wait(t); code != 0 {
		t.Fatalf("worker B: exit %d\n%s", code, b.stderr.String())
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := a.wait(t); code != 0 {
		t.Fatalf("worker A: exit %d\n%s", code, a.stderr.String())
	}
	if !strings.Contains(a.stderr.String(), "result discarded") || !strings.Contains(a.stderr.String(), "discarded=4") {
		t.Fatalf("worker A's late results were not discarded:\n%s", a.stderr.String())
	}
	got := exportRows(t, db, "fence")
	checkOnceEach(t, got, idsOf(rows))
	for _, r := range got {
		if r["label"] != "B" {
			t.Fatalf("row %s has label %s: the stalled worker's result was written", r["request_id"], r["label"])
		}
	}
}

// One 429 with Retry-After: 2, seen by one worker, stops every worker's
// calls for 2 s.
func TestQueueSharedCooldown(t *testing.T) {
	db := pgtest.URL(t)
	var hit atomic.Int64
	m, srv := newMeter(&fakehf.Fake{Latency: 20 * time.Millisecond, NoRecord: true,
		Script: func(n int64, _ []string, _ *http.Request) fakehf.Reply {
			if n == 60 {
				hit.Store(time.Now().UnixNano())
				return fakehf.Reply{Status: 429, Immediate: true, Header: map[string]string{"Retry-After": "2"}}
			}
			return fakehf.Reply{}
		}})
	defer srv.Close()
	dir := t.TempDir()
	rows := clientRows("p", 400)
	in := queueCSV(t, dir, "in.csv", rows)
	mustRun(t, qenv(db), "queue", "push", in, "--batch", "cool", "--global-cap", "6", "--no-progress")
	var ws []*worker
	for range 3 {
		ws = append(ws, startWorker(t, db, "--batch", "cool", "--endpoint", srv.URL, "-c", "2", "--retries", "2", "--exit-when-done"))
	}
	for i, w := range ws {
		if code := w.wait(t); code != 0 {
			t.Fatalf("worker %d: exit %d\n%s", i, code, w.stderr.String())
		}
	}
	checkOnceEach(t, exportRows(t, db, "cool"), idsOf(rows))
	t429 := time.Unix(0, hit.Load())
	if hit.Load() == 0 {
		t.Fatal("the 429 was never sent")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var inPause []time.Duration
	for _, s := range m.starts {
		if d := s.Sub(t429); d > 300*time.Millisecond && d < 1700*time.Millisecond {
			inPause = append(inPause, d)
		}
	}
	if len(inPause) > 0 {
		t.Fatalf("%d calls started during the shared 2 s pause, the first at %v after the 429", len(inPause), inPause[:min(5, len(inPause))])
	}
	resumed := 0
	for _, s := range m.starts {
		if s.Sub(t429) >= 1700*time.Millisecond {
			resumed++
		}
	}
	if resumed < 100 {
		t.Fatalf("only %d calls after the pause: the pause was not tested against a busy batch", resumed)
	}
}

// A batch of one client, where workers keep rows reserved and start one
// the moment a call of theirs ends: three workers with -c 4 against a
// global cap of 6 still never put more than 6 calls at once to the
// provider (a swap takes the room of the row it replaces, in the
// transaction that writes that row), and most rows ran that way.
func TestQueueGlobalCapWithReservations(t *testing.T) {
	db := pgtest.URL(t)
	rows := clientRows("one", 600)
	_, ws := threeUnderCapOf6(t, db, "swap", rows, 5)
	if n := swapped(t, ws); n < len(rows)/2 {
		t.Fatalf("only %d of %d rows started in a finished row's place: the reservations were not tested", n, len(rows))
	}
	checkOnceEach(t, exportRows(t, db, "swap"), idsOf(rows))
	if n := countReserved(t, db, "swap"); n != 0 {
		t.Fatalf("%d rows still reserved after the batch is done", n)
	}
}

// A bad day, through the queue: poison texts that always time out, random
// 503s, a 429 with Retry-After and a one-second outage, all in one batch
// of one client (so the workers reserve rows and swap them in). Every row
// ends exactly once, the poison ones as upstream_timeout after their
// attempts and all the others as success, and the cap holds throughout.
func TestQueueBadDay(t *testing.T) {
	db := pgtest.URL(t)
	poison := map[string]bool{"c=one row 7 is fine": true, "c=one row 300 is fine": true, "c=one row 550 is fine": true}
	var outageFrom atomic.Int64
	m, srv := newMeter(&fakehf.Fake{Latency: 10 * time.Millisecond, NoRecord: true,
		Script: func(n int64, texts []string, _ *http.Request) fakehf.Reply {
			if len(texts) == 1 && poison[texts[0]] {
				return fakehf.Reply{Delay: 5 * time.Second}
			}
			if n == 300 {
				outageFrom.Store(time.Now().UnixNano())
			}
			if from := outageFrom.Load(); from > 0 && time.Since(time.Unix(0, from)) < time.Second {
				return fakehf.Reply{Status: 503, Immediate: true}
			}
			switch {
			case n == 150:
				return fakehf.Reply{Status: 429, Immediate: true, Header: map[string]string{"Retry-After": "1"}}
			case n%10 == 3:
				return fakehf.Reply{Status: 503, Immediate: true}
			}
			return fakehf.Reply{}
		}})
	defer srv.Close()
	rows := clientRows("one", 600)
	pushBatch(t, db, "bad", rows, "--global-cap", "6", "--max-attempts", "3", "--lease", "5s")
	var ws []*worker
	for range 3 {
		ws = append(ws, startWorker(t, db, "--batch", "bad", "--endpoint", srv.URL, "-c", "4", "--retries", "2",
			"--timeout", "200ms", "--breaker-cooldown", "1s", "--breaker-window", "2s", "--exit-when-done"))
	}
	failed := 0
	for i, w := range ws {
		switch code := w.wait(t); code {
		case 0:
		case 1:
			failed++
		default:
			t.Fatalf("worker %d: exit %d\n%s", i, code, w.stderr.String())
		}
	}
	if failed == 0 {
		t.Fatal("no worker exited 1, though the poison rows ended upstream_timeout")
	}
	if m.max > 6 {
		t.Fatalf("the provider saw %d calls at once; the global cap is 6", m.max)
	}
	if swapped(t, ws) == 0 {
		t.Fatal("no row started by a swap: the reservations were not part of the mix")
	}
	got := exportRows(t, db, "bad")
	if len(got) != len(rows) {
		t.Fatalf("export has %d rows, want %d", len(got), len(rows))
	}
	for i, r := range got {
		want := "success"
		if poison[rows[i][1]] {
			want = "upstream_timeout"
		}
		if r["request_id"] != rows[i][0] || r["outcome"] != want {
			t.Fatalf("row %d: %s %s, want %s %s", i, r["request_id"], r["outcome"], rows[i][0], want)
		}
	}
}

// A worker waiting for its poll while another finishes the batch's last
// rows is woken when the batch is done, and exits then, not a poll later.
func TestQueueDoneWakesWaitingWorkers(t *testing.T) {
	db := pgtest.URL(t)
	fake := &fakehf.Fake{Latency: 500 * time.Millisecond}
	srv := fakehf.Start(fake)
	defer srv.Close()
	rows := clientRows("w", 8)
	pushBatch(t, db, "wake", rows, "--global-cap", "8")
	a := startWorker(t, db, "--batch", "wake", "--endpoint", srv.URL, "-c", "8", "--retries", "0", "--exit-when-done")
	waitInFlight(t, fake, 8, a)
	// B finds nothing to claim, rows still running: it waits for its poll
	// (a minute).
	start := time.Now()
	b := startWorker(t, db, "--batch", "wake", "--endpoint", srv.URL, "-c", "1", "--poll", "1m", "--exit-when-done")
	for _, w := range []*worker{a, b} {
		if code := w.wait(t); code != 0 {
			t.Fatalf("exit %d\n%s", code, w.stderr.String())
		}
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("worker B exited %v after the batch was done: it slept its poll out", took)
	}
	checkOnceEach(t, exportRows(t, db, "wake"), idsOf(rows))
}

// SIGINT: calls in flight finish and are written, rows claimed but not
// started are given back (not failed), exit 130; another worker finishes
// the batch and no row is sent twice.
func TestQueueInterruptGivesBack(t *testing.T) {
	db := pgtest.URL(t)
	fake := &fakehf.Fake{Latency: 50 * time.Millisecond}
	srv := fakehf.Start(fake)
	defer srv.Close()
	rows := clientRows("i", 120)
	pushBatch(t, db, "int", rows, "--global-cap", "8")
	// --rps 10 keeps claimed rows waiting for their turn: those are the
	// rows a stop must give back.
	a := startWorker(t, db, "--batch", "int", "--endpoint", srv.URL, "-c", "8", "--rps", "10", "--retries", "0")
	waitDone(t, db, "int", 10)
	// Rows reserved, not claimed, are given back too.
	deadline := time.Now().Add(20 * time.Second)
	for countReserved(t, db, "int") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("worker A never reserved a row:\n%s", a.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := a.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := a.wait(t); code != 130 {
		t.Fatalf("worker A: exit %d, want 130\n%s", code, a.stderr.String())
	}
	if !strings.Contains(a.stderr.String(), "given_back=") || strings.Contains(a.stderr.String(), "given_back=0 ") {
		t.Fatalf("worker A gave nothing back:\n%s", a.stderr.String())
	}
	st := mustRun(t, qenv(db), "queue", "status", "--batch", "int")
	if !strings.Contains(st.stdout, " 0 running + 0 lease expired") {
		t.Fatalf("rows still held after the interrupt:\n%s", st.stdout)
	}
	if n := countReserved(t, db, "int"); n != 0 {
		t.Fatalf("%d rows still reserved by the interrupted worker", n)
	}
	b := startWorker(t, db, "--batch", "int", "--endpoint", srv.URL, "-c", "8", "--retries", "0", "--exit-when-done")
	if code := b.wait(t); code != 0 {
		t.Fatalf("worker B: exit %d\n%s", code, b.stderr.String())
	}
	checkOnceEach(t, exportRows(t, db, "int"), idsOf(rows))
	for text, n := range fake.Seen() {
		if n > 1 {
			t.Fatalf("%q was sent %d times", text, n)
		}
	}
}

// A database that goes away mid-run: the worker keeps its results, retries
// its connection with backoff, and writes them when it is back.
func TestQueueDatabaseGoesAway(t *testing.T) {
	db, viaProxy, px := proxiedDB(t)
	fake := &fakehf.Fake{Latency: 20 * time.Millisecond}
	srv := fakehf.Start(fake)
	defer srv.Close()
	dir := t.TempDir()
	rows := clientRows("d", 300)
	in := queueCSV(t, dir, "in.csv", rows)
	mustRun(t, qenv(db), "queue", "push", in, "--batch", "away", "--global-cap", "4", "--no-progress")
	w := startWorker(t, viaProxy, "--batch", "away", "--endpoint", srv.URL, "-c", "4", "--retries", "0", "--exit-when-done")
	waitDone(t, db, "away", 30)
	px.SetDown(true)
	time.Sleep(2 * time.Second)
	px.SetDown(false)
	if code := w.wait(t); code != 0 {
		t.Fatalf("worker: exit %d\n%s", code, w.stderr.String())
	}
	if !strings.Contains(w.stderr.String(), "database unreachable") {
		t.Fatalf("the worker never noticed the database was gone:\n%s", w.stderr.String())
	}
	if strings.Contains(w.stderr.String(), "result discarded") {
		t.Fatalf("the worker discarded its own results after the database came back:\n%s", w.stderr.String())
	}
	checkOnceEach(t, exportRows(t, db, "away"), idsOf(rows))
	for text, n := range fake.Seen() {
		if n > 1 {
			t.Fatalf("%q was sent %d times: a result was lost", text, n)
		}
	}
}

// proxiedDB is a test database (db, for set-up) and the same database
// through a proxy the test controls (viaProxy, for the processes whose
// database it cuts or stalls: tcpproxy's SetDown and SetStalled).
func proxiedDB(t *testing.T) (db, viaProxy string, px *tcpproxy.Proxy) {
	t.Helper()
	db = pgtest.URL(t)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	px, err = tcpproxy.Start(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.Close)
	through := *u
	through.Host = px.Addr()
	return db, through.String(), px
}

// The export is the results CSV classify writes for the same rows: same
// header, same columns, same formula guard and quoting, same order; only
// the times differ (a queue's run is another run).
func TestQueueExportMatchesClassify(t *testing.T) {
	db := pgtest.URL(t)
	fake := &fakehf.Fake{Script: func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
		if len(texts) == 1 && strings.Contains(texts[0], "formula") {
			return fakehf.Reply{Body: `[[{"label":"=HYPERLINK(\"x\")","score":0.51234}]]`}
		}
		if len(texts) == 1 && strings.Contains(texts[0], "minus") {
			return fakehf.Reply{Body: `[{"label":"-1","score":0.7}]`}
		}
		return fakehf.Reply{}
	}}
	srv := fakehf.Start(fake)
	defer srv.Close()
	dir := t.TempDir()
	in := filepath.Join(dir, "in.csv")
	content := "request_id;text\n" +
		" a1 ;plain text\n" +
		"a2;\"a, \"\"quoted\"\"\r\nmultiline text\"\n" +
		"a3;formula please\n" +
		"a4;minus one\n" +
		"a5;   \n" +
		"a1;duplicate id\n" +
		"a6;" + strings.Repeat("x", 60) + "\n" +
		";no id\n" +
		"=a7;@starts with a trigger\n"
	if err := os.WriteFile(in, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	classified := filepath.Join(dir, "classify.csv")
	code, e := run(t, "classify", in, "-o", classified, "--endpoint", srv.URL, "--retries", "0", "--max-chars", "50", "--no-progress")
	if code != 1 {
		t.Fatalf("classify: exit %d (want 1: invalid rows)\n%s", code, e)
	}
	mustRun(t, qenv(db), "queue", "push", in, "--batch", "same", "--max-chars", "50", "--no-progress")
	w := startWorker(t, db, "--batch", "same", "--endpoint", srv.URL, "--retries", "0", "--exit-when-done")
	if code := w.wait(t); code != 0 {
		t.Fatalf("worker: exit %d\n%s", code, w.stderr.String())
	}
	exported := filepath.Join(dir, "export.csv")
	mustRun(t, qenv(db), "queue", "export", "--batch", "same", "-o", exported)
	a, b := normalizeTimes(t, classified), normalizeTimes(t, exported)
	if a != b {
		t.Fatalf("export differs from classify's results:\nclassify:\n%s\nexport:\n%s", a, b)
	}
	if !strings.Contains(a, `'=HYPERLINK`) || !strings.Contains(a, `'-1`) {
		t.Fatalf("the formula guard was not exercised:\n%s", a)
	}
	mustRun(t, nil, "report", exported, "-o", filepath.Join(dir, "run.svg"))
}

// normalizeTimes returns the file's bytes with each timing field (latency,
// queued, started, finished) replaced by T, or left empty when empty; every
// other byte is kept.
func normalizeTimes(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(bytes.NewReader(raw)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	w := csv.NewWriter(&b)
	for i, r := range recs {
		if i > 0 {
			for _, k := range []int{7, 9, 10, 11} {
				if r[k] != "" {
					r[k] = "T"
				}
			}
		}
		_ = w.Write(r)
	}
	w.Flush()
	// The header line is compared byte for byte as written.
	header, _, _ := strings.Cut(string(raw), "\n")
	return header + "\n" + strings.SplitN(b.String(), "\n", 2)[1]
}

// Set-up errors end with exit 2 and a clear message before any provider
// call, never a panic, and never show the password.
func TestQueueSetupErrors(t *testing.T) {
	db := pgtest.URL(t)
	fake := &fakehf.Fake{}
	srv := fakehf.Start(fake)
	defer srv.Close()
	dir := t.TempDir()
	in := queueCSV(t, dir, "in.csv", clientRows("s", 3))
	mustRun(t, qenv(db), "queue", "push", in, "--batch", "ok", "--no-progress")

	newer := pgtest.URL(t)
	mustRun(t, qenv(newer), "queue", "migrate")
	ctx := context.Background()
	c, err := pgx.Connect(ctx, newer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "update hfsent.schema_version set version = version + 1"); err != nil {
		t.Fatal(err)
	}
	c.Close(ctx)
	empty := pgtest.URL(t)

	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"worker", "--batch", "ok", "--endpoint", srv.URL}, "--db is required"},
		{qenv("postgres://u:s3cret@[::1:bad/db"), []string{"worker", "--batch", "ok", "--endpoint", srv.URL}, "bad --db URL"},
		{qenv("postgres://u:s3cret@127.0.0.1:1/db?connect_timeout=3"), []string{"worker", "--batch", "ok", "--endpoint", srv.URL}, "cannot connect to the database"},
		{qenv("postgres://u:s3cret@127.0.0.1:1/db?connect_timeout=3"), []string{"queue", "push", in, "--batch", "x"}, "cannot connect to the database"},
		{qenv(db), []string{"worker", "--batch", "missing", "--endpoint", srv.URL}, `no such batch "missing"`},
		{qenv(db), []string{"queue", "status", "--batch", "missing"}, `no such batch "missing"`},
		{qenv(db), []string{"queue", "export", "--batch", "missing"}, `no such batch "missing"`},
		{qenv(db), []string{"worker", "--batch", "ok", "--endpoint", srv.URL, "--model", "other/model"}, "is for model"},
		{qenv(db), []string{"queue", "push", in, "--batch", "ok", "--global-cap", "3"}, "was created with --global-cap 8"},
		{qenv(db), []string{"queue", "push", in, "--batch", "cc", "--client-column", "team"}, `no client column "team"`},
		{qenv(db), []string{"queue", "drop", "--batch", "ok"}, "--yes"},
		{qenv(newer), []string{"worker", "--batch", "ok", "--endpoint", srv.URL}, "newer than this hfsent"},
		{qenv(newer), []string{"queue", "push", in, "--batch", "ok"}, "newer than this hfsent"},
		{qenv(newer), []string{"queue", "migrate"}, "newer than this hfsent"},
		{qenv(empty), []string{"worker", "--batch", "ok", "--endpoint", srv.URL}, "has no hfsent queue"},
	} {
		r := runBin(t, tc.env, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr+r.stdout, "s3cret") {
			t.Errorf("%v %v: exit %d, stderr %q; want exit 2 and %q", tc.env, tc.args, r.code, r.stderr, tc.want)
		}
	}
	if fake.Calls() != 0 {
		t.Fatalf("%d calls reached the provider", fake.Calls())
	}
	// The push that was refused added nothing, and push is idempotent.
	mustRun(t, qenv(db), "queue", "push", in, "--batch", "ok", "--no-progress")
	r := mustRun(t, qenv(db), "queue", "list")
	if !strings.Contains(r.stdout, "ok") || !strings.Contains(r.stdout, " 3 ") {
		t.Fatalf("queue list:\n%s", r.stdout)
	}
	mustRun(t, qenv(db), "queue", "drop", "--batch", "ok", "--yes")
	if r := runBin(t, qenv(db), "queue", "status", "--batch", "ok"); r.code != 2 {
		t.Fatalf("status after drop: exit %d", r.code)
	}
}

// A push stopped by SIGINT or SIGTERM (a service manager's stop) while it
// streams rows in from a pipe whose writer is idle: exit 130 at once, a
// message saying nothing was added, and no row was (a push is one
// transaction).
func TestQueuePushInterrupted(t *testing.T) {
	db := pgtest.URL(t)
	for _, sig := range []os.Signal{os.Interrupt, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			batch := "cut" + strings.ReplaceAll(sig.String(), " ", "")
			cmd, stderr := hfsent(t, ctx, "queue", "push", "-", "--batch", batch, "--no-progress")
			cmd.Env = append(cmd.Env, qenv(db)...)
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(stdin, "request_id,text")
			for i := range 100 {
				fmt.Fprintf(stdin, "r%d,text %d\n", i, i)
			}
			// The rows are on their way in: the COPY is running, waiting
			// for more of stdin.
			conn, err := pgx.Connect(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			deadline := time.Now().Add(20 * time.Second)
			for {
				var n int
				if err := conn.QueryRow(ctx, `select count(*) from pg_stat_activity
					where datname = current_database() and query ilike 'copy%'`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the push never started its COPY:\n%s", stderr.String())
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			err = cmd.Wait()
			stdin.Close()
			if code := cmd.ProcessState.ExitCode(); code != 130 {
				t.Fatalf("exit %d (%v), want 130\n%s", code, err, stderr.String())
			}
			if !strings.Contains(stderr.String(), "nothing was added") {
				t.Fatalf("no word that nothing was added:\n%s", stderr.String())
			}
			var n int
			if err := conn.QueryRow(ctx, `select count(*) from hfsent.input i join hfsent.batch b on b.id = i.batch_id
				where b.name = $1`, batch).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Fatalf("the interrupted push added %d rows", n)
			}
		})
	}
}
