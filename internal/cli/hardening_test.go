package cli

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// Secrets planted in --endpoint; none may appear anywhere.
const (
	endpointPassword = "PWSECRET9871"
	endpointKey      = "QSECRET6543"
)

func secretEndpoint(hostport string) string {
	return "http://user:" + endpointPassword + "@" + hostport + "/m?api_key=" + endpointKey
}

func assertNoEndpointSecret(t *testing.T, what string, texts ...string) {
	t.Helper()
	for _, s := range texts {
		if strings.Contains(s, endpointPassword) || strings.Contains(s, endpointKey) {
			t.Fatalf("%s shows a credential from --endpoint:\n%s", what, s)
		}
	}
}

// TestEndpointCredentialsNeverShown: check's endpoint line, debug logs,
// results, connection failures and the errors for a malformed endpoint show
// the URL with userinfo and query values redacted.
func TestEndpointCredentialsNeverShown(t *testing.T) {
	f := &fakehf.Fake{}
	srv := fakehf.Start(f)
	defer srv.Close()
	hostport := strings.TrimPrefix(srv.URL, "http://")
	ep := secretEndpoint(hostport)

	r := runMain(t, nil, "", "check", "--endpoint", ep)
	if r.code != ExitOK || !strings.Contains(r.stdout, "endpoint: http://REDACTED@"+hostport+"/m?api_key=REDACTED") {
		t.Fatalf("check: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	assertNoEndpointSecret(t, "check", r.stdout, r.stderr)

	in := writeFile(t, "in.csv", csvOf("a", "b"))
	out := filepath.Join(t.TempDir(), "out.csv")
	r = runMain(t, map[string]string{"HF_TOKEN": token}, "", "classify", in, "--endpoint", ep, "--log-level", "debug",
		"--retries", "0", "--include-text", "-o", out)
	res, _ := os.ReadFile(out)
	if r.code != ExitOK || !strings.Contains(r.stderr, "url=") || !strings.Contains(r.stderr, "REDACTED") {
		t.Fatalf("classify: exit %d, the debug log does not show the redacted url:\n%s", r.code, r.stderr)
	}
	assertNoEndpointSecret(t, "classify", r.stdout, r.stderr, string(res))
	if f.Calls() != 3 {
		t.Fatalf("%d calls, want 3 (check, then two rows)", f.Calls())
	}

	// Nothing listens there: the connection error must not show it either.
	dead := fakehf.Start(&fakehf.Fake{})
	deadEP := secretEndpoint(strings.TrimPrefix(dead.URL, "http://"))
	dead.Close()
	r = runMain(t, nil, "", "check", "--endpoint", deadEP, "--log-level", "debug")
	if r.code != ExitCheckFailed {
		t.Fatalf("check on a dead endpoint: exit %d", r.code)
	}
	assertNoEndpointSecret(t, "check on a dead endpoint", r.stdout, r.stderr)
	r = runMain(t, nil, "", "classify", in, "--endpoint", deadEP, "--log-level", "debug", "--retries", "0", "--include-text")
	if r.code != ExitRowsFailed {
		t.Fatalf("classify on a dead endpoint: exit %d\n%s", r.code, r.stderr)
	}
	assertNoEndpointSecret(t, "classify on a dead endpoint", r.stdout, r.stderr)

	// Malformed, or the wrong scheme: refused, redacted.
	for _, bad := range []string{
		"http://user:" + endpointPassword + "@127.0.0.1:1 /m?api_key=" + endpointKey,
		"ftp://user:" + endpointPassword + "@" + hostport + "/m?api_key=" + endpointKey,
		"http://user:" + endpointPassword + "@[::1:bad/m?api_key=" + endpointKey,
	} {
		for _, cmd := range [][]string{{"check"}, {"classify", in, "--log-level", "debug", "--retries", "0"}} {
			r = runMain(t, nil, "", append(cmd, "--endpoint", bad)...)
			if r.code != ExitUsage || !strings.Contains(r.stderr, "--endpoint") || !strings.Contains(r.stderr, "REDACTED") {
				t.Fatalf("%s --endpoint %s: exit %d\n%s%s", cmd[0], bad, r.code, r.stdout, r.stderr)
			}
			assertNoEndpointSecret(t, cmd[0]+" with a malformed endpoint", r.stdout, r.stderr)
		}
	}
	if f.Calls() != 3 {
		t.Fatalf("%d calls reached the fake", f.Calls())
	}
}

// TestTokenWithLineBreak: a two-line token file, or HF_TOKEN with a line
// break inside, is refused when read (classify exit 2, check FAIL), naming
// the source and never the token; nothing is sent.
func TestTokenWithLineBreak(t *testing.T) {
	f := &fakehf.Fake{}
	srv := fakehf.Start(f)
	defer srv.Close()
	in := writeFile(t, "in.csv", csvOf("a"))
	tokenFile := writeFile(t, "token", "hf_LINEONE1234\nhf_LINETWO5678\n")
	for name, env := range map[string]map[string]string{
		"HF_TOKEN":                {"HF_TOKEN": "hf_LINEONE1234\nhf_LINETWO5678"},
		"token file " + tokenFile: {"HF_TOKEN_PATH": tokenFile},
	} {
		r := runMain(t, env, "", "classify", in, "--endpoint", srv.URL, "--retries", "0")
		if r.code != ExitUsage || !strings.Contains(r.stderr, name+" has a line break") {
			t.Errorf("classify, %s: exit %d, stderr %q", name, r.code, r.stderr)
		}
		c := runMain(t, env, "", "check", "--endpoint", srv.URL)
		if c.code != ExitCheckFailed || !strings.Contains(c.stdout, name+" has a line break") || !strings.Contains(c.stdout, "result:   FAIL") {
			t.Errorf("check, %s: exit %d\n%s", name, c.code, c.stdout)
		}
		for _, s := range []string{r.stdout, r.stderr, c.stdout, c.stderr} {
			if strings.Contains(s, "LINEONE") || strings.Contains(s, "LINETWO") {
				t.Fatalf("the token was printed: %s", s)
			}
		}
	}
	if f.Calls() != 0 {
		t.Fatalf("%d calls were sent with a broken token", f.Calls())
	}
}

// TestFormulaGuard: text, label and error that begin with = + - @ tab or CR
// are written with a leading ' (the id as it is); --raw-csv writes them
// raw; --resume reads the guarded rows back and rewrites them unchanged.
func TestFormulaGuard(t *testing.T) {
	f := &fakehf.Fake{Script: func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
		if strings.HasPrefix(texts[0], "@") {
			return fakehf.Reply{Body: `[[{"label":"=cmd|' /C calc'!A0","score":0.9}]]`}
		}
		return fakehf.Reply{Body: `[[{"label":"-1","score":0.8}]]`}
	}}
	srv := fakehf.Start(f)
	defer srv.Close()
	in := writeFile(t, "in.csv", "request_id,text\n"+
		"=id1,\"=HYPERLINK(\"\"http://evil.example\"\",\"\"click\"\")\"\n"+
		"id2,@SUM(1+1)\n"+
		"id3,'=quoted already\n"+
		"id4,plain text\n")
	out := filepath.Join(t.TempDir(), "out.csv")
	args := []string{"classify", in, "--endpoint", srv.URL, "--retries", "0", "--include-text", "-o", out}
	if r := runMain(t, nil, "", args...); r.code != ExitOK {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	first, _ := os.ReadFile(out)
	rows := parseResults(t, string(first))
	want := []map[string]string{
		{"request_id": "=id1", "label": "'-1", "text": `'=HYPERLINK("http://evil.example","click")`},
		{"request_id": "id2", "label": "'=cmd|' /C calc'!A0", "text": "'@SUM(1+1)"},
		{"request_id": "id3", "label": "'-1", "text": "''=quoted already"},
		{"request_id": "id4", "label": "'-1", "text": "plain text"},
	}
	for i, w := range want {
		for k, v := range w {
			if rows[i][k] != v {
				t.Errorf("row %d %s = %q, want %q", i, k, rows[i][k], v)
			}
		}
	}

	// --resume keeps every row (all final) and rewrites them: byte for byte.
	if r := runMain(t, nil, "", append(args, "--resume")...); r.code != ExitOK {
		t.Fatalf("resume: exit %d\n%s", r.code, r.stderr)
	}
	if again, _ := os.ReadFile(out); string(again) != string(first) {
		t.Fatalf("--resume changed the guarded rows:\n%s\nwas\n%s", again, first)
	}
	calls := f.Calls()

	// The picture reads the guarded file.
	if code, _, stderr := ciRun(t, nil, "report", out, "-o", filepath.Join(t.TempDir(), "run.svg")); code != ExitOK {
		t.Fatalf("report: exit %d\n%s", code, stderr)
	}

	r := runMain(t, nil, "", "classify", in, "--endpoint", srv.URL, "--retries", "0", "--include-text", "--raw-csv")
	if r.code != ExitOK {
		t.Fatalf("--raw-csv: exit %d\n%s", r.code, r.stderr)
	}
	rows = parseResults(t, r.stdout)
	if rows[0]["label"] != "-1" || rows[0]["text"] != `=HYPERLINK("http://evil.example","click")` || rows[1]["text"] != "@SUM(1+1)" || rows[2]["text"] != "'=quoted already" {
		t.Fatalf("--raw-csv guarded a field: %v", rows)
	}
	if f.Calls() != calls+4 {
		t.Fatalf("resume sent %d calls for final rows", calls-4)
	}
}

// TestNumericFlagBounds: every numeric flag is bounded; a value out of
// range, NaN or ±Inf is exit 2 with the range in the message, before any
// call. Without the bounds, --batch-size 1e9 ran out of memory, -c 1e7 took
// gigabytes and --breaker-threshold NaN panicked inside failsafe-go.
func TestNumericFlagBounds(t *testing.T) {
	f := &fakehf.Fake{}
	srv := fakehf.Start(f)
	defer srv.Close()
	in := writeFile(t, "in.csv", csvOf("a", "b"))
	results := writeFile(t, "results.csv", "request_id,status,label,score,outcome,model,attempts,latency_ms,error,queued_ms,started_ms,finished_ms\na,200,P,0.9,success,m,1,5,,0,1,6\n")
	svg := filepath.Join(t.TempDir(), "x.svg")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--batch-size", "1000000000"}, "--batch-size must be between 1 and 1024, got 1000000000"},
		{[]string{"--batch-size", "0"}, "--batch-size must be between 1 and 1024, got 0"},
		{[]string{"-c", "10000000"}, "--concurrency must be between 1 and 4096, got 10000000"},
		{[]string{"-c", "4096", "--batch-size", "1024"}, "--concurrency × --batch-size must be at most 65536"},
		{[]string{"--breaker-threshold", "NaN"}, "--breaker-threshold must be between 0.01 and 1, got NaN"},
		{[]string{"--breaker-threshold", "0"}, "--breaker-threshold must be between 0.01 and 1, got 0"},
		{[]string{"--rps", "NaN"}, "--rps must be 0 (no limit) or between 0.001 and 100000, got NaN"},
		{[]string{"--rps", "Inf"}, "--rps must be 0 (no limit) or between 0.001 and 100000, got +Inf"},
		{[]string{"--rps", "-Inf"}, "got -Inf"},
		{[]string{"--rps", "1e-300"}, "--rps must be 0 (no limit) or between"},
		{[]string{"--burst", "0"}, "--burst must be between 1 and 10000, got 0"},
		{[]string{"--retries", "-1"}, "--retries must be between 0 and 100, got -1"},
		{[]string{"--retries", "1000000"}, "--retries must be between 0 and 100"},
		{[]string{"--max-chars", "0"}, "--max-chars must be between 1 and 1000000, got 0"},
		{[]string{"--breaker-min-calls", "0"}, "--breaker-min-calls must be between 1 and 100000, got 0"},
		{[]string{"--timeout", "0s"}, "--timeout must be between 1ms and 1h, got 0s"},
		{[]string{"--timeout", "-5s"}, "--timeout must be between 1ms and 1h, got -5s"},
		{[]string{"--connect-timeout", "2000h"}, "--connect-timeout must be between 1ms and 10m, got 2000h"},
		{[]string{"--row-deadline", "100000h"}, "--row-deadline must be between 1ms and 24h, got 100000h"},
		{[]string{"--admission-wait", "-1s"}, "--admission-wait must be between 0s and 1h, got -1s"},
		{[]string{"--breaker-window", "1ns"}, "--breaker-window must be between 100ms and 24h, got 1ns"},
		{[]string{"--breaker-cooldown", "0s"}, "--breaker-cooldown must be between 1ms and 24h, got 0s"},
		{[]string{"--max-duration", "-1s"}, "--max-duration must be between 0s and 8760h, got -1s"},
		{[]string{"--max-duration", "2000000h"}, "--max-duration must be between 0s and 8760h"},
		{[]string{"--provider", "local", "--batch-size", "1000000000"}, "--batch-size must be between"},
	}
	for _, c := range cases {
		args := append([]string{"classify", in, "--endpoint", srv.URL}, c.args...)
		r := runMain(t, map[string]string{"HF_TOKEN": token}, "", args...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, c.want) || r.stdout != "" {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"check", "--endpoint", srv.URL, "--timeout", "0s"}, "--timeout must be between 1ms and 1h, got 0s"},
		{[]string{"check", "--endpoint", srv.URL, "--connect-timeout", "-1s"}, "--connect-timeout must be between 1ms and 10m, got -1s"},
		{[]string{"report", results, "-o", svg, "--max-bars", "0"}, "--max-bars must be between 1 and 100000, got 0"},
		{[]string{"report", results, "-o", svg, "--max-bars", "2000000000"}, "--max-bars must be between 1 and 100000"},
	} {
		r := runMain(t, nil, "", c.args...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
	if f.Calls() != 0 {
		t.Fatalf("%d calls reached the provider", f.Calls())
	}
	// The ranges are in --help.
	help := runMain(t, nil, "", "classify", "--help").stdout
	for _, s := range []string{"(1-1024)", "(1-4096;", "0.001-100000", "(0.01-1)", "(1ms-1h)", "(0-100)", "(100ms-24h)", "up to 8760h"} {
		if !strings.Contains(help, s) {
			t.Errorf("classify --help does not show the range %q", s)
		}
	}
}

// TestMalformedEndpointRefused: an endpoint net/url cannot parse, with no
// host, another scheme, {model} in the host or a model id that breaks it is
// exit 2 before any call (it used to run every row into circuit_open).
func TestMalformedEndpointRefused(t *testing.T) {
	in := writeFile(t, "in.csv", csvOf("a"))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--endpoint", "http://127.0.0.1:1 /models/x"}, `--endpoint "http://127.0.0.1:1 /models/x" is not a valid URL`},
		{[]string{"--endpoint", "http://[::1:bad/x"}, "is not a valid URL"},
		{[]string{"--endpoint", "http:///models/x"}, "has no host"},
		{[]string{"--endpoint", "ftp://127.0.0.1/x"}, "is not an http:// or https:// URL"},
		{[]string{"--endpoint", "127.0.0.1:8080/x"}, "is not an http:// or https:// URL"},
		{[]string{"--endpoint", "http://{model}.example.com/x"}, "{model} in its host"},
		{[]string{"--endpoint", "http://127.0.0.1:70000/x"}, "port is not between 1 and 65535"},
		{[]string{"--endpoint", "http://127.0.0.1:1/{model}", "--model", "a%zz"}, `--model: "http://127.0.0.1:1/{model}" with the model id "a%zz"`},
		{[]string{"--endpoint", "http://127.0.0.1:1/{model}", "--fallback-model", "b%zz"}, `--fallback-model: "http://127.0.0.1:1/{model}" with the model id "b%zz"`},
	} {
		for _, cmd := range [][]string{{"classify", in, "--retries", "0", "--row-deadline", "2s"}, {"check"}} {
			if cmd[0] == "check" && strings.Contains(c.want, "fallback") {
				continue
			}
			r := runMain(t, map[string]string{"HF_TOKEN": token}, "", append(cmd, c.args...)...)
			if r.code != ExitUsage || !strings.Contains(r.stderr, c.want) {
				t.Errorf("%s %v: exit %d, stderr %q; want exit 2 and %q", cmd[0], c.args, r.code, r.stderr, c.want)
			}
		}
	}
}

// TestReportTimelineBounds: a results row whose time is out of range is an
// error naming the file and its line; it used to spin for ever.
func TestReportTimelineBounds(t *testing.T) {
	results := writeFile(t, "huge.csv", "request_id,status,label,score,outcome,model,attempts,latency_ms,error,queued_ms,started_ms,finished_ms,text\n"+
		"a,200,P,0.9,success,m,1,5,,0,1,6,\"two\nlines\"\n"+
		"b,200,P,0.9,success,m,1,5,,0,1,9223372036854775807,x\n")
	done := make(chan run, 1)
	go func() { done <- runMain(t, nil, "", "report", results, "-o", filepath.Join(t.TempDir(), "x.svg")) }()
	select {
	case r := <-done:
		if r.code != ExitUsage || !strings.Contains(r.stderr, "huge.csv:4: finished_ms 9223372036854775807 is out of range") {
			t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("report did not end on a row finished at the int64 limit")
	}
}

// TestContradictoryAndIgnoredFlags: --progress with --no-progress is
// refused; with --provider local the flags for the Hugging Face API are
// named in a warning rather than ignored in silence.
func TestContradictoryAndIgnoredFlags(t *testing.T) {
	in := writeFile(t, "in.csv", csvOf("a"))
	for _, args := range [][]string{{"--progress", "--no-progress"}, {"--dedupe", "--no-dedupe"}} {
		r := runMain(t, nil, "", append([]string{"classify", in, "--provider", "local"}, args...)...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, "contradict") {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	r := runMain(t, nil, "", "classify", in, "--provider", "local", "--endpoint", "http://127.0.0.1:1/x", "--rps", "5", "--fallback-model", "a/b", "-c", "2")
	if r.code != ExitOK {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "level=WARN") || !strings.Contains(r.stderr, "--provider local ignores --endpoint, --rps, --fallback-model") || strings.Contains(r.stderr, "-c") {
		t.Fatalf("no warning naming the ignored flags (and only them):\n%s", r.stderr)
	}
	if r := runMain(t, nil, "", "classify", in, "--provider", "local", "-c", "2"); strings.Contains(r.stderr, "WARN") {
		t.Fatalf("a warning with nothing ignored:\n%s", r.stderr)
	}
}
