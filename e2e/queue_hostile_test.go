package e2e

import (
	"net/url"
	"strings"
	"testing"

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
