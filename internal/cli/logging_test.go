package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
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

// JSON logs give durations in milliseconds, the unit in the key ("for_ms":
// 1010 for a pause of 1s and its margin), never nanoseconds under the bare
// key ("for":1010000000); text logs keep Go's "for=1.01s".
func TestJSONLogDurationsInMilliseconds(t *testing.T) {
	// run classifies two rows against a fake whose first answer is a 429
	// with Retry-After: 1, which pauses every call and logs it.
	classify := func(args ...string) run {
		srv := fakehf.Start(&fakehf.Fake{Script: func(n int64, _ []string, _ *http.Request) fakehf.Reply {
			if n == 1 {
				return fakehf.Reply{Status: 429, Header: map[string]string{"Retry-After": "1"}}
			}
			return fakehf.Reply{}
		}})
		defer srv.Close()
		in := writeFile(t, "in.csv", csvOf("a", "b"))
		return runMain(t, map[string]string{"HF_TOKEN": token}, "", append(args, "classify", in, "--endpoint", srv.URL, "-c", "1",
			"-o", filepath.Join(t.TempDir(), "out.csv"))...)
	}
	r := classify("--log-format", "json")
	var pause map[string]any
	for line := range strings.Lines(r.stderr) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && strings.HasPrefix(fmt.Sprint(rec["msg"]), "rate limited") {
			pause = rec
		}
	}
	if ms, _ := pause["for_ms"].(float64); pause == nil || ms < 1000 || ms > 1100 || pause["for"] != nil {
		t.Fatalf("the pause's log line %v, want for_ms about 1000 (Retry-After: 1) and no for:\n%s", pause, r.stderr)
	}
	r = classify()
	if !regexp.MustCompile(`for=1(\.\d+)?s`).MatchString(r.stderr) {
		t.Fatalf("text logs: %s", r.stderr)
	}
}
