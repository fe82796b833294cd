package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// Signals and broken outputs end a run the way the README promises, with the
// real binary.

// SIGTERM while stdin is a pipe whose writer is idle: the run stops waiting
// for more input, writes what it finished, and exits 130.
func TestSIGTERMWithAnIdlePipe(t *testing.T) {
	srv := fakehf.Start(&fakehf.Fake{})
	defer srv.Close()
	out := filepath.Join(t.TempDir(), "out.csv")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd, stderr := hfsent(t, ctx, "classify", "-", "-o", out, "--endpoint", srv.URL, "--no-progress")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(stdin, "request_id,text\na,fine\nb,good\nc,great\n")
	waitRows(t, out, 2) // the writer keeps the pipe open, and idle
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("still running 15 s after SIGTERM with an idle input pipe; stderr:\n%s", stderr)
	}
	stdin.Close()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("exit %d, want 130; stderr:\n%s", code, stderr)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %s to stop", d)
	}
	if rows := readResults(t, out); len(rows) < 2 {
		t.Fatalf("%d rows written, want the ones read", len(rows))
	}
}

// SIGHUP (the terminal went away) is a graceful stop, not a kill: the rows
// finished are written and the exit code is 130.
func TestSIGHUPIsAGracefulStop(t *testing.T) {
	srv := fakehf.Start(&fakehf.Fake{Latency: 20 * time.Millisecond})
	defer srv.Close()
	dir := t.TempDir()
	in := writeInput(t, dir, 2000, uniqText)
	out := filepath.Join(dir, "out.csv")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd, stderr := hfsent(t, ctx, "classify", in, "-o", out, "--endpoint", srv.URL, "-c", "2", "--no-progress")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitRows(t, out, 20)
	_ = cmd.Process.Signal(syscall.SIGHUP)
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("exit %d after SIGHUP, want 130; stderr:\n%s", code, stderr)
	}
	rows := readResults(t, out)
	if len(rows) < 20 || !strings.Contains(stderr.String(), "received hangup") {
		t.Fatalf("%d rows; stderr:\n%s", len(rows), stderr)
	}
}

// A second Ctrl-C quits even when the results cannot be written because the
// program reading them has stopped reading (the write is stuck on a full
// pipe).
func TestSecondInterruptQuitsWithAStuckWrite(t *testing.T) {
	srv := fakehf.Start(&fakehf.Fake{})
	defer srv.Close()
	dir := t.TempDir()
	long := strings.Repeat("a long review that fills the pipe quickly ", 40)
	in := writeInput(t, dir, 3000, func(i int) string { return fmt.Sprint(long, i) })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd, stderr := hfsent(t, ctx, "classify", in, "--endpoint", srv.URL, "--include-text", "--no-progress")
	// stdout is a pipe nobody reads: once its buffer is full, the write
	// blocks for good.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	cmd.Stdout = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	time.Sleep(1500 * time.Millisecond) // long enough to fill 64 KiB and stall
	start := time.Now()
	_ = cmd.Process.Signal(syscall.SIGINT)
	time.Sleep(300 * time.Millisecond)
	_ = cmd.Process.Signal(syscall.SIGINT)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("a second Ctrl-C did not quit while a write was stuck; stderr:\n%s", stderr)
	}
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("exit %d, want 130; stderr:\n%s", code, stderr)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Fatalf("took %s to quit", d)
	}
}

// A write error (the reader of stdout went away) still gets an honest
// summary: every row is counted once, as written or lost, and the failed
// count is never negative.
func TestWriteErrorCountsAddUp(t *testing.T) {
	srv := fakehf.Start(&fakehf.Fake{})
	defer srv.Close()
	dir := t.TempDir()
	in := writeInput(t, dir, 2000, uniqText)
	sum := filepath.Join(dir, "sum.json")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd, stderr := hfsent(t, ctx, "classify", in, "-o", "/dev/stdout", "--endpoint", srv.URL, "--no-progress", "--summary-json", sum)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Like `| head -1`: read one line, then go away.
	if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	stdout.Close()
	_ = cmd.Wait()
	var ee *exec.ExitError
	_ = ee
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("exit %d after a write error, want 1; stderr:\n%s", code, stderr)
	}
	line := regexp.MustCompile(`(?m)^rows=.*$`).FindString(stderr.String())
	num := func(key string) int {
		m := regexp.MustCompile(`\b` + key + `=(-?\d+)`).FindStringSubmatch(line)
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	rows, written, lost, success := num("rows"), num("written"), num("lost"), num("success")
	if rows == 0 || written+lost != rows || success > rows || lost == 0 {
		t.Fatalf("summary does not add up: rows=%d written=%d lost=%d success=%d\n%s", rows, written, lost, success, line)
	}
	b, err := os.ReadFile(sum)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), `"failed_rows": -`) {
		t.Fatalf("negative failed_rows:\n%s", b)
	}
}

// After Ctrl-C, a row waiting for the rate limiter is not sent during the
// grace period: only calls already in flight may finish.
func TestInterruptSendsNothingNew(t *testing.T) {
	fake := &fakehf.Fake{Latency: 5 * time.Millisecond}
	srv := fakehf.Start(fake)
	defer srv.Close()
	dir := t.TempDir()
	in := writeInput(t, dir, 50, uniqText)
	out := filepath.Join(dir, "out.csv")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd, stderr := hfsent(t, ctx, "classify", in, "-o", out, "--endpoint", srv.URL, "--rps", "1", "-c", "4", "--no-progress")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for fake.Calls() < 1 {
		time.Sleep(5 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("exit %d, want 130; stderr:\n%s", code, stderr)
	}
	time.Sleep(1500 * time.Millisecond) // a token would have come by now
	if n := fake.Calls(); n > 2 {
		t.Fatalf("%d calls: rows waiting for the rate limiter were sent after the interrupt", n)
	}
	_, _ = io.Copy(io.Discard, strings.NewReader(""))
}
