package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// interruptThenResume starts a run, stops it with sig once some rows are on
// disk, checks the file, then resumes and checks that every row is there
// once, in order, and what the fake was sent.
func interruptThenResume(t *testing.T, sig syscall.Signal) {
	// More rows than the reorder window (1024), so that the interrupt
	// stops reading before the end.
	const n = 3000
	fake := &fakehf.Fake{Latency: 5 * time.Millisecond}
	srv := fakehf.Start(fake)
	defer srv.Close()
	dir := t.TempDir()
	in := writeInput(t, dir, n, uniqText)
	out := filepath.Join(dir, "out.csv")
	args := []string{"classify", in, "-o", out, "--endpoint", srv.URL, "-c", "4", "--retries", "0", "--no-progress"}
	// A kill -9 loses the rows in flight and those finished behind an
	// earlier row still in flight (the README's promise). With one call at
	// a time nothing finishes behind another, so the killed run sends one:
	// what it may pay twice is then exactly its call in flight. (At -c 4,
	// rows finished out of order made the count vary, and the test fail
	// about one run in four.)
	first := args
	if sig == syscall.SIGKILL {
		first = append(args[:len(args):len(args)], "-c", "1")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd, stderr := hfsent(t, ctx, first...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitRows(t, out, 100)
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	code := cmd.ProcessState.ExitCode()

	var firstFinal []string
	switch sig {
	case syscall.SIGINT:
		if code != 130 {
			t.Fatalf("SIGINT: exit %d, want 130; stderr:\n%s", code, stderr)
		}
		rows := readResults(t, out) // must parse whole
		if len(rows) >= n {
			t.Fatalf("the run finished before the interrupt (%d rows); nothing was tested", len(rows))
		}
		for i, r := range rows {
			if r["request_id"] != id(i) {
				t.Fatalf("row %d has id %s, want %s", i, r["request_id"], id(i))
			}
			switch r["outcome"] {
			case "success":
				firstFinal = append(firstFinal, uniqText(i))
			case "not_attempted":
			default:
				t.Fatalf("row %d is %s after an interrupt", i, r["outcome"])
			}
		}
	case syscall.SIGKILL:
		// The file is valid except perhaps a torn last line: drop what
		// follows the last newline before parsing.
		b, _ := os.ReadFile(out)
		b = b[:strings.LastIndexByte(string(b), '\n')+1]
		tmp := filepath.Join(dir, "killed.csv")
		_ = os.WriteFile(tmp, b, 0o644)
		for i, r := range readResults(t, tmp) {
			if r["request_id"] != id(i) || r["outcome"] != "success" {
				t.Fatalf("row %d: %v", i, r)
			}
			firstFinal = append(firstFinal, uniqText(i))
		}
	}
	if len(firstFinal) < 100 {
		t.Fatalf("only %d rows finished before the stop", len(firstFinal))
	}

	code, errOut := run(t, append(args, "--resume")...)
	if code != 0 {
		t.Fatalf("--resume: exit %d; stderr:\n%s", code, errOut)
	}
	checkComplete(t, readResults(t, out), n)
	if _, err := os.Stat(out + ".hfsent-resume.tmp"); !os.IsNotExist(err) {
		t.Errorf("the resume's temporary file was left behind")
	}

	seen := fake.Seen()
	for _, txt := range firstFinal {
		if seen[txt] != 1 {
			t.Fatalf("%q was finished by the first run but sent %d times", txt, seen[txt])
		}
	}
	twice := 0
	for i := range n {
		switch c := seen[uniqText(i)]; {
		case c == 2:
			twice++
		case c != 1:
			t.Fatalf("row %d sent %d times", i, c)
		}
	}
	// Only the call in flight at a kill -9 may be paid twice (-c 1); a
	// graceful interrupt lets its calls finish and pays nothing twice.
	if max := map[syscall.Signal]int{syscall.SIGINT: 0, syscall.SIGKILL: 1}[sig]; twice > max {
		t.Fatalf("%d rows were sent twice, want at most %d", twice, max)
	}
}

func TestSIGINTThenResume(t *testing.T) { interruptThenResume(t, syscall.SIGINT) }

func TestKill9ThenResume(t *testing.T) { interruptThenResume(t, syscall.SIGKILL) }

// A second signal quits at once, still leaving a valid file.
func TestSecondSignalQuitsAtOnce(t *testing.T) {
	fake := &fakehf.Fake{Latency: 30 * time.Second}
	srv := fakehf.Start(fake)
	defer srv.Close()
	dir := t.TempDir()
	in := writeInput(t, dir, 50, uniqText)
	out := filepath.Join(dir, "out.csv")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd, stderr := hfsent(t, ctx, "classify", in, "-o", out, "--endpoint", srv.URL, "--retries", "0", "--no-progress")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for fake.Calls() < 8 {
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	_ = cmd.Process.Signal(syscall.SIGINT)
	time.Sleep(200 * time.Millisecond)
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("exit %d, want 130; stderr:\n%s", code, stderr)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Fatalf("took %s to quit after the second signal", d)
	}
	readResults(t, out) // a valid CSV (the header at least)
}

// A torn last line (a kill -9 in the middle of a write) is dropped and its
// row redone; with --include-text the tear may fall inside a quoted text
// holding a newline.
func TestResumeDropsTornLastLine(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra []string
		text  func(int) string
		cut   func(b []byte) []byte
	}{
		{"mid-line", nil, uniqText, func(b []byte) []byte { return b[:len(b)-7] }},
		{"no final newline", nil, uniqText, func(b []byte) []byte { return b[:len(b)-1] }},
		{"inside a quoted newline", []string{"--include-text"},
			func(i int) string { return "line one of " + id(i) + "\nline two" },
			func(b []byte) []byte {
				i := strings.LastIndex(string(b), "\nline two")
				return b[:i+1]
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 30
			fake := &fakehf.Fake{}
			srv := fakehf.Start(fake)
			defer srv.Close()
			dir := t.TempDir()
			in := writeInput(t, dir, n, tc.text)
			out := filepath.Join(dir, "out.csv")
			args := append([]string{"classify", in, "-o", out, "--endpoint", srv.URL, "--no-progress", "--retries", "0"}, tc.extra...)
			if code, e := run(t, args...); code != 0 {
				t.Fatalf("exit %d: %s", code, e)
			}
			b, _ := os.ReadFile(out)
			if err := os.WriteFile(out, tc.cut(b), 0o644); err != nil {
				t.Fatal(err)
			}
			code, e := run(t, append(args, "--resume")...)
			if code != 0 {
				t.Fatalf("--resume: exit %d: %s", code, e)
			}
			if !strings.Contains(e, "torn last line") {
				t.Errorf("the torn line was not reported: %s", e)
			}
			rows := readResults(t, out)
			checkComplete(t, rows, n)
			seen := fake.Seen()
			if got := seen[tc.text(n-1)]; got != 2 {
				t.Errorf("the torn row was sent %d times in all, want 2", got)
			}
			if got := seen[tc.text(0)]; got != 1 {
				t.Errorf("a kept row was sent %d times, want 1", got)
			}
		})
	}
}

func TestResumeRefusesAnotherRun(t *testing.T) {
	fake := &fakehf.Fake{}
	srv := fakehf.Start(fake)
	defer srv.Close()
	dir := t.TempDir()
	in := writeInput(t, dir, 20, uniqText)
	out := filepath.Join(dir, "out.csv")
	base := []string{"classify", in, "-o", out, "--endpoint", srv.URL, "--no-progress", "--retries", "0", "--max-duration", "1ns"}
	if code, e := run(t, base...); code != 1 {
		t.Fatalf("exit %d: %s", code, e)
	}
	before, _ := os.ReadFile(out)
	calls := fake.Calls()

	other := filepath.Join(dir, "other.csv")
	b, _ := os.ReadFile(in)
	_ = os.WriteFile(other, append(b, []byte("r99999,one more row\n")...), 0o644)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"other input", []string{"classify", other, "-o", out, "--endpoint", srv.URL, "--retries", "0", "--resume"}, "different input"},
		{"other model", []string{"classify", in, "-o", out, "--endpoint", srv.URL, "--retries", "0", "--resume", "--model", "someone/else"}, "--model someone/else"},
		{"stdin", []string{"classify", "-", "-o", out, "--endpoint", srv.URL, "--retries", "0", "--resume"}, "file"},
		{"no sidecar", []string{"classify", in, "-o", filepath.Join(dir, "plain.csv"), "--endpoint", srv.URL, "--retries", "0", "--resume"}, "cannot tell which input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "no sidecar" {
				_ = os.WriteFile(filepath.Join(dir, "plain.csv"), before, 0o644)
			}
			code, e := run(t, tc.args...)
			if code != 2 || !strings.Contains(e, tc.want) {
				t.Fatalf("exit %d, want 2 with %q; stderr:\n%s", code, tc.want, e)
			}
		})
	}
	after, _ := os.ReadFile(out)
	if string(after) != string(before) || fake.Calls() != calls {
		t.Fatalf("a refused resume touched the output or called the provider")
	}
}

// --max-duration stops admission; every row is still written (the rest
// not_attempted) and the exit is 1; --resume then finishes the job.
func TestMaxDurationThenResume(t *testing.T) {
	const n = 400
	fake := &fakehf.Fake{Latency: 10 * time.Millisecond}
	srv := fakehf.Start(fake)
	defer srv.Close()
	dir := t.TempDir()
	in := writeInput(t, dir, n, uniqText)
	out := filepath.Join(dir, "out.csv")
	args := []string{"classify", in, "-o", out, "--endpoint", srv.URL, "-c", "2", "--no-progress", "--retries", "0"}
	code, e := run(t, append(args, "--max-duration", "300ms")...)
	if code != 1 {
		t.Fatalf("exit %d, want 1: %s", code, e)
	}
	rows := readResults(t, out)
	if len(rows) != n {
		t.Fatalf("%d rows written, want all %d", len(rows), n)
	}
	na := 0
	for i, r := range rows {
		if r["request_id"] != id(i) {
			t.Fatalf("row %d out of order", i)
		}
		if r["outcome"] == "not_attempted" {
			na++
			if !strings.Contains(r["error"], "max-duration") {
				t.Fatalf("row %d: error %q does not name --max-duration", i, r["error"])
			}
		}
	}
	if na == 0 || na == n {
		t.Fatalf("%d rows not_attempted of %d", na, n)
	}
	if code, e := run(t, append(args, "--resume")...); code != 0 {
		t.Fatalf("--resume: exit %d: %s", code, e)
	}
	checkComplete(t, readResults(t, out), n)
	if got := fake.Calls(); got != n {
		t.Fatalf("%d calls for %d rows: a row was paid twice", got, n)
	}
}
