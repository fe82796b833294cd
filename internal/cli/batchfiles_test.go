package cli

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// Once the results are written, the run leaves no file at the provider:
// every batch's input file, output file and error file is deleted (three
// batches, one with an error line: 3 inputs, 3 outputs, 1 error file). With
// --batch-keep-files, all seven stay.
func TestBatchFilesDeletedOnceCollected(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep=%v", keep), func(t *testing.T) {
			f := &fakehf.Batch{Token: batchKey, FailLine: func(id string, _ []byte) (int, string, bool) {
				return 400, "context_length_exceeded", id == "r4"
			}}
			srv := fakehf.StartBatch(f)
			defer srv.Close()
			defer f.Close()
			in := writeFile(t, "in.csv", manyRows(10, func(i int) string { return fmt.Sprintf("lovely %d", i) }))
			out := filepath.Join(t.TempDir(), "out.csv")
			var more []string
			if keep {
				more = []string{"--batch-keep-files"}
			}
			r := batchRun(t, srv.URL, in, out, append(more, "--batch-max-requests", "4")...)
			if r.code != 1 { // r4 is upstream_request_rejected
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			if rows := readRows(t, out); len(rows) != 10 || rows[4]["outcome"] != "upstream_request_rejected" || rows[3]["outcome"] != "success" {
				t.Fatalf("rows: %v", rows)
			}
			files, c := f.Files(), f.Counts()
			switch {
			case !keep && (len(files) != 0 || c.Deletes != 7):
				t.Fatalf("files left at the provider: %v; %d deleted, want all 7", files, c.Deletes)
			case keep && (len(files) != 7 || c.Deletes != 0):
				t.Fatalf("--batch-keep-files: files %v, %d deleted; want all 7 kept", files, c.Deletes)
			}
		})
	}
}

// A delete the provider refuses is a warning: the results are written and
// the exit is the run's.
func TestBatchFailedDeleteIsAWarning(t *testing.T) {
	f := &fakehf.Batch{Token: batchKey}
	defer f.Close()
	h := f.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"error":{"message":"You are not allowed to delete this file.","type":"invalid_request_error","code":null}}`))
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	in := writeFile(t, "in.csv", manyRows(3, func(i int) string { return fmt.Sprintf("lovely %d", i) }))
	out := filepath.Join(t.TempDir(), "out.csv")
	r := batchRun(t, srv.URL, in, out)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if rows := readRows(t, out); len(rows) != 3 {
		t.Fatalf("rows: %v", rows)
	}
	if !strings.Contains(r.stderr, "cannot delete a batch's input file") || !strings.Contains(r.stderr, "cannot delete a batch's output file") {
		t.Fatalf("no warning for the refused deletes: %s", r.stderr)
	}
	if len(f.Files()) != 2 {
		t.Fatalf("files %v: want the input and output files still there", f.Files())
	}
}

// A batch the provider cancels itself (not --batch-cancel) keeps the rows
// it answered; the rest are submitted again, up to --batch-max-submissions,
// then upstream_timeout. Its unanswered rows are absent from both files,
// or (mark) error-file lines with code batch_cancelled: the same either
// way, none counted failed.
func TestBatchProviderCancelResubmits(t *testing.T) {
	for _, mark := range []bool{false, true} {
		t.Run(fmt.Sprintf("marked=%v", mark), func(t *testing.T) {
			f := &fakehf.Batch{Token: batchKey, CancelAfter: 3, MarkUnanswered: mark}
			srv := fakehf.StartBatch(f)
			defer srv.Close()
			defer f.Close()
			in := writeFile(t, "in.csv", manyRows(10, func(i int) string { return fmt.Sprintf("lovely %d", i) }))
			out := filepath.Join(t.TempDir(), "out.csv")
			r := batchRun(t, srv.URL, in, out, "--batch-max-submissions", "2")
			if r.code != 1 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			ok, timeout := 0, 0
			for _, g := range readRows(t, out) {
				switch g["outcome"] {
				case "success":
					ok++
				case "upstream_timeout":
					timeout++
					if g["attempts"] != "2" {
						t.Errorf("row %v: want attempts 2", g)
					}
				default:
					t.Errorf("row %v", g)
				}
			}
			// 3 in the first batch, 3 of the 7 left in the second, 4 missing.
			if ok != 6 || timeout != 4 {
				t.Errorf("%d success, %d upstream_timeout; want 6 and 4", ok, timeout)
			}
			if c := f.Counts(); c.Creates != 2 || c.Cancels != 0 {
				t.Errorf("counts %+v: want 2 batches, none cancelled by the run", c)
			}
			if !strings.Contains(r.stderr, "submitted=17 answered=6 failed=0 resubmitted=7 missing=4") || !strings.Contains(r.stderr, "ended cancelled") {
				t.Errorf("closing line: %s", r.stderr)
			}
		})
	}
}

// An expired batch's error file names each line it never ran, with code
// batch_expired (OpenAI's spec): those rows are sent again, not failed.
func TestBatchExpiredErrorLinesAreSentAgain(t *testing.T) {
	f := &fakehf.Batch{Token: batchKey, ExpireAfter: 4, MarkUnanswered: true}
	srv := fakehf.StartBatch(f)
	defer srv.Close()
	defer f.Close()
	in := writeFile(t, "in.csv", manyRows(10, func(i int) string { return fmt.Sprintf("lovely %d", i) }))
	out := filepath.Join(t.TempDir(), "out.csv")
	r := batchRun(t, srv.URL, in, out, "--batch-max-submissions", "3")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for i, g := range readRows(t, out) {
		if g["outcome"] != "success" {
			t.Errorf("row %d: %v", i, g)
		}
	}
	// 4, then 4 of the 6 left, then the last 2.
	if c := f.Counts(); c.Creates != 3 || c.Lines != 10 {
		t.Errorf("counts %+v: want 3 batches answering 10 lines", c)
	}
	if !strings.Contains(r.stderr, "submitted=18 answered=10 failed=0 resubmitted=8 missing=0") {
		t.Errorf("closing line: %s", r.stderr)
	}
}
