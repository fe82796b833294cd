package cli

import (
	"net"
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// TestServeUsageErrors: serve's flags are bounded and checked before
// anything listens or is sent (exit 2, naming the flag).
func TestServeUsageErrors(t *testing.T) {
	f := &fakehf.Fake{}
	srv := fakehf.Start(f)
	defer srv.Close()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	ep := []string{"serve", "--endpoint", srv.URL, "--addr", "127.0.0.1:0"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--row-deadline", "5s"}, "--row-deadline is classify's; serve bounds each request with --request-timeout"},
		{[]string{"--admission-wait", "20s", "--request-timeout", "10s"}, "--admission-wait 20s is longer than --request-timeout 10s"},
		{[]string{"--id-pattern", "(ab"}, `--id-pattern "(ab" is not a valid regular expression: missing closing )`},
		{[]string{"--max-body", "10"}, `invalid argument "10" for "--max-body" flag: want a size between 1KiB and 64MiB`},
		{[]string{"--max-body", "65MiB"}, `want a size between 1KiB and 64MiB`},
		{[]string{"--max-body", "1GB"}, `want a size between 1KiB and 64MiB`},
		{[]string{"--max-items", "0"}, "--max-items must be between 1 and 10000, got 0"},
		{[]string{"--max-conns", "0"}, "--max-conns must be between 1 and 1000000, got 0"},
		{[]string{"--body-budget", "100KiB"}, `invalid argument "100KiB" for "--body-budget" flag: want a size between 1MiB and 64GiB`},
		{[]string{"--body-budget", "8MiB", "--max-body", "64MiB"}, "--body-budget 8MiB cannot hold one body of --max-body 64MiB, which is read and decoded in up to 3 times its size plus 64KiB: give at least 196672KiB"},
		{[]string{"--max-id-chars", "0"}, "--max-id-chars must be between 1 and 10000, got 0"},
		{[]string{"--max-chars", "0"}, "--max-chars must be between 1 and 1000000, got 0"},
		{[]string{"--request-timeout", "0s"}, "--request-timeout must be between 1ms and 1h, got 0s"},
		{[]string{"--grace", "0s"}, "--grace must be between 1ms and 1h, got 0s"},
		{[]string{"--batch-wait", "0s"}, "--batch-wait must be between 1ms and 10s, got 0s"},
		{[]string{"--batch-size", "0"}, "--batch-size must be between 1 and 1024, got 0"},
		{[]string{"-c", "4096", "--batch-size", "1024"}, "--concurrency × --batch-size must be at most 65536"},
		{[]string{"--dedupe", "--no-dedupe"}, "--dedupe and --no-dedupe contradict each other"},
		{[]string{"--shed", "--no-shed"}, "--shed and --no-shed contradict each other"},
		{[]string{"--rps", "NaN"}, "--rps must be 0 (no limit) or between 0.001 and 100000, got NaN"},
		{[]string{"--addr", busy.Addr().String()}, "cannot listen on --addr " + busy.Addr().String() + ": bind: address already in use"},
		{[]string{"extra"}, `unknown command "extra" for "hfsent serve"`},
	} {
		r := runMain(t, map[string]string{"HF_TOKEN": token}, "", append(ep, c.args...)...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, c.want) || r.stdout != "" {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
	// No token and no --endpoint: exit 2, as for classify.
	r := runMain(t, nil, "", "serve", "--addr", "127.0.0.1:0")
	if r.code != ExitUsage || !strings.Contains(r.stderr, "no Hugging Face token") {
		t.Errorf("no token: exit %d, stderr %q", r.code, r.stderr)
	}
	if f.Calls() != 0 {
		t.Fatalf("%d calls reached the provider", f.Calls())
	}
	// Serve's own defaults are what --help says.
	help := runMain(t, nil, "", "serve", "--help").stdout
	for _, s := range []string{"(default 35ms)", "multiply the load on a failing provider) (default 1)", "--request-timeout duration", "(default 15s)", "(default 1MiB)", "(default 256)", "(default 5ms)", "(default 128)", "(default 64MiB)", "(default 1024)", `(default "127.0.0.1:8000")`} {
		if !strings.Contains(help, s) {
			t.Errorf("serve --help lacks %q", s)
		}
	}
	if strings.Contains(help, "--row-deadline") {
		t.Errorf("serve --help shows classify's --row-deadline")
	}
}
