package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/queue/pgtest"
)

// A password in a --db value, written any way pgx reads one (or nearly:
// values that do not parse), is never printed by any command that takes
// --db, whether it came from --db or from $HFSENT_DB: the messages name
// the host, port, database and user, or say that the value is not shown.
func TestQueueDSNPasswordNeverShown(t *testing.T) {
	db := pgtest.URL(t)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakehf.Fake{}
	srv := fakehf.Start(fake)
	defer srv.Close()
	in := queueCSV(t, t.TempDir(), "in.csv", clientRows("p", 3))
	// The server trusts local connections: a password given is ignored,
	// so these connect and run.
	good := "host=" + u.Hostname() + " port=" + u.Port() + " user=postgres dbname=" + strings.TrimPrefix(u.Path, "/")
	works := []string{
		good + " password='first s3cret'",
		good + " password = s3cret",
		good + ` password=first\ s3cret`,
	}
	fails := []string{
		"host=127.0.0.1 port=1 password = s3cret dbname=x connect_timeout=2",
		"host=127.0.0.1 port=1 password =s3cret dbname=x connect_timeout=2",
		"host=127.0.0.1 port=1 sslpassword=s3cret dbname=x connect_timeout=2",
		"host=127.0.0.1 port=1 password='first s3cret' dbname=x connect_timeout=2",
		`host=127.0.0.1 port=1 password=first\ s3cret dbname=x connect_timeout=2`,
		"host=127.0.0.1 port=1 password='unterminated s3cret",
		"host=127.0.0.1 port=1 password=first s3cret dbname=x",
		"postgres://u:s3cret@127.0.0.1:1/db?sslpassword=s3cret&connect_timeout=2",
		"postgres://u:s3/cret@127.0.0.1:1/db",
	}
	commands := [][]string{
		{"queue", "migrate"},
		{"queue", "push", in, "--batch", "pw", "--no-progress"},
		{"queue", "status", "--batch", "pw"},
		{"queue", "list"},
		{"queue", "export", "--batch", "pw", "-o", "-"},
		{"worker", "--batch", "pw", "--endpoint", srv.URL, "--exit-when-done", "--no-progress"},
		{"queue", "drop", "--batch", "pw", "--yes"},
	}
	check := func(dsn string, viaEnv bool, args []string, wantOK bool) {
		t.Helper()
		var env []string
		a := append([]string(nil), args...)
		if viaEnv {
			env = qenv(dsn)
		} else {
			a = append(a, "--db", dsn)
		}
		r := runBin(t, env, a...)
		out := r.stdout + r.stderr
		if strings.Contains(out, "s3cret") || strings.Contains(out, "cret") {
			t.Errorf("%v (env %v) with %q: the password is shown:\n%s", args[:2], viaEnv, dsn, out)
		}
		if wantOK && r.code != 0 {
			t.Errorf("%v (env %v) with %q: exit %d\n%s", args[:2], viaEnv, dsn, r.code, out)
		}
		if !wantOK && (r.code != 2 || !(strings.Contains(r.stderr, "host=127.0.0.1 port=1") || strings.Contains(r.stderr, "not shown"))) {
			t.Errorf("%v (env %v) with %q: exit %d, want 2 and a message naming the host or saying the value is not shown:\n%s", args[:2], viaEnv, dsn, r.code, out)
		}
	}
	for _, viaEnv := range []bool{false, true} {
		for _, dsn := range fails {
			for _, args := range commands {
				check(dsn, viaEnv, args, false)
			}
		}
		// Each command in turn, as an operator would: push creates the
		// batch, the worker finishes it, drop deletes it.
		for _, dsn := range works {
			for _, args := range commands {
				check(dsn, viaEnv, args, true)
			}
		}
	}
	r := runBin(t, nil, "queue", "migrate", "--db", works[0])
	if want := "host=" + u.Hostname() + " port=" + u.Port() + " dbname=" + strings.TrimPrefix(u.Path, "/") + " user=postgres"; !strings.Contains(r.stdout, want) {
		t.Fatalf("queue migrate names the database as:\n%s\nwant %s", r.stdout, want)
	}
}

// queue drop while workers are busy, again and again (a deadlock between
// the drop and a worker's round trip came about once in six): the drop
// succeeds, and every worker, with --exit-when-done or without, and one
// given SIGTERM just after the drop, says its batch was dropped and exits
// within seconds, never taking the missing batch for a database out of
// reach; nothing of the batch is left behind.
func TestQueueDropWhileWorkersRun(t *testing.T) {
	db := pgtest.URL(t)
	srv := fakehf.Start(&fakehf.Fake{Latency: 20 * time.Millisecond, NoRecord: true})
	t.Cleanup(srv.Close)
	var slowest time.Duration
	for round := range 10 {
		batch := fmt.Sprintf("drop%d", round)
		pushBatch(t, db, batch, clientRows("d", 3000), "--global-cap", "12")
		ws := []*worker{
			startWorker(t, db, "--batch", batch, "--endpoint", srv.URL, "-c", "4", "--retries", "0", "--exit-when-done"),
			startWorker(t, db, "--batch", batch, "--endpoint", srv.URL, "-c", "4", "--retries", "0"),
			startWorker(t, db, "--batch", batch, "--endpoint", srv.URL, "-c", "4", "--retries", "0", "--exit-when-done", "--poll", "1m"),
		}
		waitDone(t, db, batch, 30+round*20)
		r := runBin(t, qenv(db), "queue", "drop", "--batch", batch, "--yes")
		dropped := time.Now()
		if r.code != 0 || !strings.Contains(r.stderr, "dropped") {
			t.Fatalf("round %d: queue drop: exit %d\n%s", round, r.code, r.stderr)
		}
		if round%2 == 1 {
			// As an operator stops a worker that stays up: it may have
			// exited already.
			if err := ws[1].cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
				t.Fatal(err)
			}
		}
		for i, w := range ws {
			select {
			case <-w.done:
			case <-time.After(20 * time.Second):
				t.Fatalf("round %d: worker %d still running 20 s after the drop:\n%s", round, i, w.stderr.String())
			}
			slowest = max(slowest, time.Since(dropped))
			e := w.stderr.String()
			if w.code != 1 || !strings.Contains(e, "was dropped") || strings.Contains(e, "unreachable") || strings.Contains(e, "deadlock") {
				t.Fatalf("round %d: worker %d: exit %d, want 1 and a word that the batch was dropped, no word of the database being unreachable:\n%s", round, i, w.code, e)
			}
		}
	}
	t.Logf("the slowest worker exited %s after its batch was dropped", slowest.Round(time.Millisecond))

	// An idle worker (its batch done, waiting for new rows, polling once a
	// minute) is told by the drop's notification, not a poll or heartbeat
	// later.
	pushBatch(t, db, "idle", clientRows("i", 20), "--lease", "1m")
	idle := startWorker(t, db, "--batch", "idle", "--endpoint", srv.URL, "--poll", "1m")
	waitDone(t, db, "idle", 20)
	time.Sleep(200 * time.Millisecond)
	mustRun(t, qenv(db), "queue", "drop", "--batch", "idle", "--yes")
	select {
	case <-idle.done:
	case <-time.After(5 * time.Second):
		t.Fatalf("the idle worker still runs 5 s after the drop (its heartbeat comes every 20 s):\n%s", idle.stderr.String())
	}
	if idle.code != 1 || !strings.Contains(idle.stderr.String(), "was dropped") {
		t.Fatalf("idle worker: exit %d\n%s", idle.code, idle.stderr.String())
	}
	ctx := context.Background()
	c, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for _, table := range []string{"item", "input", "result", "client", "worker", "push", "push_lock"} {
		var n int
		if err := c.QueryRow(ctx, "select count(*) from hfsent."+table+" x where not exists (select 1 from hfsent.batch b where b.id = x.batch_id)").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%d rows of hfsent.%s outlived their batch", n, table)
		}
	}
}

// hasControl reports whether s holds a control character other than the
// newline that ends each line of output, or a formatting character (a
// bidirectional override).
func hasControl(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool {
		return r != '\n' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r))
	}) >= 0
}

// Batch names with control characters (a newline that forges a line in
// queue list, an ANSI escape, a bidirectional override) or over 200
// characters are refused by push (exit 2, nothing created); names already
// in the database (an older hfsent let them in), and the client, model and
// host names status shows, are printed escaped by queue list and status.
func TestQueueBatchNamesRefusedAndEscaped(t *testing.T) {
	db := pgtest.URL(t)
	in := queueCSV(t, t.TempDir(), "in.csv", [][3]string{{"r1", "one", "team\x1b[2Jred"}, {"r2", "two", "blue\nteam"}})
	mustRun(t, qenv(db), "queue", "migrate")
	for _, name := range []string{"nightly\nfake 999 rows", "x\x1b[31mred", "a\u202eb", "tab\there", strings.Repeat("n", 201)} {
		r := runBin(t, qenv(db), "queue", "push", in, "--batch", name, "--no-progress")
		if r.code != 2 || !strings.Contains(r.stderr, "--batch") || hasControl(r.stderr) {
			t.Errorf("push --batch %q: exit %d, want 2 and a message naming --batch with the name escaped:\n%q", name, r.code, r.stderr)
		}
	}
	if r := mustRun(t, qenv(db), "queue", "list"); strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("a refused push created a batch:\n%s", r.stdout)
	}
	long := strings.Repeat("é", 200)
	mustRun(t, qenv(db), "queue", "push", in, "--batch", long, "--no-progress", "--client-column", "client")
	mustRun(t, qenv(db), "queue", "push", in, "--batch", "plain", "--no-progress", "--model", "m\x1b]0;title\a")

	// As an older hfsent let them in.
	ctx := context.Background()
	c, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	evil := "evil\nplain        999999          8 -            2020-01-01T00:00:00Z forged\x1b[31m"
	if _, err := c.Exec(ctx, `update hfsent.batch set name = $1 where name = $2`, evil, long); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, `insert into hfsent.worker (batch_id, id, host, pid) select id, 'w1', E'host\x1b[1m', 1 from hfsent.batch where name = $1`, evil); err != nil {
		t.Fatal(err)
	}
	list := mustRun(t, qenv(db), "queue", "list").stdout
	if hasControl(list) || strings.Count(list, "\n") != 3 || !strings.Contains(list, `"evil\nplain`) || !strings.Contains(list, `"m\x1b]0;title\a"`) {
		t.Fatalf("queue list prints names raw (want 3 lines, names escaped):\n%s", list)
	}
	st := mustRun(t, qenv(db), "queue", "status", "--batch", evil).stdout
	for _, want := range []string{`"evil\nplain`, `"team\x1b[2Jred"`, `"blue\nteam"`, `"host\x1b[1m"`} {
		if !strings.Contains(st, want) {
			t.Errorf("queue status does not show %s:\n%s", want, st)
		}
	}
	if hasControl(st) || strings.Count(st, "\n") != 10 {
		t.Fatalf("queue status prints names raw:\n%q", st)
	}
	st = mustRun(t, qenv(db), "queue", "status", "--batch", "plain").stdout
	if hasControl(st) || !strings.Contains(st, `(model "m\x1b]0;title\a"`) {
		t.Fatalf("queue status prints the model raw:\n%q", st)
	}
}

// A row redone after its worker was killed with -9 says in the export how
// many times the provider saw it: the killed worker's call counts (it
// wrote no result), beside the call that finished the row.
func TestQueueKill9AttemptsCountTheLostCall(t *testing.T) {
	db := pgtest.URL(t)
	fake := &fakehf.Fake{Latency: 40 * time.Millisecond}
	srv := fakehf.Start(fake)
	defer srv.Close()
	rows := append(clientRows("a", 150), clientRows("b", 150)...)
	// Two clients: no reserved rows, so every row sent was claimed first.
	pushBatch(t, db, "k9a", rows, "--global-cap", "8", "--lease", "2s", "--client-column", "client")
	// No response cache: a claim lost with its worker counts as one call
	// (result.claims), which a claim the cache answered did not make.
	victim := startWorker(t, db, "--batch", "k9a", "--endpoint", srv.URL, "-c", "4", "--retries", "0", "--no-cache")
	waitDone(t, db, "k9a", 20)
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	victim.wait(t)
	for i := range 2 {
		w := startWorker(t, db, "--batch", "k9a", "--endpoint", srv.URL, "-c", "4", "--retries", "0", "--exit-when-done", "--no-cache")
		if code := w.wait(t); code != 0 {
			t.Fatalf("worker %d: exit %d\n%s", i, code, w.stderr.String())
		}
	}
	seen := fake.Seen()
	twice, unseen := 0, 0
	for i, r := range exportRows(t, db, "k9a") {
		n := seen[rows[i][1]]
		if n == 2 {
			twice++
		}
		// A claim the victim marked sent but whose request had not left
		// when it was killed counts as a call the provider never saw:
		// the queue cannot tell it from one lost in flight, and counting
		// it keeps the cap exact. At most the victim's -c such rows.
		if r["outcome"] == "success" && r["attempts"] == fmt.Sprint(n+1) {
			unseen++
			continue
		}
		if r["outcome"] != "success" || r["attempts"] != fmt.Sprint(n) {
			t.Errorf("%s: %s with attempts=%s; the provider saw it %d times", r["request_id"], r["outcome"], r["attempts"], n)
		}
	}
	if unseen > 4 {
		t.Errorf("%d rows count a call the provider never saw; at most the killed worker's 4 in flight may", unseen)
	}
	if twice+unseen == 0 {
		t.Fatal("no row was sent twice: the killed worker had nothing in flight, so nothing was tested")
	}
}

// Pushes into one batch at once each report the rows in the batch as of
// their own commit: with six pushes of 500 rows, the six counts are 500,
// 1000 ... 3000, one each; a push of a file pushed before reports them all.
func TestQueueConcurrentPushesCountTheBatch(t *testing.T) {
	db := pgtest.URL(t)
	mustRun(t, qenv(db), "queue", "migrate")
	dir := t.TempDir()
	const pushes, n = 6, 500
	var files []string
	for i := range pushes {
		files = append(files, queueCSV(t, dir, fmt.Sprintf("in%d.csv", i), clientRows(fmt.Sprintf("p%d", i), n)))
	}
	out := make([]result, pushes)
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = runBin(t, qenv(db), "queue", "push", f, "--batch", "many", "--no-progress")
		}()
	}
	wg.Wait()
	counts := map[int]int{}
	re := regexp.MustCompile(`; (\d+) rows in the batch`)
	for i, r := range out {
		m := re.FindStringSubmatch(r.stderr)
		if r.code != 0 || m == nil {
			t.Fatalf("push %d: exit %d\n%s", i, r.code, r.stderr)
		}
		counts[int(atoi(t, m[1]))]++
	}
	for k := 1; k <= pushes; k++ {
		if counts[k*n] != 1 {
			t.Fatalf("the pushes reported these rows in the batch (count: pushes): %v; want %d, %d ... %d once each", counts, n, 2*n, pushes*n)
		}
	}
	r := mustRun(t, qenv(db), "queue", "push", files[0], "--batch", "many", "--no-progress")
	if !strings.Contains(r.stderr, fmt.Sprintf("nothing added (%d rows in the batch)", pushes*n)) {
		t.Fatalf("pushing a file again:\n%s", r.stderr)
	}
}
