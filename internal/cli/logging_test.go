package cli

import (
	"bufio"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// --log-format json gives one JSON object per log line on stderr, and the
// token never appears in the logs.
func TestLogFormatJSON(t *testing.T) {
	srv := fakehf.Start(&fakehf.Fake{Token: checkToken})
	defer srv.Close()
	dir := t.TempDir()
	_, _, stderr := ciRun(t, map[string]string{"HF_TOKEN": checkToken}, "--log-level", "debug", "--log-format", "json",
		"classify", ciMixedInput(t), "--endpoint", srv.URL, "--retries", "0", "-o", filepath.Join(dir, "out.csv"))
	var sawProvider bool
	sc := bufio.NewScanner(strings.NewReader(stderr))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "{") {
			continue // the summary line is plain text by design
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("log line is not JSON: %q", line)
		}
		if rec["msg"] == "provider" {
			sawProvider = true
		}
	}
	if !sawProvider {
		t.Errorf("no debug JSON log line about the provider:\n%s", stderr)
	}
	if strings.Contains(stderr, checkToken) {
		t.Errorf("the token appears in the logs")
	}
	if code, _, stderr := ciRun(t, nil, "--log-format", "xml", "classify", "x.csv", "--provider", "local"); code != ExitUsage || !strings.Contains(stderr, "--log-format") {
		t.Errorf("--log-format xml: exit %d %q, want 2", code, stderr)
	}
}

// hfsent never writes colour codes: with NO_COLOR set, and a progress bar
// forced on, stderr holds no SGR sequence.
func TestNoColour(t *testing.T) {
	dir := t.TempDir()
	_, _, stderr := ciRun(t, map[string]string{"NO_COLOR": "1"}, "--log-level", "debug",
		"classify", ciMixedInput(t), "--provider", "local", "--progress", "-o", filepath.Join(dir, "out.csv"))
	if sgr := regexp.MustCompile(`\x1b\[[0-9;]*m`); sgr.MatchString(stderr) {
		t.Errorf("colour codes on stderr: %q", stderr)
	}
}
