// Package e2e runs the real hfsent binary against the fake HF API on
// loopback, for behaviour that crosses the process boundary: signals, kill
// -9, files left on disk and read again by --resume.
package e2e

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "hfsent-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "hfsent")
	if b := os.Getenv("HFSENT_E2E_BIN"); b != "" {
		// Another build (say /tmp/hfsent-base) for a before-and-after
		// figure: its tests of what it lacks fail.
		bin = b
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	args := []string{"build", "-o", bin}
	if raceFlag != "" {
		args = append(args, raceFlag)
	}
	build := exec.Command("go", append(args, "github.com/hfsent/hfsent/cmd/hfsent")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building hfsent:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// hfsent prepares the binary with a clean environment: no token, a HOME
// with no token file.
func hfsent(t *testing.T, ctx context.Context, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	home := t.TempDir()
	cmd.Env = []string{"HOME=" + home, "HF_HOME=" + home, "PATH=" + os.Getenv("PATH")}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	return cmd, &stderr
}

// run runs the binary to the end and returns its exit code and stderr.
func run(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd, stderr := hfsent(t, ctx, args...)
	err := cmd.Run()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("running hfsent: %v", err)
		}
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// writeInput writes n rows with unique ids and texts; text(i) is the text.
func writeInput(t *testing.T, dir string, n int, text func(i int) string) string {
	t.Helper()
	var b strings.Builder
	w := csv.NewWriter(&b)
	_ = w.Write([]string{"request_id", "text"})
	for i := range n {
		_ = w.Write([]string{id(i), text(i)})
	}
	w.Flush()
	p := filepath.Join(dir, "in.csv")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func id(i int) string       { return fmt.Sprintf("r%05d", i) }
func uniqText(i int) string { return fmt.Sprintf("text number %d is fine", i) }

// readResults parses a results file strictly and returns its rows as maps.
func readResults(t *testing.T, path string) []map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		t.Fatalf("%s is not a valid CSV: %v", path, err)
	}
	if len(recs) == 0 || recs[0][0] != "request_id" {
		t.Fatalf("%s has no header", path)
	}
	var out []map[string]string
	for _, r := range recs[1:] {
		m := map[string]string{}
		for i, h := range recs[0] {
			m[h] = r[i]
		}
		out = append(out, m)
	}
	return out
}

// checkComplete asserts one row per input id, in input order, all success.
func checkComplete(t *testing.T, rows []map[string]string, n int) {
	t.Helper()
	if len(rows) != n {
		t.Fatalf("got %d rows, want %d", len(rows), n)
	}
	for i, r := range rows {
		if r["request_id"] != id(i) {
			t.Fatalf("row %d has id %s, want %s (order or duplicates broken)", i, r["request_id"], id(i))
		}
		if r["outcome"] != "success" {
			t.Fatalf("row %d (%s) is %s: %s", i, id(i), r["outcome"], r["error"])
		}
	}
}

// waitRows waits until path holds at least n lines.
func waitRows(t *testing.T, path string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && bytes.Count(b, []byte("\n")) > n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s never reached %d rows", path, n)
}
