package cli

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// check waits for a dedicated endpoint scaled to zero as it waits for a
// loading model, saying so: its 503, then the same call with
// X-Scale-Up-Timeout, held by the proxy until the replica is up. Before,
// check failed at once.
func TestCheckWaitsForAColdEndpoint(t *testing.T) {
	proxy := &fakehf.ScaledToZero{Inner: fakehf.Handler(&fakehf.Fake{}), StartUp: 1500 * time.Millisecond}
	srv := httptest.NewServer(proxy)
	defer srv.Close()
	code, out, stderr := ciRun(t, nil, "check", "--endpoint", srv.URL, "--timeout", "20s")
	if code != ExitOK || !strings.Contains(out, "scale-up: the endpoint answered 503 (scaled to zero?), ready after") || !strings.Contains(out, "result:   ok") {
		t.Fatalf("exit %d:\n%s%s", code, out, stderr)
	}
	if !strings.Contains(stderr, "it may be scaled to zero and starting a replica; asking again with X-Scale-Up-Timeout") {
		t.Fatalf("check did not say what it waits for:\n%s", stderr)
	}
	if proxy.Calls() != 2 || proxy.Held() != 1 {
		t.Fatalf("%d calls, %d held; want the 503 and one held call", proxy.Calls(), proxy.Held())
	}

	// Still starting at the end of --timeout: the advice to raise it.
	slow := &fakehf.ScaledToZero{Inner: fakehf.Handler(&fakehf.Fake{}), StartUp: time.Hour}
	srv2 := httptest.NewServer(slow)
	defer srv2.Close()
	code, out, _ = ciRun(t, nil, "check", "--endpoint", srv2.URL, "--timeout", "2s")
	if code != ExitCheckFailed || !strings.Contains(out, "raise --timeout") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

// check names a TEI endpoint's request form, sends --bill-to, and shows
// what the server said and its request id when it refuses.
func TestCheckTEIBillToAndReason(t *testing.T) {
	tei := httptest.NewServer(&fakehf.TEI{})
	defer tei.Close()
	code, out, stderr := ciRun(t, nil, "check", "--endpoint", tei.URL+"/predict")
	if code != ExitOK || !strings.Contains(out, "api:      tei") || !strings.Contains(out, "shape:    flat") {
		t.Fatalf("exit %d:\n%s%s", code, out, stderr)
	}

	f := &fakehf.Fake{Script: fakehf.Load("router_402_depleted").Script()}
	srv := fakehf.Start(f)
	defer srv.Close()
	code, out, _ = ciRun(t, map[string]string{"HF_TOKEN": checkToken}, "check", "--endpoint", srv.URL, "--bill-to", "acme-research")
	for _, want := range []string{"bill to:  acme-research (X-HF-Bill-To)", "outcome:  upstream_quota",
		`reason:   "You have depleted your monthly included credits.`, "request:  Root=1-6807a1b2-0c5f2a6e3d1b4c7e8f9a0b1c", "--bill-to ORG"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if code != ExitCheckFailed || f.Headers()[0].Get("X-HF-Bill-To") != "acme-research" {
		t.Fatalf("exit %d, X-HF-Bill-To %q", code, f.Headers()[0].Get("X-HF-Bill-To"))
	}
}

// The new flags are checked before any call.
func TestEndpointFlagsRefusedBeforeAnyCall(t *testing.T) {
	in := writeRows(t, 3)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"classify", in, "--provider", "tei"}, "--provider tei needs --endpoint"},
		{[]string{"classify", in, "--provider", "openai"}, "want hf, tei, chat or local"},
		{[]string{"classify", in, "--bill-to", "acme corp"}, "--bill-to \"acme corp\""},
		{[]string{"classify", in, "--bill-to", strings.Repeat("a", 97)}, "at most 96 characters"},
		{[]string{"check", "--provider", "local"}, "want hf, tei or chat"},
		{[]string{"check", "--bill-to", "a\r\nX-Evil: 1"}, "--bill-to"},
		{[]string{"serve", "--provider", "tei"}, "--provider tei needs --endpoint"},
	} {
		r := runMain(t, map[string]string{"HF_TOKEN": "hf_x"}, "", c.args...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, want 2 with %q:\n%s", c.args, r.code, c.want, r.stderr)
		}
	}
}

// --provider tei (or an --endpoint ending in /predict) speaks TEI's batch
// form: every label right with --batch-size 8, one call per batch. The
// response cache is off: with two distinct texts, a batch formed after the
// first one was answered would be answered from it, one call fewer.
func TestClassifyTEI(t *testing.T) {
	tei := &fakehf.TEI{}
	srv := httptest.NewServer(tei)
	defer srv.Close()
	var b strings.Builder
	b.WriteString("request_id,text\n")
	for i := range 32 {
		if i%2 == 0 {
			b.WriteString(fmt.Sprintf("r%d,a lovely repair\n", i))
		} else {
			b.WriteString(fmt.Sprintf("r%d,a terrible repair\n", i))
		}
	}
	in := writeFile(t, "in.csv", b.String())
	for _, args := range [][]string{{"--provider", "tei", "--endpoint", srv.URL}, {"--endpoint", srv.URL + "/predict"}} {
		before := tei.Calls()
		out := filepath.Join(t.TempDir(), "out.csv")
		r := runMain(t, nil, "", append([]string{"classify", in, "-o", out, "--batch-size", "8", "--no-dedupe", "--no-cache", "--no-progress"}, args...)...)
		data, _ := os.ReadFile(out)
		rows := parseResults(t, string(data))
		if r.code != ExitOK || len(rows) != 32 {
			t.Fatalf("%v: exit %d, %d rows\n%s", args, r.code, len(rows), r.stderr)
		}
		for i, row := range rows {
			want := "POSITIVE"
			if i%2 == 1 {
				want = "NEGATIVE"
			}
			if row["label"] != want {
				t.Fatalf("%v: row %d labelled %s, want %s", args, i, row["label"], want)
			}
		}
		if n := tei.Calls() - before; n != 4 {
			t.Fatalf("%v: %d calls for 32 rows at --batch-size 8", args, n)
		}
	}
}

// A 402 reads as the server said it, and --bill-to is named as a way out:
// "no credits left" and "pay-as-you-go off" are told apart.
func TestQuotaStopSaysTheServersReason(t *testing.T) {
	f := &fakehf.Fake{Script: fakehf.Load("router_402_depleted").Script()}
	srv := fakehf.Start(f)
	defer srv.Close()
	res := classify(t, srv.URL, writeRows(t, 20), "-c", "1")
	if res.code != ExitRowsFailed || !strings.Contains(res.stderr, "depleted your monthly included credits") || !strings.Contains(res.stderr, "--bill-to ORG") {
		t.Fatalf("exit %d:\n%s", res.code, res.stderr)
	}
	if e := res.rows[0]["error"]; !strings.Contains(e, `HTTP 402: payment required: "You have depleted`) || !strings.Contains(e, "(request id Root=1-6807a1b2-") {
		t.Fatalf("error column %q", e)
	}
}
