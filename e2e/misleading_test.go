package e2e

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/queue/pgtest"
)

// closedStdout runs the binary with descriptor 1 closed, as `hfsent ... >&-`
// does in a shell.
func closedStdout(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd, stderr := hfsent(t, ctx, append([]string{"-c", `exec "$0" "$@" >&-`, bin}, args...)...)
	cmd.Path, cmd.Args[0] = "/bin/sh", "/bin/sh"
	cmd.Env = append(cmd.Env, env...)
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stderr: stderr.String()}
}

// classify and queue export with stdout closed refuse (exit 2) before any
// call, rather than claim success for rows that went nowhere; stdout sent
// to /dev/null (opened write-only, as a shell's >/dev/null does) is a
// choice, and works.
func TestClosedStdoutIsRefused(t *testing.T) {
	fake := &fakehf.Fake{}
	srv := fakehf.Start(fake)
	defer srv.Close()
	in := writeInput(t, t.TempDir(), 5, uniqText)
	r := closedStdout(t, nil, "classify", in, "--endpoint", srv.URL, "--no-progress")
	if r.code != 2 || !strings.Contains(r.stderr, "stdout is closed") || !strings.Contains(r.stderr, "-o FILE") {
		t.Fatalf("classify >&-: exit %d, want 2 and a word on stdout\n%s", r.code, r.stderr)
	}
	if fake.Calls() != 0 {
		t.Fatalf("%d calls sent with nowhere to write", fake.Calls())
	}
	// Stdout nil: os/exec opens /dev/null write-only, like >/dev/null.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd, stderr := hfsent(t, ctx, "classify", in, "--endpoint", srv.URL, "--no-progress")
	if err := cmd.Run(); err != nil {
		t.Fatalf("classify >/dev/null: %v\n%s", err, stderr)
	}

	db := pgtest.URL(t)
	pushBatch(t, db, "out", clientRows("c", 3))
	r = closedStdout(t, qenv(db), "queue", "export", "--batch", "out")
	if r.code != 2 || !strings.Contains(r.stderr, "stdout is closed") || strings.Contains(r.stderr, "exported to") {
		t.Fatalf("queue export >&-: exit %d, want 2\n%s", r.code, r.stderr)
	}
	// With -o, stdout does not matter.
	r = closedStdout(t, qenv(db), "queue", "export", "--batch", "out", "-o", t.TempDir()+"/x.csv")
	if r.code != 0 || !strings.Contains(r.stderr, "3 rows exported") {
		t.Fatalf("queue export -o >&-: exit %d\n%s", r.code, r.stderr)
	}
}

// With HOME unset (a bare container, a systemd unit) there is no token file
// to look for: the hints say so, and how to name one, rather than show an
// empty path ("which writes )").
func TestTokenHintsWithoutHome(t *testing.T) {
	in := writeInput(t, t.TempDir(), 1, uniqText)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"classify", in}, "set HF_TOKEN_PATH"},
		{[]string{"check"}, "looked in HF_TOKEN only"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd, stderr := hfsent(t, ctx, c.args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		out, _ := cmd.Output()
		cancel()
		all := string(out) + stderr.String()
		if code := cmd.ProcessState.ExitCode(); code == 0 || !strings.Contains(all, c.want) || strings.Contains(all, " )") || strings.Contains(all, "writes ,") {
			t.Errorf("%v: exit %d, want a hint with %q and no empty path:\n%s", c.args, code, c.want, all)
		}
	}
}
