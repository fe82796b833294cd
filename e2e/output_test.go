//go:build linux || darwin

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// What a run writes besides its results, and what two runs on one output
// do to each other.

// notAttempted writes out with every row of in not_attempted, or failed
// (exit 1): rows a resume redoes.
func notAttempted(t *testing.T, in, out string, extra ...string) {
	t.Helper()
	args := append([]string{"classify", in, "-o", out, "--endpoint", "http://127.0.0.1:9/unused", "--retries", "0", "--no-progress", "--max-duration", "1ns"}, extra...)
	if code, e := run(t, args...); code != 1 {
		t.Fatalf("exit %d, want 1: %s", code, e)
	}
	for i, r := range readResults(t, out) {
		switch r["outcome"] {
		case "not_attempted", "upstream_failed": // a row admitted before the deadline finds no server
		default:
			t.Fatalf("row %d is %s", i, r["outcome"])
		}
	}
}

// --summary-json and --report are written at the end of the run: a path that
// would overwrite the input, the results or a file beside them, or that
// cannot be written, is refused before any call.
func TestSideFilesCheckedBeforeAnyCall(t *testing.T) {
	fake := &fakehf.Fake{}
	srv := fakehf.Start(fake)
	defer srv.Close()
	dir := t.TempDir()
	in := writeInput(t, dir, 10, uniqText)
	out := filepath.Join(dir, "out.html") // a name --report accepts
	base := []string{"classify", in, "-o", out, "--endpoint", srv.URL, "--retries", "0", "--no-progress"}
	if code, e := run(t, base...); code != 0 {
		t.Fatalf("first run: exit %d: %s", code, e)
	}
	link := filepath.Join(dir, "link.csv")
	if err := os.Symlink(in, link); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	snapshot := func() map[string]string {
		m := map[string]string{}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
			m[e.Name()] = string(b)
		}
		return m
	}
	before := snapshot()
	calls := fake.Calls()
	for _, tc := range []struct {
		name  string
		extra []string
		want  string
	}{
		{"summary is the input", []string{"--summary-json", in}, "--summary-json " + in + " would overwrite the input"},
		{"summary is the input, another spelling", []string{"--summary-json", filepath.Join(sub, "..", "in.csv")}, "would overwrite the input"},
		{"summary is a symlink to the input", []string{"--summary-json", link}, "would overwrite the input"},
		{"summary is the output", []string{"--summary-json", out}, "--summary-json " + out + " would overwrite --output"},
		{"summary is the sidecar", []string{"--summary-json", out + ".hfsent.json"}, "beside --output"},
		{"summary is the resume temp file", []string{"--summary-json", out + ".hfsent-resume.tmp"}, "beside --output"},
		{"summary is the lock file", []string{"--summary-json", out + ".hfsent.lock"}, "beside --output"},
		{"report is the output", []string{"--report", out}, "--report " + out + " would overwrite --output"},
		{"report is the summary", []string{"--summary-json", filepath.Join(dir, "x.html"), "--report", filepath.Join(dir, "x.html")}, "--report " + filepath.Join(dir, "x.html") + " would overwrite --summary-json"},
		{"summary in a missing directory", []string{"--summary-json", filepath.Join(dir, "nodir", "s.json")}, "--summary-json " + filepath.Join(dir, "nodir", "s.json") + " cannot be written: no such file"},
		{"summary is a directory", []string{"--summary-json", sub}, "--summary-json " + sub + " cannot be written: it is a directory"},
		{"report in a missing directory", []string{"--report", filepath.Join(dir, "nodir", "r.svg")}, "--report " + filepath.Join(dir, "nodir", "r.svg") + " cannot be written"},
		{"report is a directory", []string{"--report", filepath.Join(dir, "d.svg")}, "it is a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "report is a directory" {
				if err := os.Mkdir(filepath.Join(dir, "d.svg"), 0o755); err != nil {
					t.Fatal(err)
				}
				defer os.Remove(filepath.Join(dir, "d.svg"))
			}
			code, e := run(t, append(append([]string{}, base...), tc.extra...)...)
			if code != 2 || !strings.Contains(e, tc.want) {
				t.Fatalf("exit %d, want 2 with %q; stderr:\n%s", code, tc.want, e)
			}
			if fake.Calls() != calls {
				t.Fatal("the provider was called")
			}
			after := snapshot()
			for name, content := range before {
				if after[name] != content {
					t.Errorf("%s was changed", name)
				}
			}
			for name := range after {
				if _, ok := before[name]; !ok && name != "d.svg" {
					t.Errorf("%s was written", name)
				}
			}
		})
	}
	t.Run("read-only directory", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root writes anywhere")
		}
		ro := filepath.Join(dir, "ro")
		if err := os.Mkdir(ro, 0o555); err != nil {
			t.Fatal(err)
		}
		code, e := run(t, append(base, "--summary-json", filepath.Join(ro, "s.json"))...)
		if code != 2 || !strings.Contains(e, "permission denied") {
			t.Fatalf("exit %d: %s", code, e)
		}
	})
	// and good paths still work
	sum, pic := filepath.Join(sub, "s.json"), filepath.Join(sub, "run.svg")
	if code, e := run(t, append(base, "--summary-json", sum, "--report", pic)...); code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	for _, p := range []string{sum, pic} {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", p, err)
		}
	}
}

// Two runs on one output: the second is refused (exit 2, naming the first's
// PID) and the first's file is as if it had run alone. A kill -9 releases
// the lock.
func TestSecondRunOnTheSameOutputIsRefused(t *testing.T) {
	const n = 200
	slow := &fakehf.Fake{Latency: 40 * time.Millisecond}
	slowSrv := fakehf.Start(slow)
	defer slowSrv.Close()
	other := &fakehf.Fake{}
	otherSrv := fakehf.Start(other)
	defer otherSrv.Close()
	dir := t.TempDir()
	in := writeInput(t, dir, n, uniqText)
	in2 := filepath.Join(dir, "in2.csv")
	b, _ := os.ReadFile(in)
	if err := os.WriteFile(in2, append(b, "r99999,one more\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.csv")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first, stderr := hfsent(t, ctx, "classify", in, "-o", out, "--endpoint", slowSrv.URL, "-c", "2", "--retries", "0", "--no-progress")
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	waitRows(t, out, 5)
	pid := fmt.Sprintf("pid %d", first.Process.Pid)
	for _, extra := range [][]string{nil, {"--resume"}} {
		args := append([]string{"classify", in2, "-o", out, "--endpoint", otherSrv.URL, "--retries", "0"}, extra...)
		code, e := run(t, args...)
		if code != 2 || !strings.Contains(e, pid) || !strings.Contains(e, out) {
			t.Fatalf("second run %v: exit %d, want 2 naming %s and %s; stderr:\n%s", extra, code, pid, out, e)
		}
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("first run: %v; stderr:\n%s", err, stderr)
	}
	if other.Calls() != 0 {
		t.Fatalf("a refused run made %d calls", other.Calls())
	}
	checkComplete(t, readResults(t, out), n)
	if sc, _ := os.ReadFile(out + ".hfsent.json"); !strings.Contains(string(sc), `"input": "`+in+`"`) {
		t.Fatalf("the sidecar does not name the first run's input:\n%s", sc)
	}
	if _, err := os.Stat(out + ".hfsent.lock"); !os.IsNotExist(err) {
		t.Errorf("the lock file outlived the run: %v", err)
	}

	// kill -9 of the holder: the lock goes with it.
	if err := os.Remove(out); err != nil {
		t.Fatal(err)
	}
	killed, _ := hfsent(t, ctx, "classify", in, "-o", out, "--endpoint", slowSrv.URL, "-c", "2", "--retries", "0", "--no-progress")
	if err := killed.Start(); err != nil {
		t.Fatal(err)
	}
	waitRows(t, out, 5)
	_ = killed.Process.Kill()
	_ = killed.Wait()
	if b, err := os.ReadFile(out + ".hfsent.lock"); err != nil || strings.TrimSpace(string(b)) != fmt.Sprint(killed.Process.Pid) {
		t.Fatalf("lock file after kill -9: %q, %v; want the killed run's PID", b, err)
	}
	code, e := run(t, "classify", in2, "-o", out, "--endpoint", otherSrv.URL, "--retries", "0")
	if code != 0 {
		t.Fatalf("after kill -9 of the holder: exit %d; stderr:\n%s", code, e)
	}
	rows := readResults(t, out)
	if len(rows) != n+1 || rows[n]["request_id"] != "r99999" {
		t.Fatalf("%d rows after the run that took the lock over, want %d", len(rows), n+1)
	}
}

// killResume resumes out against a slow provider and kills it (-9) once its
// temp file holds some rows, before it caught up with the old file.
func killResume(t *testing.T, in, out string, extra ...string) {
	t.Helper()
	slow := &fakehf.Fake{Latency: 40 * time.Millisecond}
	srv := fakehf.Start(slow)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd, _ := hfsent(t, ctx, append([]string{"classify", in, "-o", out, "--endpoint", srv.URL, "-c", "1", "--retries", "0", "--no-progress", "--resume"}, extra...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitRows(t, out+".hfsent-resume.tmp", 5)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if _, err := os.Stat(out + ".hfsent-resume.tmp"); err != nil {
		t.Fatalf("the killed resume left no temp file: %v", err)
	}
}

// The rows a killed resume finished are folded in by the next resume, not
// asked for again.
func TestKilledResumeIsFoldedIn(t *testing.T) {
	const n = 100
	dir := t.TempDir()
	in := writeInput(t, dir, n, uniqText)
	out := filepath.Join(dir, "out.csv")
	notAttempted(t, in, out)
	killResume(t, in, out)
	b, _ := os.ReadFile(out + ".hfsent-resume.tmp")
	b = b[:bytes.LastIndexByte(b, '\n')+1]
	tmp := filepath.Join(t.TempDir(), "tmp.csv")
	_ = os.WriteFile(tmp, b, 0o644)
	done := readResults(t, tmp)

	fake := &fakehf.Fake{}
	srv := fakehf.Start(fake)
	defer srv.Close()
	code, e := run(t, "classify", in, "-o", out, "--endpoint", srv.URL, "--retries", "0", "--no-progress", "--resume")
	if code != 0 || !strings.Contains(e, "was cut short") {
		t.Fatalf("exit %d; stderr:\n%s", code, e)
	}
	checkComplete(t, readResults(t, out), n)
	if got, want := fake.Calls(), int64(n-len(done)); got != want {
		t.Fatalf("%d calls, want %d: the killed resume finished %d rows", got, want, len(done))
	}
	for _, p := range []string{".hfsent-resume.tmp", ".hfsent-resume.json", ".hfsent.lock"} {
		if _, err := os.Stat(out + p); !os.IsNotExist(err) {
			t.Errorf("%s left behind", p)
		}
	}
}

// A killed resume's temp file is never merged into an unrelated later
// output: a run without --resume on another input (or with another model)
// removes it, and the next --resume redoes every row of the new run.
func TestStaleResumeTempIsNeverMerged(t *testing.T) {
	const n = 60
	for _, tc := range []struct {
		name  string
		text  func(int) string
		extra []string
	}{
		{"another input, same ids", func(i int) string { return fmt.Sprintf("another text %d", i) }, nil},
		{"another model", uniqText, []string{"--model", "someone/else"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			in := writeInput(t, dir, n, uniqText)
			out := filepath.Join(dir, "out.csv")
			notAttempted(t, in, out)
			killResume(t, in, out)

			in2 := writeInput(t, t.TempDir(), n, tc.text)
			notAttempted(t, in2, out, tc.extra...)
			if _, err := os.Stat(out + ".hfsent-resume.tmp"); !os.IsNotExist(err) {
				t.Fatalf("a fresh run left the stale temp file: %v", err)
			}

			fake := &fakehf.Fake{}
			srv := fakehf.Start(fake)
			defer srv.Close()
			args := append([]string{"classify", in2, "-o", out, "--endpoint", srv.URL, "--retries", "0", "--no-progress", "--resume"}, tc.extra...)
			if code, e := run(t, args...); code != 0 {
				t.Fatalf("--resume: exit %d: %s", code, e)
			}
			rows := readResults(t, out)
			checkComplete(t, rows, n)
			if fake.Calls() != n {
				t.Fatalf("%d calls for %d rows: stale rows were kept", fake.Calls(), n)
			}
			seen := fake.Seen()
			for i := range n {
				if seen[tc.text(i)] != 1 {
					t.Fatalf("row %d's text was sent %d times", i, seen[tc.text(i)])
				}
			}
			if tc.extra != nil {
				for i, r := range rows {
					if r["model"] != "someone/else" {
						t.Fatalf("row %d labelled by %q", i, r["model"])
					}
				}
			}
		})
	}
}

// hfsentLimited is hfsent under ulimit -f blocks (512-byte blocks): a write
// past that size fails (EFBIG), as on a full disk.
func hfsentLimited(t *testing.T, blocks int, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd, stderr := hfsent(t, ctx, args...)
	cmd.Path = "/bin/sh"
	cmd.Args = append([]string{"sh", "-c", `ulimit -f "$1" && shift && exec "$@"`, "sh", fmt.Sprint(blocks), bin}, args...)
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// A resume on a full disk leaves the old output as it was and no temp file
// (empty or not) behind, and a later resume with room finishes the job.
func TestResumeOnAFullDisk(t *testing.T) {
	const n = 300
	dir := t.TempDir()
	in := writeInput(t, dir, n, uniqText)
	out := filepath.Join(dir, "out.csv")
	notAttempted(t, in, out)
	before, _ := os.ReadFile(out)
	if len(before) < 8*512 {
		t.Fatalf("the output (%d bytes) is too small for the test", len(before))
	}
	fake := &fakehf.Fake{}
	srv := fakehf.Start(fake)
	defer srv.Close()
	args := []string{"classify", in, "-o", out, "--endpoint", srv.URL, "--retries", "0", "--no-progress", "--resume"}
	for _, tc := range []struct {
		name   string
		blocks int
		code   int
		want   string
	}{
		{"not a byte", 0, 2, "file too large"},
		{"after some rows", 8, 1, "file too large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := fake.Calls()
			code, e := hfsentLimited(t, tc.blocks, args...)
			if code != tc.code || !strings.Contains(e, tc.want) {
				t.Fatalf("exit %d, want %d with %q; stderr:\n%s", code, tc.code, tc.want, e)
			}
			if tc.code == 2 && fake.Calls() != calls {
				t.Fatal("calls were made before the refusal")
			}
			if after, _ := os.ReadFile(out); !bytes.Equal(before, after) {
				t.Fatal("the old output was changed")
			}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if name := e.Name(); name != "in.csv" && name != "out.csv" && name != "out.csv.hfsent.json" {
					st, _ := e.Info()
					t.Errorf("%s (%d bytes) left behind", name, st.Size())
				}
			}
		})
	}
	if code, e := run(t, args...); code != 0 {
		t.Fatalf("resume with room: exit %d: %s", code, e)
	}
	checkComplete(t, readResults(t, out), n)
}

// A device or a pipe as -o: no sidecar and no lock file beside it (nothing
// in /dev), and --resume is refused.
func TestNonRegularOutput(t *testing.T) {
	for _, p := range []string{"/dev/null.hfsent.json", "/dev/null.hfsent.lock"} {
		if _, err := os.Stat(p); err == nil {
			t.Fatalf("%s exists before the test", p)
		}
	}
	defer func() {
		for _, p := range []string{"/dev/null.hfsent.json", "/dev/null.hfsent.lock", "/dev/null.hfsent.json.tmp"} {
			if _, err := os.Stat(p); err == nil {
				os.Remove(p)
				t.Errorf("%s was written", p)
			}
		}
	}()
	if code, e := run(t, "classify", "../samples/feedback.csv", "--provider", "local", "-o", "/dev/null"); code != 0 {
		t.Fatalf("-o /dev/null: exit %d: %s", code, e)
	}
	code, e := run(t, "classify", "../samples/feedback.csv", "--provider", "local", "-o", "/dev/null", "--resume")
	if code != 2 || !strings.Contains(e, "regular file") {
		t.Fatalf("--resume -o /dev/null: exit %d: %s", code, e)
	}

	dir := t.TempDir()
	fifo := filepath.Join(dir, "results.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip("no fifo:", err)
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := os.ReadFile(fifo)
		got <- b
	}()
	if code, e := run(t, "classify", "../samples/feedback.csv", "--provider", "local", "-o", fifo); code != 0 {
		t.Fatalf("-o FIFO: exit %d: %s", code, e)
	}
	if b := <-got; bytes.Count(b, []byte("\n")) != 14 {
		t.Fatalf("the FIFO carried:\n%s", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("files written beside the FIFO: %v", entries)
	}
}
