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

const checkToken = "hf_checkSecret0123456789"

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fake   *fakehf.Fake
		env    map[string]string
		want   int
		expect []string
	}{
		{
			name: "nested answer, token from HF_TOKEN",
			fake: &fakehf.Fake{Token: checkToken},
			env:  map[string]string{"HF_TOKEN": checkToken},
			want: ExitOK,
			expect: []string{"token:    found (HF_TOKEN)", "status:   200 OK", "latency:  ", "shape:    nested",
				"label:    POSITIVE (score 0.9987)", "result:   ok: a batch would work"},
		},
		{
			name:   "flat answer, no token needed with --endpoint",
			fake:   &fakehf.Fake{Flat: true},
			env:    map[string]string{"HOME": "/nonexistent"},
			want:   ExitOK,
			expect: []string{"token:    not found (none sent; not required with --endpoint)", "shape:    flat", "result:   ok"},
		},
		{
			name:   "token rejected",
			fake:   &fakehf.Fake{Token: "hf_other"},
			env:    map[string]string{"HF_TOKEN": checkToken},
			want:   ExitCheckFailed,
			expect: []string{"status:   401 Unauthorized", "outcome:  upstream_auth", "result:   FAIL: token rejected"},
		},
		{
			name: "not a classification",
			fake: &fakehf.Fake{Script: func(int64, []string, *http.Request) fakehf.Reply {
				return fakehf.Reply{Body: `{"generated_text":"hello"}`}
			}},
			want:   ExitCheckFailed,
			expect: []string{"status:   200 OK", "shape:    not a classification answer", "outcome:  upstream_payload"},
		},
		{
			name: "model loading is waited for",
			fake: &fakehf.Fake{Script: func(_ int64, _ []string, r *http.Request) fakehf.Reply {
				if r.Header.Get("X-Wait-For-Model") != "1" {
					return fakehf.Reply{Status: 503, Body: `{"error":"Model is currently loading","estimated_time":20}`}
				}
				return fakehf.Reply{}
			}},
			want:   ExitOK,
			expect: []string{"result:   ok"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.fake
			srv := fakehf.Start(f)
			defer srv.Close()
			code, out, stderr := ciRun(t, tc.env, "check", "--endpoint", srv.URL+"/models/{model}", "--timeout", "5s")
			if code != tc.want {
				t.Errorf("exit %d, want %d\n%s%s", code, tc.want, out, stderr)
			}
			for _, want := range tc.expect {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			if !strings.Contains(out, "endpoint: "+srv.URL+"/models/distilbert/") {
				t.Errorf("output does not name the endpoint with the model filled in:\n%s", out)
			}
			if strings.Contains(out+stderr, checkToken) {
				t.Errorf("the token value was printed:\n%s%s", out, stderr)
			}
			if f.Calls() != 1 {
				t.Errorf("check made %d calls, want exactly 1", f.Calls())
			}
		})
	}
}

func TestCheckTokenFile(t *testing.T) {
	srv := fakehf.Start(&fakehf.Fake{Token: checkToken})
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(checkToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ := ciRun(t, map[string]string{"HF_TOKEN_PATH": path}, "check", "--endpoint", srv.URL)
	if code != ExitOK || !strings.Contains(out, "token:    found ("+path+")") || strings.Contains(out, checkToken) {
		t.Errorf("exit %d, output:\n%s", code, out)
	}
}

func TestCheckNoTokenSendsNothing(t *testing.T) {
	// The default endpoint with no token: nothing may be sent anywhere.
	start := time.Now()
	code, out, _ := ciRun(t, map[string]string{"HOME": t.TempDir()}, "check")
	if code != ExitCheckFailed {
		t.Errorf("exit %d, want 1", code)
	}
	for _, want := range []string{"token:    not found (looked in HF_TOKEN and ", "endpoint: https://router.huggingface.co/", "result:   FAIL: no Hugging Face token"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "status:") || time.Since(start) > 5*time.Second {
		t.Errorf("check seems to have called out without a token:\n%s", out)
	}
}

func TestCheckBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"check", "--timeout", "0s"},
		{"check", "--model", " "},
		{"check", "--endpoint", "ftp://x"},
		{"check", "extra-arg"},
	} {
		if code, _, _ := ciRun(t, map[string]string{"HF_TOKEN": "x"}, args...); code != ExitUsage {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// A model that is loading answers 503 with an estimated_time even to
// X-Wait-For-Model (a dedicated endpoint scaling from zero does): check waits
// as long as it says and asks again, up to --timeout.
func TestCheckWaitsForLoadingModel(t *testing.T) {
	loading := func(upTo int64, est string) *fakehf.Fake {
		return &fakehf.Fake{Script: func(n int64, _ []string, _ *http.Request) fakehf.Reply {
			if n <= upTo {
				return fakehf.Reply{Status: 503, Body: `{"error":"Model distilbert/x is currently loading","estimated_time":` + est + `}`}
			}
			return fakehf.Reply{}
		}}
	}
	for _, tc := range []struct {
		name      string
		fake      *fakehf.Fake
		timeout   string
		want      int
		calls     int64 // -n: at least n
		expect    []string
		stderrHas string
	}{
		{"ready after two waits", loading(2, "0.2"), "10s", ExitOK, 3,
			[]string{"status:   200 OK", "loading:  model loading, ready after ", "label:    POSITIVE", "result:   ok"},
			"model loading, ready in about 0.2 s"},
		// 0.3 s waits in 1 s: 4 calls, fewer on a slow machine.
		{"still loading when --timeout is spent", loading(1000, "0.3"), "1s", ExitCheckFailed, -2,
			[]string{"status:   503 Service Unavailable", "loading:  model still loading after", "result:   FAIL: the model is still loading at the end of --timeout 1s", "raise --timeout"},
			"waiting (up to --timeout 1s)"},
		{"an estimate beyond --timeout is not waited for", loading(1000, "120"), "2s", ExitCheckFailed, 1,
			[]string{"loading:  model still loading after ", "ready in about 120 s", "raise --timeout"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := fakehf.Start(tc.fake)
			defer srv.Close()
			code, out, stderr := ciRun(t, nil, "check", "--endpoint", srv.URL+"/models/{model}", "--timeout", tc.timeout)
			if code != tc.want {
				t.Errorf("exit %d, want %d\n%s%s", code, tc.want, out, stderr)
			}
			for _, want := range tc.expect {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			if !strings.Contains(stderr, tc.stderrHas) {
				t.Errorf("stderr lacks %q:\n%s", tc.stderrHas, stderr)
			}
			if strings.Contains(out, "down or unreachable") {
				t.Errorf("a loading model reported as down:\n%s", out)
			}
			if got := tc.fake.Calls(); got != tc.calls && (tc.calls > 0 || got < -tc.calls) {
				t.Errorf("%d calls, want %d (negative: at least)", got, tc.calls)
			}
		})
	}
}

// check's sample goes through the same guard as a batch's rows, but only a
// provider warming up is asked again: a 500 or a 429 is its answer, reported
// after one call, with the outcome table's advice.
func TestCheckReportsOtherFailuresAtOnce(t *testing.T) {
	for _, tc := range []struct {
		status int
		expect []string
	}{
		{500, []string{"status:   500 Internal Server Error", "outcome:  upstream_failed", "result:   FAIL: server error: the endpoint is down or unreachable"}},
		{429, []string{"status:   429 Too Many Requests", "outcome:  upstream_rate_limited", "a batch would be throttled (see --rps)"}},
	} {
		f := &fakehf.Fake{Script: func(int64, []string, *http.Request) fakehf.Reply { return fakehf.Reply{Status: tc.status} }}
		srv := fakehf.Start(f)
		code, out, stderr := ciRun(t, nil, "check", "--endpoint", srv.URL, "--timeout", "5s")
		srv.Close()
		if code != ExitCheckFailed || f.Calls() != 1 {
			t.Errorf("HTTP %d: exit %d after %d calls, want 1 after exactly one\n%s%s", tc.status, code, f.Calls(), out, stderr)
		}
		for _, want := range tc.expect {
			if !strings.Contains(out, want) {
				t.Errorf("HTTP %d: output lacks %q:\n%s", tc.status, want, out)
			}
		}
	}
}
