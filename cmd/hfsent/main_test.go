package main_test

import (
	"bytes"
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

// bin is the hfsent binary built once for these end-to-end tests.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "hfsent-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "hfsent")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building hfsent: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	code           int
	stdout, stderr string
}

func hfsent(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code, out.String(), errb.String()}
}

func TestLocalSampleExitsZero(t *testing.T) {
	r := hfsent(t, nil, "classify", "../../samples/feedback.csv", "--provider", "local")
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
	r := hfsent(t, nil, "classify", "../../samples/feedback.csv", "--provider", "local", "-o", out)
	if r.code != 0 || r.stdout != "" {
		t.Fatalf("exit %d, stdout %q", r.code, r.stdout)
	}
	b, err := os.ReadFile(out)
	if err != nil || !bytes.HasPrefix(b, []byte("request_id,status,label,score,outcome,model,attempts,latency_ms,error,queued_ms,started_ms,finished_ms\n")) {
		t.Fatalf("results file: %v\n%s", err, b)
	}
}

func TestExitCodes(t *testing.T) {
	t.Run("usage", func(t *testing.T) {
		r := hfsent(t, nil, "classify", "no-such.csv", "--provider", "local")
		if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, "no-such.csv") {
			t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("no token", func(t *testing.T) {
		r := hfsent(t, nil, "classify", "../../samples/feedback.csv", "--retries", "0")
		if r.code != 2 || !strings.Contains(r.stderr, "HF_TOKEN") {
			t.Fatalf("exit %d stderr %q", r.code, r.stderr)
		}
	})
	t.Run("rows failed", func(t *testing.T) {
		srv := fakehf.Start(&fakehf.Fake{Script: func(int64, []string, *http.Request) fakehf.Reply { return fakehf.Reply{Status: 500} }})
		defer srv.Close()
		r := hfsent(t, []string{"HF_TOKEN=hf_x"}, "classify", "../../samples/feedback.csv", "--endpoint", srv.URL, "--retries", "0")
		if r.code != 1 || !strings.Contains(r.stderr, "upstream_failed=13") {
			t.Fatalf("exit %d stderr %q", r.code, r.stderr)
		}
	})
	t.Run("version", func(t *testing.T) {
		r := hfsent(t, nil, "version")
		if r.code != 0 || !strings.HasPrefix(r.stdout, "hfsent ") {
			t.Fatalf("exit %d stdout %q", r.code, r.stdout)
		}
	})
}

// TestInterruptWritesFinishedRows sends SIGINT mid-run: the process exits
// 130 and the file holds a valid CSV with every row finished before it.
func TestInterruptWritesFinishedRows(t *testing.T) {
	srv := fakehf.Start(&fakehf.Fake{Latency: 20 * time.Millisecond})
	defer srv.Close()
	var b strings.Builder
	b.WriteString("request_id,text\n")
	for i := range 2000 {
		fmt.Fprintf(&b, "r%04d,text %d\n", i, i)
	}
	in := filepath.Join(t.TempDir(), "in.csv")
	if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out.csv")
	cmd := exec.Command(bin, "classify", in, "-o", out, "--endpoint", srv.URL, "-c", "4", "--retries", "0")
	cmd.Env = []string{"HOME=" + t.TempDir()}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("want exit 130, got %v\n%s", err, errb.String())
	}
	data, _ := os.ReadFile(out)
	recs, err := csv.NewReader(bytes.NewReader(data)).ReadAll()
	if err != nil {
		t.Fatalf("results are not a valid CSV after an interrupt: %v", err)
	}
	rows := recs[1:]
	if len(rows) == 0 || len(rows) >= 2000 {
		t.Fatalf("%d rows written; want some but not all", len(rows))
	}
	done := 0
	for i, rec := range rows {
		if rec[0] != fmt.Sprintf("r%04d", i) {
			t.Fatalf("row %d is %s: order broken", i, rec[0])
		}
		if rec[4] == "success" {
			done++
		} else if rec[4] != "not_attempted" {
			t.Fatalf("row %s: outcome %s", rec[0], rec[4])
		}
	}
	if done == 0 || !strings.Contains(errb.String(), "interrupt") {
		t.Fatalf("%d success rows; stderr:\n%s", done, errb.String())
	}
}
