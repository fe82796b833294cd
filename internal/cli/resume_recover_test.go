package cli

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/results"
)

// TestResumeRecoversACutShortResume: a resume killed before its new file
// caught up with the old one leaves OUTPUT.hfsent-resume.tmp holding the
// rows it finished. The next resume keeps them instead of asking again.
func TestResumeRecoversACutShortResume(t *testing.T) {
	ids := []string{"r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9"}
	in := writeFile(t, "in.csv", csvOf(ids...))
	out := filepath.Join(t.TempDir(), "out.csv")

	// A first run in which every call failed: ten rows to redo.
	down := fakehf.Start(&fakehf.Fake{Script: func(int64, []string, *http.Request) fakehf.Reply { return fakehf.Reply{Status: 500} }})
	r := runMain(t, map[string]string{"HF_TOKEN": token}, "", "classify", in, "-o", out, "--endpoint", down.URL, "--retries", "0")
	down.Close()
	if r.code != ExitRowsFailed {
		t.Fatalf("first run: exit %d: %s", r.code, r.stderr)
	}

	// What a resume killed after three rows leaves: those rows, and a torn
	// fourth.
	var tmp bytes.Buffer
	w, err := results.NewWriter(&tmp, false)
	if err != nil {
		t.Fatal(err)
	}
	var done []results.Row
	for _, id := range ids[:3] {
		done = append(done, results.Row{RequestID: id, Label: "POSITIVE", Score: 0.9, Outcome: outcome.Success, Model: "m", Attempts: 1, StartedMs: 1, FinishedMs: 2})
	}
	if err := w.Write(done); err != nil {
		t.Fatal(err)
	}
	tmp.WriteString("r3,200,POSI")
	if err := os.WriteFile(out+resumeTempSuffix, tmp.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	f := &fakehf.Fake{}
	up := fakehf.Start(f)
	defer up.Close()
	r = runMain(t, map[string]string{"HF_TOKEN": token}, "", "classify", in, "-o", out, "--endpoint", up.URL, "--retries", "0", "--resume")
	if r.code != ExitOK {
		t.Fatalf("resume: exit %d: %s", r.code, r.stderr)
	}
	seen := f.Seen()
	for i, id := range ids {
		want := 1
		if i < 3 {
			want = 0
		}
		if got := seen["text of "+id]; got != want {
			t.Errorf("%s sent %d times, want %d", id, got, want)
		}
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	rows := parseResults(t, string(b))
	if len(rows) != len(ids) {
		t.Fatalf("%d rows, want %d", len(rows), len(ids))
	}
	for i, row := range rows {
		if row["request_id"] != ids[i] || row["outcome"] != "success" {
			t.Fatalf("row %d: %v", i, row)
		}
	}
	if _, err := os.Stat(out + resumeTempSuffix); !os.IsNotExist(err) {
		t.Fatalf("the earlier resume's file is still there: %v", err)
	}
}
