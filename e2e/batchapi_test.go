package e2e

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/batchapi"
	"github.com/hfsent/hfsent/internal/fakehf"
)

// classify --batch-api with the real binary: a stop while batches run
// (Ctrl-C, kill -9) leaves them running and recorded; --resume collects
// them, creating no new batch and paying for no row twice.

const batchKey = "sk-e2e-batch-0123456789abcdef"

func batchArgs(url, in, out string, more ...string) []string {
	return append([]string{"classify", in, "-o", out, "--provider", "chat", "--model", "gpt-4o-mini",
		"--endpoint", url + "/v1/chat/completions", "--labels", "positive,negative", "--token-env", "OPENAI_API_KEY",
		"--no-cache", "--batch-api", "--batch-poll", "20ms", "--no-progress"}, more...)
}

// startBatch starts the binary and waits until its journal records a batch.
func startBatch(t *testing.T, ctx context.Context, args []string, journal string) (*bytes.Buffer, func(os.Signal) int) {
	t.Helper()
	cmd, stderr := hfsent(t, ctx, args...)
	cmd.Env = append(cmd.Env, "OPENAI_API_KEY="+batchKey)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, err := os.ReadFile(journal); err == nil && bytes.Contains(b, []byte("\n")) {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("no batch recorded in %s; stderr:\n%s", journal, stderr)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return stderr, func(sig os.Signal) int {
		_ = cmd.Process.Signal(sig)
		if err := cmd.Wait(); err != nil && cmd.ProcessState == nil {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode()
	}
}

func resumeBatch(t *testing.T, url, in, out string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd, stderr := hfsent(t, ctx, batchArgs(url, in, out, "--resume")...)
	cmd.Env = append(cmd.Env, "OPENAI_API_KEY="+batchKey)
	_ = cmd.Run()
	return cmd.ProcessState.ExitCode(), stderr.String()
}

func TestBatchInterruptThenResume(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			// Each step of a batch lasts 400ms of wall time: the run is
			// stopped while its batch is validating.
			f := &fakehf.Batch{Token: batchKey, StepTime: 400 * time.Millisecond}
			srv := fakehf.StartBatch(f)
			defer srv.Close()
			defer f.Close()
			dir := t.TempDir()
			in := writeInput(t, dir, 50, uniqText)
			out := filepath.Join(dir, "out.csv")
			journal := out + ".hfsent-batches.jsonl"
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			stderr, stop := startBatch(t, ctx, batchArgs(srv.URL, in, out), journal)
			time.Sleep(50 * time.Millisecond)
			code := stop(sig)
			if sig == syscall.SIGINT {
				if code != 130 || !strings.Contains(stderr.String(), "--resume") || !strings.Contains(stderr.String(), "left running") {
					t.Fatalf("exit %d, want 130 and how to resume; stderr:\n%s", code, stderr)
				}
			}
			if c := f.Counts(); c.Cancels != 0 || c.Creates != 1 {
				t.Fatalf("counts after the stop %+v: want the one batch left running", c)
			}
			code, e := resumeBatch(t, srv.URL, in, out)
			if code != 0 {
				t.Fatalf("--resume exit %d:\n%s", code, e)
			}
			checkComplete(t, readResults(t, out), 50)
			if c := f.Counts(); c.Creates != 1 || c.Uploads != 1 || c.Lines != 50 || c.Live != 0 {
				t.Fatalf("counts %+v: want 1 upload, 1 batch, 50 lines: nothing submitted twice", c)
			}
			if !strings.Contains(e, "created=0 recorded=1") {
				t.Errorf("closing line: %s", e)
			}
			if _, err := os.Stat(journal); !os.IsNotExist(err) {
				t.Errorf("the journal is still there after every batch was collected: %v", err)
			}
		})
	}
}

// --resume --batch-cancel cancels the recorded batch, keeps what it
// answered, submits nothing, and the rows it never ran are not final.
func TestBatchCancelKeepsWhatRan(t *testing.T) {
	f := &fakehf.Batch{Token: batchKey, StepTime: 400 * time.Millisecond}
	srv := fakehf.StartBatch(f)
	defer srv.Close()
	defer f.Close()
	dir := t.TempDir()
	in := writeInput(t, dir, 20, uniqText)
	out := filepath.Join(dir, "out.csv")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, stop := startBatch(t, ctx, batchArgs(srv.URL, in, out), out+".hfsent-batches.jsonl")
	stop(syscall.SIGKILL)
	cmd, stderr := hfsent(t, ctx, batchArgs(srv.URL, in, out, "--resume", "--batch-cancel")...)
	cmd.Env = append(cmd.Env, "OPENAI_API_KEY="+batchKey)
	_ = cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("exit %d, want 1 (rows not answered); stderr:\n%s", code, stderr)
	}
	rows := readResults(t, out)
	if len(rows) != 20 {
		t.Fatalf("%d rows", len(rows))
	}
	for _, r := range rows {
		if r["outcome"] != "success" && r["outcome"] != "upstream_timeout" {
			t.Errorf("row %v", r)
		}
	}
	if c := f.Counts(); c.Cancels != 1 || c.Creates != 1 {
		t.Fatalf("counts %+v: want the one batch cancelled, none created", c)
	}
	if !strings.Contains(stderr.String(), "cancelled=1") {
		t.Errorf("closing line: %s", stderr)
	}
}

// A kill while the batch is being created (its id not yet back, or the
// create not yet sent): --resume finds the batch made from the recorded
// file in the provider's list, or creates it from that file, and submits
// no row twice. In behind-a-page, the account made 120 batches after it
// (more than a page of 100): the list is followed to a later page.
func TestBatchKilledWhileCreating(t *testing.T) {
	for _, c := range []struct {
		name    string
		forward bool
		others  int
	}{{"created", true, 0}, {"not-created", false, 0}, {"behind-a-page", true, 120}} {
		forward := c.forward
		t.Run(c.name, func(t *testing.T) {
			f := &fakehf.Batch{Token: batchKey}
			defer f.Close()
			var hold atomic.Bool
			hold.Store(true)
			release := make(chan struct{})
			h := f.Handler()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if hold.Load() && r.Method == "POST" && r.URL.Path == "/v1/batches" {
					if forward {
						h.ServeHTTP(httptest.NewRecorder(), r) // the batch exists; its answer is lost
					}
					select {
					case <-r.Context().Done():
					case <-release:
					}
					return
				}
				h.ServeHTTP(w, r)
			}))
			defer srv.Close()
			defer close(release) // before srv.Close: a held request ends
			dir := t.TempDir()
			in := writeInput(t, dir, 30, uniqText)
			out := filepath.Join(dir, "out.csv")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			_, stop := startBatch(t, ctx, batchArgs(srv.URL, in, out), out+".hfsent-batches.jsonl")
			deadline := time.Now().Add(10 * time.Second)
			for forward && f.Counts().Creates == 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			stop(syscall.SIGKILL)
			hold.Store(false)
			otherBatches(t, srv.URL, c.others)
			code, e := resumeBatch(t, srv.URL, in, out)
			if code != 0 {
				t.Fatalf("--resume exit %d:\n%s", code, e)
			}
			checkComplete(t, readResults(t, out), 30)
			if got := f.Counts(); got.Uploads != 1+int64(min(c.others, 1)) || got.Creates != 1+int64(c.others) || got.Lines != 30 {
				t.Fatalf("counts %+v: want 1 upload, 1 batch, 30 lines (besides %d other batches of one file)", got, c.others)
			}
		})
	}
}

// otherBatches makes n batches of one line at the fake, as the account's
// other work would, newer than any made before.
func otherBatches(t *testing.T, url string, n int) {
	t.Helper()
	if n == 0 {
		return
	}
	api := &batchapi.Client{Root: url + "/v1", Token: batchKey}
	ctx := context.Background()
	line := `{"custom_id":"x","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}}` + "\n"
	f, err := api.Upload(ctx, "other.jsonl", strings.NewReader(line))
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		if _, err := api.Create(ctx, f.ID); err != nil {
			t.Fatal(err)
		}
	}
}

// A kill after the first of two batches was collected and its input file
// deleted at the provider, while the second is still being asked: --resume
// reads the first batch's output file again (kept until the results are
// written), does not mind its input file being gone, creates no batch,
// and once the results are written no file is left at the provider.
func TestBatchKilledAfterADeleteResumes(t *testing.T) {
	f := &fakehf.Batch{Token: batchKey}
	defer f.Close()
	// Once the first run has deleted a file, it is killed at its next
	// request other than a delete (held, never answered): after the first
	// batch was collected, while the second is being asked.
	var deleted, killed atomic.Bool
	release := make(chan struct{})
	h := f.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if deleted.Load() && !killed.Load() && r.Method != http.MethodDelete {
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		h.ServeHTTP(w, r)
		if r.Method == http.MethodDelete {
			deleted.Store(true)
		}
	}))
	defer srv.Close()
	defer close(release) // before srv.Close: a held request ends
	dir := t.TempDir()
	in := writeInput(t, dir, 20, uniqText)
	out := filepath.Join(dir, "out.csv")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, stop := startBatch(t, ctx, batchArgs(srv.URL, in, out, "--batch-max-requests", "10"), out+".hfsent-batches.jsonl")
	deadline := time.Now().Add(20 * time.Second)
	for !deleted.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the run deleted no file")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // any other delete it makes before its next request
	stop(syscall.SIGKILL)
	killed.Store(true)
	if c := f.Counts(); c.Deletes != 1 || c.Creates != 2 {
		t.Fatalf("counts at the kill %+v: want 2 batches, only the first batch's input file deleted", c)
	}
	code, e := resumeBatch(t, srv.URL, in, out)
	if code != 0 {
		t.Fatalf("--resume exit %d:\n%s", code, e)
	}
	checkComplete(t, readResults(t, out), 20)
	if c := f.Counts(); c.Creates != 2 || c.Uploads != 2 || c.Lines != 20 {
		t.Fatalf("counts %+v: want 2 uploads, 2 batches, 20 lines: nothing submitted twice", c)
	}
	if files := f.Files(); len(files) != 0 {
		t.Fatalf("files left at the provider: %v", files)
	}
}
