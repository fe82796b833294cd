package cli

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// run drives Main as a user would, with captured streams and a controlled
// environment.
type run struct {
	code   int
	stdout string
	stderr string
}

func runMain(t *testing.T, env map[string]string, stdin string, args ...string) run {
	t.Helper()
	var out, errb bytes.Buffer
	ios := &IOStreams{
		In:     strings.NewReader(stdin),
		Out:    &out,
		ErrOut: &errb,
		Getenv: func(k string) string {
			if k == "HOME" {
				if v, ok := env[k]; ok {
					return v
				}
				return t.TempDir() // no token file by accident
			}
			return env[k]
		},
		HardExit: func(code int) { t.Errorf("hard exit %d", code) },
	}
	code := Main(args, ios)
	return run{code: code, stdout: out.String(), stderr: errb.String()}
}

func writeFile(t *testing.T, name, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// parseResults reads a results CSV into maps keyed by column.
func parseResults(t *testing.T, data string) []map[string]string {
	t.Helper()
	recs, err := csv.NewReader(strings.NewReader(data)).ReadAll()
	if err != nil {
		t.Fatalf("results are not CSV: %v\n%s", err, data)
	}
	if len(recs) == 0 {
		t.Fatal("no header")
	}
	var rows []map[string]string
	for _, rec := range recs[1:] {
		m := map[string]string{}
		for i, h := range recs[0] {
			m[h] = rec[i]
		}
		rows = append(rows, m)
	}
	return rows
}

func csvOf(ids ...string) string {
	var b strings.Builder
	b.WriteString("request_id,text\n")
	for _, id := range ids {
		b.WriteString(id + ",text of " + id + "\n")
	}
	return b.String()
}

const token = "hf_TESTSECRET1234567890"

// TestBurstAdmission is the seed's burst: 8 rows at once, -c 3, a 35 ms
// admission wait, 90 ms per call: 3 calls, 5 rows local_capacity.
func TestBurstAdmission(t *testing.T) {
	f := &fakehf.Fake{Latency: 90 * time.Millisecond}
	srv := fakehf.Start(f)
	defer srv.Close()
	in := writeFile(t, "burst.csv", csvOf("B01", "B02", "B03", "B04", "B05", "B06", "B07", "B08"))
	r := runMain(t, map[string]string{"HF_TOKEN": token}, "", "classify", in,
		"--endpoint", srv.URL, "-c", "3", "--admission-wait", "35ms", "--retries", "0")
	if r.code != ExitRowsFailed {
		t.Fatalf("exit %d, want 1\n%s", r.code, r.stderr)
	}
	rows := parseResults(t, r.stdout)
	counts := map[string]int{}
	for _, row := range rows {
		counts[row["outcome"]]++
		if row["outcome"] == "local_capacity" && (row["status"] != "503" || row["attempts"] != "0") {
			t.Errorf("local_capacity row %+v: want status 503 and no attempt", row)
		}
	}
	if len(rows) != 8 || counts["success"] != 3 || counts["local_capacity"] != 5 {
		t.Fatalf("outcomes %v over %d rows, want 3 success + 5 local_capacity", counts, len(rows))
	}
	if f.Calls() != 3 || f.MaxInFlight() > 3 {
		t.Fatalf("fake saw %d calls, %d at once; want 3 and at most 3", f.Calls(), f.MaxInFlight())
	}
	if !strings.Contains(r.stderr, "local_capacity=5") || !strings.Contains(r.stderr, "max_active=3") {
		t.Fatalf("summary line: %s", r.stderr)
	}
}

// TestFailureTable is the seed's failure table, through the binary's code
// path: each failure maps to its outcome and status, and one failing row
// never stops the others.
func TestFailureTable(t *testing.T) {
	replies := map[string]fakehf.Reply{
		"timeout": {Delay: 2 * time.Second},
		"r429":    {Status: 429},
		"r500":    {Status: 500},
		"payload": {Body: `{"unexpected":true}`},
		"r400":    {Status: 400},
	}
	f := &fakehf.Fake{Script: func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
		return replies[strings.TrimPrefix(texts[0], "text of ")]
	}}
	srv := fakehf.Start(f)
	defer srv.Close()
	in := writeFile(t, "table.csv", csvOf("ok1", "timeout", "r429", "r500", "payload", "r400", "ok2"))
	r := runMain(t, map[string]string{"HF_TOKEN": token}, "", "classify", in,
		"--endpoint", srv.URL, "--timeout", "200ms", "--retries", "0")
	if r.code != ExitRowsFailed {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	want := map[string][2]string{
		"ok1": {"success", "200"}, "timeout": {"upstream_timeout", "504"}, "r429": {"upstream_rate_limited", "503"},
		"r500": {"upstream_failed", "502"}, "payload": {"upstream_payload", "502"},
		"r400": {"upstream_request_rejected", "502"}, "ok2": {"success", "200"},
	}
	rows := parseResults(t, r.stdout)
	if len(rows) != len(want) {
		t.Fatalf("%d rows", len(rows))
	}
	for _, row := range rows {
		w := want[row["request_id"]]
		if row["outcome"] != w[0] || row["status"] != w[1] {
			t.Errorf("%s: %s/%s, want %s/%s", row["request_id"], row["outcome"], row["status"], w[0], w[1])
		}
		if !strings.HasPrefix(row["outcome"], "success") && row["error"] == "" {
			t.Errorf("%s: failed row without an error message", row["request_id"])
		}
		if strings.Contains(row["error"], "{") {
			t.Errorf("%s: error echoes a body: %q", row["request_id"], row["error"])
		}
	}
}

// TestAuthStopsTheRun: a 401 stops sending; the rest are not_attempted and
// stderr says the token was rejected, without printing it.
func TestAuthStopsTheRun(t *testing.T) {
	f := &fakehf.Fake{Token: "hf_the_right_one", Latency: 5 * time.Millisecond}
	srv := fakehf.Start(f)
	defer srv.Close()
	ids := make([]string, 50)
	for i := range ids {
		ids[i] = fmt.Sprintf("r%02d", i)
	}
	in := writeFile(t, "auth.csv", csvOf(ids...))
	r := runMain(t, map[string]string{"HF_TOKEN": token}, "", "classify", in, "--endpoint", srv.URL, "-c", "2", "--retries", "0")
	if r.code != ExitRowsFailed {
		t.Fatalf("exit %d", r.code)
	}
	rows := parseResults(t, r.stdout)
	counts := map[string]int{}
	for _, row := range rows {
		counts[row["outcome"]]++
	}
	if len(rows) != 50 || counts["upstream_auth"] < 1 || counts["not_attempted"] < 40 || f.Calls() > 4 {
		t.Fatalf("outcomes %v, %d calls: want a few upstream_auth then not_attempted", counts, f.Calls())
	}
	if !strings.Contains(r.stderr, "rejected the token") {
		t.Fatalf("stderr does not say the token was rejected:\n%s", r.stderr)
	}
	for _, s := range []string{r.stdout, r.stderr} {
		if strings.Contains(s, token) {
			t.Fatal("the token was printed")
		}
	}
}

func TestNoTokenIsUsageError(t *testing.T) {
	f := &fakehf.Fake{}
	srv := fakehf.Start(f)
	defer srv.Close()
	in := writeFile(t, "in.csv", csvOf("a"))
	r := runMain(t, nil, "", "classify", in, "--retries", "0")
	if r.code != ExitUsage || !strings.Contains(r.stderr, "HF_TOKEN") || !strings.Contains(r.stderr, "--provider local") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	// With a custom endpoint the token is optional.
	r = runMain(t, nil, "", "classify", in, "--endpoint", srv.URL, "--retries", "0")
	if r.code != ExitOK {
		t.Fatalf("custom endpoint without token: exit %d: %s", r.code, r.stderr)
	}
	if h := f.Headers(); len(h) != 1 || h[0].Get("Authorization") != "" {
		t.Fatal("no Authorization header expected without a token")
	}
}

func TestTokenNeverPrinted(t *testing.T) {
	f := &fakehf.Fake{Script: func(n int64, _ []string, _ *http.Request) fakehf.Reply {
		if n%2 == 0 {
			return fakehf.Reply{Status: 500, Body: `{"error":"echo ` + token + `"}`}
		}
		return fakehf.Reply{}
	}}
	srv := fakehf.Start(f)
	defer srv.Close()
	in := writeFile(t, "in.csv", csvOf("a", "b", "c", "d"))
	outPath := filepath.Join(t.TempDir(), "out.csv")
	sum := filepath.Join(t.TempDir(), "sum.json")
	r := runMain(t, map[string]string{"HF_TOKEN": token}, "", "classify", in, "--endpoint", srv.URL,
		"-o", outPath, "--summary-json", sum, "--log-level", "debug", "--retries", "0", "--include-text")
	out, _ := os.ReadFile(outPath)
	js, _ := os.ReadFile(sum)
	for name, s := range map[string]string{"stdout": r.stdout, "stderr": r.stderr, "results": string(out), "summary": string(js)} {
		if strings.Contains(s, token) || strings.Contains(s, "TESTSECRET") {
			t.Errorf("the token appears in %s", name)
		}
	}
	if f.Headers()[0].Get("Authorization") != "Bearer "+token {
		t.Fatal("the token was not sent")
	}
}

func TestUsageErrorsBeforeAnyCall(t *testing.T) {
	f := &fakehf.Fake{}
	srv := fakehf.Start(f)
	defer srv.Close()
	good := writeFile(t, "good.csv", csvOf("a"))
	dir := t.TempDir()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"missing file", []string{"classify", filepath.Join(dir, "nope.csv")}, "nope.csv"},
		{"empty file", []string{"classify", writeFile(t, "empty.csv", "")}, "empty.csv: is empty"},
		{"missing column", []string{"classify", good, "--text-column", "body"}, `good.csv:1: header has no text column "body"`},
		{"malformed", []string{"classify", writeFile(t, "bad.csv", "request_id,text\n1,ok\n2,\"open\n3,x\n")}, "bad.csv:3: cannot parse CSV"},
		{"bare quote", []string{"classify", writeFile(t, "bare.csv", "request_id,text\n1,ok\n2,a\"b\n")}, "bare.csv:3:"},
		{"output cannot be created", []string{"classify", good, "-o", filepath.Join(dir, "no", "such", "dir", "out.csv")}, "cannot create output"},
		{"output is input", []string{"classify", good, "-o", good}, "is the input file"},
		{"bad concurrency", []string{"classify", good, "-c", "0"}, "--concurrency"},
		{"bad provider", []string{"classify", good, "--provider", "openai"}, "--provider"},
		{"unknown flag", []string{"classify", good, "--no-such-flag"}, "unknown flag"},
		{"no input", []string{"classify"}, "accepts 1 arg"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append(c.args, "--endpoint", srv.URL, "--retries", "0")
			r := runMain(t, map[string]string{"HF_TOKEN": token}, "", args...)
			if r.code != ExitUsage || !strings.Contains(r.stderr, c.want) {
				t.Fatalf("exit %d, stderr %q; want exit 2 and %q", r.code, r.stderr, c.want)
			}
		})
	}
	if f.Calls() != 0 {
		t.Fatalf("%d calls reached the provider", f.Calls())
	}
}

func TestInvalidRowsAndStdin(t *testing.T) {
	f := &fakehf.Fake{}
	srv := fakehf.Start(f)
	defer srv.Close()
	long := strings.Repeat("é", 11)
	data := "request_id,text,extra\n" +
		"1,fine,\n" +
		",no id,\n" +
		"3,   ,\n" +
		"1,duplicate id,\n" +
		"5," + long + ",\n" +
		"6,too,many,fields\n" +
		"7,\"multi\nline\",\n"
	r := runMain(t, map[string]string{"HF_TOKEN": token}, data, "classify", "-", "--endpoint", srv.URL,
		"--max-chars", "10", "--retries", "0", "--include-text")
	if r.code != ExitRowsFailed {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	rows := parseResults(t, r.stdout)
	want := []string{"success", "invalid_input", "invalid_input", "invalid_input", "invalid_input", "invalid_input", "success"}
	if len(rows) != len(want) {
		t.Fatalf("%d rows", len(rows))
	}
	for i, row := range rows {
		if row["outcome"] != want[i] {
			t.Errorf("row %d (%s): %s (%s), want %s", i, row["request_id"], row["outcome"], row["error"], want[i])
		}
		if row["outcome"] == "invalid_input" && row["status"] != "422" {
			t.Errorf("row %d: status %s", i, row["status"])
		}
	}
	if rows[6]["text"] != "multi\nline" {
		t.Errorf("--include-text: %q", rows[6]["text"])
	}
	if f.Calls() != 2 {
		t.Fatalf("%d calls; invalid rows must never be sent", f.Calls())
	}
}

// TestOrderUnderRandomLatency: results come out in input order whatever
// order the answers arrive in.
func TestOrderUnderRandomLatency(t *testing.T) {
	var mu sync.Mutex
	seq := 0
	f := &fakehf.Fake{Script: func(n int64, _ []string, _ *http.Request) fakehf.Reply {
		mu.Lock()
		defer mu.Unlock()
		seq = (seq*7919 + 13) % 23
		return fakehf.Reply{Delay: time.Duration(seq) * time.Millisecond}
	}}
	srv := fakehf.Start(f)
	defer srv.Close()
	ids := make([]string, 300)
	for i := range ids {
		ids[i] = fmt.Sprintf("id%03d", i)
	}
	r := runMain(t, map[string]string{"HF_TOKEN": token}, csvOf(ids...), "classify", "-", "--endpoint", srv.URL, "-c", "16", "--retries", "0")
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	rows := parseResults(t, r.stdout)
	for i, row := range rows {
		if row["request_id"] != ids[i] {
			t.Fatalf("row %d is %s, want %s", i, row["request_id"], ids[i])
		}
	}
	if len(rows) != len(ids) {
		t.Fatalf("%d rows", len(rows))
	}
}

func TestLocalProviderSample(t *testing.T) {
	r := runMain(t, nil, "", "classify", "../../samples/feedback.csv", "--provider", "local")
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	rows := parseResults(t, r.stdout)
	if len(rows) != 13 || rows[0]["request_id"] != "B01" || rows[12]["request_id"] != "E05" {
		t.Fatalf("%d rows", len(rows))
	}
	for _, row := range rows {
		if row["model"] != "local/vader" || row["outcome"] != "success" || row["label"] == "" {
			t.Fatalf("row %+v", row)
		}
	}
}
