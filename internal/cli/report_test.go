package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReportCommand(t *testing.T) {
	dir := t.TempDir()
	results := filepath.Join(dir, "results.csv")
	code, _, stderr := ciRun(t, nil, "classify", ciMixedInput(t), "--endpoint", ciMixedFake(t), "--retries", "0",
		"-o", results, "--report", filepath.Join(dir, "during.html"))
	if code != ExitRowsFailed {
		t.Fatalf("classify: exit %d\n%s", code, stderr)
	}
	during, err := os.ReadFile(filepath.Join(dir, "during.html"))
	if err != nil {
		t.Fatalf("classify --report wrote nothing: %v", err)
	}
	if n := strings.Count(string(during), `<g class="row">`); n != 10 {
		t.Errorf("classify --report drew %d bars, want 10", n)
	}

	svg := filepath.Join(dir, "after.svg")
	if code, _, stderr := ciRun(t, nil, "report", results, "-o", svg); code != ExitOK {
		t.Fatalf("report: exit %d\n%s", code, stderr)
	}
	after, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	body := string(after)
	if n := strings.Count(body, `<g class="row">`); n != 10 {
		t.Errorf("report drew %d bars, want 10", n)
	}
	for _, o := range []string{"success (6)", "upstream_failed (2)", "upstream_rate_limited (1)", "invalid_input (1)"} {
		if !strings.Contains(body, o) {
			t.Errorf("legend lacks %q", o)
		}
	}
}

func TestReportErrors(t *testing.T) {
	dir := t.TempDir()
	notResults := filepath.Join(dir, "in.csv")
	if err := os.WriteFile(notResults, []byte("request_id,text\na,b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"report", notResults}, "--output"},
		{[]string{"report", notResults, "-o", filepath.Join(dir, "x.png")}, ".svg or .html"},
		{[]string{"report", filepath.Join(dir, "missing.csv"), "-o", filepath.Join(dir, "x.svg")}, "cannot open"},
		{[]string{"report", notResults, "-o", filepath.Join(dir, "x.svg")}, "not an hfsent results file"},
		{[]string{"report", notResults, "-o", filepath.Join(dir, "no", "such", "dir.svg")}, "not an hfsent results file"},
		{[]string{"classify", notResults, "--provider", "local", "--report", filepath.Join(dir, "x.pdf")}, "--report"},
	} {
		code, _, stderr := ciRun(t, nil, tc.args...)
		if code != ExitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x.svg")); err == nil {
		t.Errorf("a failed report left a file behind")
	}
}
