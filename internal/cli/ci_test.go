package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/hfsent/hfsent/internal/outcome"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// ciRun runs hfsent in-process with env as its whole environment.
func ciRun(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	ios := &IOStreams{
		In:       strings.NewReader(""),
		Out:      &out,
		ErrOut:   &errOut,
		Getenv:   func(k string) string { return env[k] },
		HardExit: func(int) { t.Error("unexpected hard exit") },
	}
	code = Main(args, ios)
	return code, out.String(), errOut.String()
}

// ciMixedInput writes 10 rows: 6 that the fake answers, 2 it fails with 503
// ("fail" in the text), 1 it rate-limits ("limit"), 1 with blank text.
func ciMixedInput(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("request_id,text\n")
	for i, text := range []string{"good", "fine", "fail one", "great", "limit me", "", "nice", "fail two", "ok", "lovely"} {
		fmt.Fprintf(&b, "r%02d,%s\n", i+1, text)
	}
	path := filepath.Join(t.TempDir(), "in.csv")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func ciMixedFake(t *testing.T) string {
	t.Helper()
	srv := fakehf.Start(&fakehf.Fake{Script: func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
		switch {
		case len(texts) == 1 && strings.HasPrefix(texts[0], "fail"):
			return fakehf.Reply{Status: 503}
		case len(texts) == 1 && strings.HasPrefix(texts[0], "limit"):
			return fakehf.Reply{Status: 429, Header: map[string]string{"Retry-After": "1"}}
		}
		return fakehf.Reply{}
	}})
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestSummaryJSONMixedRun(t *testing.T) {
	dir := t.TempDir()
	sumPath := filepath.Join(dir, "summary.json")
	code, _, stderr := ciRun(t, nil, "classify", ciMixedInput(t), "--endpoint", ciMixedFake(t),
		"--retries", "0", "-o", filepath.Join(dir, "out.csv"), "--summary-json", sumPath, "--fail-on", "50%")
	if code != ExitOK {
		t.Fatalf("exit %d, want 0 (4 of 10 failed, within 50%%); stderr:\n%s", code, stderr)
	}
	raw, err := os.ReadFile(sumPath)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Rows        int64            `json:"rows"`
		Outcomes    map[string]int64 `json:"outcomes"`
		Calls       int64            `json:"calls"`
		Retries     int64            `json:"retries"`
		ElapsedSec  float64          `json:"elapsed_s"`
		CallsPerSec float64          `json:"calls_per_s"`
		ExitCode    int              `json:"exit_code"`
		ExitReason  string           `json:"exit_reason"`
		FailOn      string           `json:"fail_on"`
		FailedRows  int64            `json:"failed_rows"`
		FailureRate float64          `json:"failure_rate"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("summary is not JSON: %v\n%s", err, raw)
	}
	wantOutcomes := map[string]int64{"success": 6, "upstream_failed": 2, "upstream_rate_limited": 1, "invalid_input": 1}
	for k, v := range got.Outcomes {
		if v != wantOutcomes[k] {
			t.Errorf("outcomes[%s] = %d, want %d", k, v, wantOutcomes[k])
		}
	}
	if len(got.Outcomes) != len(outcome.All()) {
		t.Errorf("outcomes has %d codes, want all %d (zeros included, so scripts can index any)", len(got.Outcomes), len(outcome.All()))
	}
	if got.Rows != 10 || got.Calls != 9 || got.Retries != 0 || got.FailedRows != 4 || got.FailureRate != 0.4 {
		t.Errorf("rows=%d calls=%d retries=%d failed=%d rate=%v, want 10 9 0 4 0.4", got.Rows, got.Calls, got.Retries, got.FailedRows, got.FailureRate)
	}
	if got.ExitCode != 0 || got.ExitReason != "failures_tolerated" || got.FailOn != "50%" {
		t.Errorf("exit_code=%d exit_reason=%q fail_on=%q, want 0 failures_tolerated 50%%", got.ExitCode, got.ExitReason, got.FailOn)
	}
	if got.ElapsedSec <= 0 || got.CallsPerSec <= 0 {
		t.Errorf("elapsed_s=%v calls_per_s=%v, want both > 0", got.ElapsedSec, got.CallsPerSec)
	}
}

func TestFailOnModes(t *testing.T) {
	in, url := ciMixedInput(t), ciMixedFake(t) // 4 of 10 rows fail
	okInput := filepath.Join(t.TempDir(), "ok.csv")
	if err := os.WriteFile(okInput, []byte("request_id,text\na,good\nb,fine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		input, failOn string
		want          int
		reason        string
	}{
		{in, "", ExitRowsFailed, "rows_failed"}, // the default is any
		{in, "any", ExitRowsFailed, "rows_failed"},
		{in, "none", ExitOK, "failures_tolerated"},
		{in, "40%", ExitOK, "failures_tolerated"}, // at the rate is within it
		{in, "39.9%", ExitRowsFailed, "failure_rate_exceeded"},
		{in, "0%", ExitRowsFailed, "failure_rate_exceeded"},
		{okInput, "any", ExitOK, "ok"},
		{okInput, "0%", ExitOK, "ok"},
	} {
		t.Run(tc.failOn+"/"+filepath.Base(tc.input), func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"classify", tc.input, "--endpoint", url, "--retries", "0", "-o", filepath.Join(dir, "out.csv"),
				"--summary-json", filepath.Join(dir, "s.json")}
			if tc.failOn != "" {
				args = append(args, "--fail-on", tc.failOn)
			}
			code, _, stderr := ciRun(t, nil, args...)
			if code != tc.want {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tc.want, stderr)
			}
			raw, _ := os.ReadFile(filepath.Join(dir, "s.json"))
			if !strings.Contains(string(raw), `"exit_reason": "`+tc.reason+`"`) {
				t.Errorf("summary lacks exit_reason %q:\n%s", tc.reason, raw)
			}
		})
	}
}

func TestFailOnRejectsBadValues(t *testing.T) {
	for _, v := range []string{"some", "5", "-1%", "101%", "NaN%", "%"} {
		code, _, stderr := ciRun(t, nil, "classify", "nonexistent.csv", "--provider", "local", "--fail-on", v)
		if code != ExitUsage || !strings.Contains(stderr, "--fail-on") {
			t.Errorf("--fail-on %q: exit %d, stderr %q; want 2 naming the flag", v, code, stderr)
		}
	}
}

func TestGitHubStepSummary(t *testing.T) {
	dir := t.TempDir()
	step := filepath.Join(dir, "step.md")
	if err := os.WriteFile(step, []byte("earlier step\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"GITHUB_STEP_SUMMARY": step}
	code, _, _ := ciRun(t, env, "classify", ciMixedInput(t), "--endpoint", ciMixedFake(t), "--retries", "0",
		"-o", filepath.Join(dir, "out.csv"), "--fail-on", "10%")
	if code != ExitRowsFailed {
		t.Fatalf("exit %d, want 1", code)
	}
	raw, err := os.ReadFile(step)
	if err != nil {
		t.Fatal(err)
	}
	got := string(raw)
	for _, want := range []string{
		"earlier step\n### hfsent classify ", // appended, not replaced
		"| outcome | rows | share |",
		"| `success` | 6 | 60.0% |",
		"| `upstream_failed` | 2 | 20.0% |",
		"| `upstream_rate_limited` | 1 | 10.0% |",
		"| `invalid_input` | 1 | 10.0% |",
		"| **total** | **10** | |",
		"Exit 1 (`failure_rate_exceeded`; failure rate 40.0%, `--fail-on 10%`)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("step summary lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "circuit_open") {
		t.Errorf("step summary lists outcomes that did not happen:\n%s", got)
	}

	// Without the variable nothing is written anywhere.
	code, _, _ = ciRun(t, nil, "classify", ciMixedInput(t), "--provider", "local", "-o", filepath.Join(dir, "out2.csv"))
	if after, _ := os.ReadFile(step); string(after) != got {
		t.Errorf("a run without GITHUB_STEP_SUMMARY changed the file (exit %d)", code)
	}
}
