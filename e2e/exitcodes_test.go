package e2e

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// Exit codes and the split between stdout (results) and stderr (summary,
// logs), as a script sees them.

type result struct {
	code           int
	stdout, stderr string
}

// runBin is run (the clean environment, the time limit) with env added and
// stdout kept too.
func runBin(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd, stderr := hfsent(t, ctx, args...)
	cmd.Env = append(cmd.Env, env...)
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("running hfsent: %v", err)
		}
	}
	return result{cmd.ProcessState.ExitCode(), out.String(), stderr.String()}
}

func TestLocalSampleExitsZero(t *testing.T) {
	r := runBin(t, nil, "classify", "../samples/feedback.csv", "--provider", "local")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	recs, err := csv.NewReader(strings.NewReader(r.stdout)).ReadAll()
	if err != nil || len(recs) != 14 || recs[0][0] != "request_id" {
		t.Fatalf("stdout is not the 13-row results CSV (%v):\n%s", err, r.stdout)
	}
	if !strings.HasPrefix(r.stderr, "rows=13 success=13") || strings.Contains(r.stderr, "\x1b[") {
		t.Fatalf("stderr should hold only the summary line (no bar off a terminal):\n%q", r.stderr)
	}
}

func TestOutputFileAndStdoutStaysClean(t *testing.T) {
	out := filepath.Join(t.TempDir(), "results.csv")
	r := runBin(t, nil, "classify", "../samples/feedback.csv", "--provider", "local", "-o", out)
	if r.code != 0 || r.stdout != "" {
		t.Fatalf("exit %d, stdout %q", r.code, r.stdout)
	}
	b, err := os.ReadFile(out)
	if err != nil || !bytes.HasPrefix(b, []byte("request_id,status,label,score,outcome,model,attempts,latency_ms,error,queued_ms,started_ms,finished_ms,prompt_tokens,completion_tokens,cost_usd,cached\n")) {
		t.Fatalf("results file: %v\n%s", err, b)
	}
}

func TestExitCodes(t *testing.T) {
	t.Run("usage", func(t *testing.T) {
		r := runBin(t, nil, "classify", "no-such.csv", "--provider", "local")
		if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, "no-such.csv") {
			t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("no token", func(t *testing.T) {
		r := runBin(t, nil, "classify", "../samples/feedback.csv", "--retries", "0")
		if r.code != 2 || !strings.Contains(r.stderr, "HF_TOKEN") {
			t.Fatalf("exit %d stderr %q", r.code, r.stderr)
		}
	})
	t.Run("rows failed", func(t *testing.T) {
		srv := fakehf.Start(&fakehf.Fake{Script: func(int64, []string, *http.Request) fakehf.Reply { return fakehf.Reply{Status: 500} }})
		defer srv.Close()
		r := runBin(t, []string{"HF_TOKEN=hf_x"}, "classify", "../samples/feedback.csv", "--endpoint", srv.URL, "--retries", "0")
		if r.code != 1 || !strings.Contains(r.stderr, "upstream_failed=13") {
			t.Fatalf("exit %d stderr %q", r.code, r.stderr)
		}
	})
	t.Run("quality gate", func(t *testing.T) {
		// The embedded model labels "I love it" POSITIVE: with the gold
		// label negative, accuracy is 0, under the gate: 3; met: 0.
		in := filepath.Join(t.TempDir(), "gold.csv")
		if err := os.WriteFile(in, []byte("request_id,text,gold\na,I love it,negative\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r := runBin(t, nil, "classify", in, "--provider", "local", "--gold-column", "gold", "--min-accuracy", "0.5")
		if r.code != 3 || !strings.Contains(r.stderr, "accuracy=0.0000") || !strings.Contains(r.stderr, "under --min-accuracy 0.5") {
			t.Fatalf("exit %d stderr %q", r.code, r.stderr)
		}
		r = runBin(t, nil, "classify", in, "--provider", "local", "--gold-column", "gold", "--label-map", "positive=negative", "--min-accuracy", "0.5")
		if r.code != 0 || !strings.Contains(r.stderr, "accuracy=1.0000") {
			t.Fatalf("gate met: exit %d stderr %q", r.code, r.stderr)
		}
	})
	t.Run("version", func(t *testing.T) {
		r := runBin(t, nil, "version")
		if r.code != 0 || !strings.HasPrefix(r.stdout, "hfsent ") {
			t.Fatalf("exit %d stdout %q", r.code, r.stdout)
		}
	})
}

// TestFIFOInputIsReadOnce: a named pipe (or a shell's <(...)) cannot be
// read twice; every row must still arrive, and --resume is refused for it.
func TestFIFOInputIsReadOnce(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "in.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFOs here: %v", err)
	}
	const n = 5000 // well past any read buffer
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer f.Close()
		fmt.Fprintln(f, "request_id,text")
		for i := range n {
			fmt.Fprintf(f, "r%05d,a long enough text for row %d so that the pipe fills\n", i, i)
		}
	}()
	out := filepath.Join(dir, "out.csv")
	r := runBin(t, nil, "classify", fifo, "--provider", "local", "-o", out)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(b), "\n") - 1; got != n {
		t.Fatalf("%d rows written from the pipe, want %d", got, n)
	}
	r = runBin(t, nil, "classify", fifo, "--provider", "local", "-o", out, "--resume")
	if r.code != 2 || !strings.Contains(r.stderr, "regular file") {
		t.Fatalf("resume from a pipe: exit %d: %s", r.code, r.stderr)
	}
}
