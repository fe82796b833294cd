package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// TestUsageErrorsExitTwoWithoutCrash: flag values that used to crash the
// process (out of memory, a panic inside failsafe-go: a Go crash exits 2
// too), run every row into circuit_open, spin for ever or fail every call
// are refused by the binary with exit 2 and a message, before any call.
func TestUsageErrorsExitTwoWithoutCrash(t *testing.T) {
	f := &fakehf.Fake{}
	srv := fakehf.Start(f)
	defer srv.Close()
	dir := t.TempDir()
	in := writeInput(t, dir, 3, uniqText)
	huge := filepath.Join(dir, "huge.csv")
	if err := os.WriteFile(huge, []byte("request_id,status,label,score,outcome,model,attempts,latency_ms,error,queued_ms,started_ms,finished_ms\n"+
		"a,200,P,0.9,success,m,1,5,,0,1,9223372036854775807\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("hf_LINEONE1234\nhf_LINETWO5678\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"classify", in, "--provider", "local", "--batch-size", "1000000000"}, "--batch-size must be between 1 and 1024, got 1000000000"},
		{nil, []string{"classify", in, "--provider", "local", "-c", "10000000"}, "--concurrency must be between 1 and 4096, got 10000000"},
		{nil, []string{"classify", in, "--endpoint", srv.URL, "--breaker-threshold", "NaN"}, "--breaker-threshold must be between 0.01 and 1, got NaN"},
		{nil, []string{"classify", in, "--endpoint", srv.URL, "--rps", "Inf"}, "--rps must be 0 (no limit) or between 0.001 and 100000, got +Inf"},
		{nil, []string{"classify", in, "--endpoint", "http://127.0.0.1:1 /models/x"}, "is not a valid URL"},
		{nil, []string{"classify", in, "--endpoint", "http://[::1:bad/x"}, "is not a valid URL"},
		{nil, []string{"classify", in, "--provider", "local", "--progress", "--no-progress"}, "contradict"},
		{nil, []string{"queue", "push", in, "--batch", "b", "--progress", "--no-progress"}, "--progress and --no-progress contradict each other; give one"},
		{[]string{"HF_TOKEN_PATH=" + tokenFile}, []string{"classify", in, "--endpoint", srv.URL}, "token file " + tokenFile + " has a line break"},
		{nil, []string{"report", huge, "-o", filepath.Join(dir, "x.svg")}, "huge.csv:2: finished_ms 9223372036854775807 is out of range"},
	} {
		r := runBin(t, c.env, c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stderr, "goroutine ") || r.stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, r.code, r.stdout, r.stderr, c.want)
		}
	}
	if f.Calls() != 0 {
		t.Fatalf("%d calls reached the provider", f.Calls())
	}
}
